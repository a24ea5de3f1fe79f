"""What the framework tests compare between runs: a digest of parameters, optimizer and scheduler
state, exact to the bit, and the losses as the run saw them."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import torch


def digest(value: Any) -> str:
    """A hash of `value`'s tensors (their bytes, dtype and shape) and plain values, in a stable order."""
    hasher = hashlib.sha256()
    _feed(hasher, value)
    return hasher.hexdigest()[:16]


def _feed(hasher: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        hasher.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, dict):
        for key in sorted(value, key=repr):
            hasher.update(repr(key).encode())
            _feed(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _feed(hasher, item)
    else:
        hasher.update(repr(value).encode())


def write(result: dict[str, Any]) -> None:
    """Write `result` as JSON to the file the script's first argument names."""
    with open(sys.argv[1], "w") as stream:
        json.dump(result, stream, indent=1, sort_keys=True)
