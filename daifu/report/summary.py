"""Bounded, redacted summaries of live values, for crash reports.

A crash report travels to the repair bot and may be shown or stored, so a summary never holds a
whole value: a tensor is described by shape, dtype and device, a model by class and size, a
container by length and a few items. Secrets are kept out by name (a variable called `api_key`),
by key (a dict entry under `"Authorization"`, a copy of the environment) and by value
(`daifu.report.redact`, on every text and string fact). Each summary is a short text plus a few `facts` (plain
JSON values) that the rules engine reads without parsing the text.

PyTorch is looked at only when the user's program already imported it, so DaiFu runs without it.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from collections.abc import Mapping

from daifu.core.bounded import TimedOut, bounded, describe
from daifu.report.redact import is_secret_key, looks_like_environment, redact

MAX_TEXT = 300
"""Characters in one summary's text."""
SECONDS = 1.0
"""How long summarising one value may take: it may run the value's own code (`__repr__`, `__len__`, a
`__class__` property), which may block; past this the value is described as `<repr timed out>`."""
MAX_FACTS = 24
"""Facts of one summary; more are cut, and the summary's `cut` fact says so."""
MAX_FACT_TEXT = 200
"""Characters of one string fact (a path, a setting, a module's name)."""
MAX_FACT_ITEMS = 50
"""Items of one list fact (a model's linear layers)."""
_HYPER = 16
"""Settings of an optimizer's param group shown (torch's own come first: an Adam has 12)."""
_SETTING_CHARS = 40
_KEY_CHARS = 100
_NATIVE = frozenset({type(None), bool, int, float, complex})
"""Types summarised without a deadline: reading them runs no user code (nor does reading a plain tensor)."""
_SMALL_TENSOR = 1_000_000
"""Elements up to which min/max/mean and NaN counts are computed; a bigger tensor costs too much."""
_ITEMS = 3
_LISTING = 2000
"""Directory entries read to find a near name for a missing path."""
_SECRET = re.compile(r"key|token|secret|passw|credential", re.IGNORECASE)
_PATHLIKE = re.compile(r"^(~|\.{1,2})?[\w.~-]*[/\\]|\.(pt|pth|ckpt|bin|safetensors|json|ya?ml|csv|txt|npy|npz|pkl)$")

Fact = str | int | float | bool | None | list[Any]


@dataclass
class Summary:
    """What a report says about one value: its type, a short text, and machine-readable facts."""

    type: str
    text: str
    facts: dict[str, Fact] = field(default_factory=dict)


def is_secret_name(name: str) -> bool:
    """Whether a variable's name suggests a credential, whose value must never leave the process."""
    return bool(_SECRET.search(name))


def summarize_namespace(values: Mapping[str, Any], limit: int = 200) -> dict[str, Summary]:
    """Summaries of at most `limit` variables, secrets redacted, dunder names left out."""
    result: dict[str, Summary] = {}
    for name, value in values.items():
        if len(result) >= limit:
            break
        if name.startswith("__") or name.startswith("@"):
            continue
        result[name] = redacted() if is_secret_name(name) else summarize(value)
    return result


def redacted() -> Summary:
    """The summary that stands in for a secret's value."""
    return Summary("redacted", "<redacted>")


def summarize(value: Any) -> Summary:
    """A bounded summary of any value; a value whose inspection fails is described, not raised, and one
    whose inspection blocks is abandoned after `SECONDS` (`daifu.core.bounded`)."""
    try:
        summary = _dispatch(value) if _native(value) else bounded(_dispatch, value, seconds=SECONDS)
    except TimedOut:
        summary = Summary(_type_name(value), "<repr timed out>")
    except Exception as error:  # a user object's __repr__ or property may raise anything
        summary = Summary(type(value).__name__, f"<summary failed: {type(error).__name__}>")
    summary.type = truncate(summary.type, _KEY_CHARS)  # a class's name is whatever code gave it
    summary.text = truncate(redact(summary.text[: 4 * MAX_TEXT]))
    summary.facts = _bounded_facts(summary.facts)
    return summary


def _bounded_facts(facts: Mapping[str, Any]) -> dict[str, Fact]:
    """`facts` redacted and bounded — `MAX_FACTS` entries, `MAX_FACT_ITEMS` items in a list, `MAX_FACT_TEXT`
    characters in a string — with what was cut said under `cut`: facts carry what code put in the program's
    state (an optimizer's settings, a module's attribute names), which must not leave the process unbounded."""
    cut: list[str] = [str(item)[:MAX_FACT_TEXT] for item in facts.get("cut", [])][:MAX_FACT_ITEMS]
    kept = {str(key)[:_KEY_CHARS]: _bounded_fact(fact, cut, 3) for key, fact in list(facts.items())[:MAX_FACTS]}
    if len(facts) > MAX_FACTS:
        cut.append(f"{len(facts) - MAX_FACTS} of {len(facts)} facts")
    if cut:
        kept["cut"] = list(dict.fromkeys(cut))
    return kept


def _bounded_fact(fact: Any, cut: list[str], depth: int) -> Fact:
    if fact is None or type(fact) in (bool, int, float):
        return fact  # type: ignore[no-any-return]
    if type(fact) is str:
        if len(fact) > MAX_FACT_TEXT:
            cut.append(f"texts over {MAX_FACT_TEXT} characters")
        return truncate(redact(fact[: 4 * MAX_FACT_TEXT]), MAX_FACT_TEXT)
    if type(fact) in (list, tuple) and depth > 0:
        if len(fact) > MAX_FACT_ITEMS:
            cut.append(f"lists over {MAX_FACT_ITEMS} items")
        return [_bounded_fact(item, cut, depth - 1) for item in fact[:MAX_FACT_ITEMS]]
    if type(fact) is dict and depth > 0:
        return _bounded_facts(fact)  # type: ignore[return-value]  # a fact's own facts (an item's)
    cut.append(f"a {type(fact).__name__} fact")
    return f"<{type(fact).__name__}>"


def _native(value: Any) -> bool:
    if type(value) in _NATIVE:
        return True
    torch = sys.modules.get("torch")
    return torch is not None and type(value) in (torch.Tensor, torch.nn.Parameter)


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    """`text` cut to `limit` characters, with an ellipsis saying it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dispatch(value: Any) -> Summary:
    torch = sys.modules.get("torch")
    if torch is not None:
        found = _torch_summary(torch, value)
        if found is not None:
            return found
    if value is None or isinstance(value, (bool, int, float, complex)):
        return _number(value)
    if isinstance(value, (PurePath, os.DirEntry)):
        return _path(os.fspath(value), type(value).__name__)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (bytes, bytearray)):
        return Summary(type(value).__name__, f"{type(value).__name__} of length {len(value)}", {"len": len(value)})
    if isinstance(value, (list, tuple, set, frozenset, Mapping)):
        return _container(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return _ndarray(numpy, value)
    return Summary(_type_name(value), describe(value)[: 4 * MAX_TEXT])  # a user's __repr__: bounded in time


def _ndarray(numpy: Any, value: Any) -> Summary:
    """A NumPy array as a tensor is described: shape, dtype, for a small float array its NaN and Inf
    counts (an observation or a batch read with NumPy is where bad data often comes from), for a small
    integer array its range (labels and ids often come from NumPy)."""
    facts: dict[str, Fact] = {"shape": list(value.shape), "dtype": str(value.dtype)}
    if value.dtype.kind == "f" and value.size <= _SMALL_TENSOR:
        facts["nan"] = int(numpy.isnan(value).sum())
        facts["inf"] = int(numpy.isinf(value).sum())
        if (facts["nan"] or facts["inf"]) and value.ndim >= 2 and len(value):
            facts["nonfinite_rows"] = int((~numpy.isfinite(value)).reshape(len(value), -1).all(1).sum())
    elif value.dtype.kind in "iu" and 0 < value.size <= _SMALL_TENSOR:  # labels, ids: the range a lookup meets
        facts.update(min=int(value.min()), max=int(value.max()))
    return Summary(_type_name(value), describe(value)[: 4 * MAX_TEXT], facts)


def _nonfinite_rows(torch: Any, data: Any) -> int:
    """The rows (along the first dimension) of `data` in which no value is finite: records that failed to
    decode, which no value of their own can stand in for (the generator leaves them out, `finite_rows`,
    rather than read them as zeros)."""
    return int((~torch.isfinite(data)).reshape(len(data), -1).all(1).sum())


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _number(value: Any) -> Summary:
    facts: dict[str, Fact] = {}
    if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        facts["value"] = value
    elif isinstance(value, float):
        facts["nonfinite"] = True
    return Summary(type(value).__name__, repr(value), facts)


def _string(value: str) -> Summary:
    if len(value) < 4096 and "\n" not in value and _PATHLIKE.search(value):
        return _path(value, "str")
    return Summary("str", repr(value), {"len": len(value)})


def _path(path: str, type_name: str) -> Summary:
    """A path with whether it and its parent exist, and near names when it does not."""
    exists = os.path.exists(path)
    parent = os.path.dirname(os.path.abspath(path))
    facts: dict[str, Fact] = {"path": path, "exists": exists, "parent": parent, "parent_exists": os.path.isdir(parent)}
    if not exists and facts["parent_exists"]:
        facts["close"] = _close_names(parent, os.path.basename(path))
    state = "exists" if exists else ("missing" if facts["parent_exists"] else "missing, parent missing too")
    return Summary(type_name, f"{path!r} ({state})", facts)


def _close_names(folder: str, name: str) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for _, entry in zip(range(_LISTING), entries)]
    except OSError:
        return []
    return difflib.get_close_matches(name, names, n=3, cutoff=0.6)


def _container(value: Any) -> Summary:
    name = type(value).__name__
    if isinstance(value, Mapping):
        environment = looks_like_environment(value)
        shown = [f"{key!r}: {_entry(key, item, environment)}" for key, item in itertools.islice(value.items(), _ITEMS)]
    else:
        shown = [_brief(item) for item in itertools.islice(value, _ITEMS)]
    more = ", ..." if len(value) > _ITEMS else ""
    facts: dict[str, Fact] = {"len": len(value)}
    if isinstance(value, (list, tuple)):
        facts["items"] = [_item_facts(item) for item in itertools.islice(value, _ITEMS)]
    return Summary(name, f"{name} of length {len(value)}: [{', '.join(shown)}{more}]", facts)


def _item_facts(item: Any) -> dict[str, Any]:
    """What the repair bot needs of an item of a list or tuple, to pick one (a `(values, indices)` pair, an
    LSTM's `(h, c)` state): its type, and a tensor's shape, dtype, device and whether it requires grad."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(item, torch.Tensor):
        facts = {"type": "Tensor", "shape": list(item.shape), "dtype": str(item.dtype).removeprefix("torch."),
                 "device": str(item.device), "requires_grad": bool(item.requires_grad)}
        if item.device.type != "meta" and item.numel() <= _SMALL_TENSOR and item.is_floating_point():
            with torch.no_grad():
                facts["whole"] = _whole(torch, item.detach())
        return facts
    return {"type": type(item).__name__}


def _whole(torch: Any, data: Any) -> bool:
    """Whether a floating tensor holds whole numbers only (codes, labels, counts stored as floats): only then
    does a cast to an integer dtype keep every value, so only then may a repair propose one."""
    return bool(torch.isfinite(data).all() and torch.equal(data, data.round()))


def _entry(key: Any, item: Any, environment: bool) -> str:
    """A dict entry's value as shown: redacted in a copy of the environment or under a secret-looking key."""
    if environment:
        return "<redacted:environment>"
    if isinstance(key, str) and is_secret_key(key) and not isinstance(item, (bool, int, float, type(None))):
        return "<redacted:secret>"
    return _brief(item)


def _brief(item: Any) -> str:
    """An item inside a container: nested containers by length only, so depth costs nothing."""
    if isinstance(item, (list, tuple, set, frozenset, dict)):
        return f"{type(item).__name__} of length {len(item)}"
    return truncate(summarize(item).text, 60)


def _torch_summary(torch: Any, value: Any) -> Summary | None:
    if isinstance(value, torch.Tensor):
        return _tensor(torch, value)
    if isinstance(value, torch.nn.Module):
        return _module(value)
    if isinstance(value, torch.optim.Optimizer):
        return _optimizer(value)
    loader_type = getattr(getattr(torch.utils, "data", None), "DataLoader", None)
    if loader_type is not None and isinstance(value, loader_type):
        return _loader(value)
    return None


def _tensor(torch: Any, value: Any) -> Summary:
    facts: dict[str, Fact] = {
        "shape": list(value.shape),
        "dtype": str(value.dtype).removeprefix("torch."),
        "device": str(value.device),
        "requires_grad": bool(value.requires_grad),
        "contiguous": bool(value.is_contiguous()),
    }
    text = f"Tensor shape={tuple(value.shape)} dtype={facts['dtype']} device={facts['device']}"
    if value.requires_grad:
        text += " requires_grad"
    if value.device.type != "meta" and value.numel() <= _SMALL_TENSOR and value.is_floating_point():
        with torch.no_grad():
            data = value.detach()
            facts["nan"] = int(torch.isnan(data).sum())
            facts["inf"] = int(torch.isinf(data).sum())
            if (facts["nan"] or facts["inf"]) and data.dim() >= 2 and len(data):
                facts["nonfinite_rows"] = _nonfinite_rows(torch, data)
            finite = data[torch.isfinite(data)]
            if finite.numel():
                facts.update(min=float(finite.min()), max=float(finite.max()), mean=float(finite.float().mean()))
            facts["whole"] = _whole(torch, data)
        text += f" nan={facts['nan']} inf={facts['inf']}"
        if "min" in facts:
            text += f" min={facts['min']:.4g} max={facts['max']:.4g} mean={facts['mean']:.4g}"
    elif value.device.type != "meta" and 0 < value.numel() <= _SMALL_TENSOR and value.dtype != torch.bool \
            and not value.is_complex():
        with torch.no_grad():  # integer data (class labels, token ids): the range says what a lookup will meet
            facts.update(min=int(value.min()), max=int(value.max()))
        text += f" min={facts['min']} max={facts['max']}"
    return Summary("Tensor", text, facts)


def _module(value: Any) -> Summary:
    params = list(value.parameters())
    count = sum(p.numel() for p in params)
    facts: dict[str, Fact] = {"class": type(value).__name__, "parameters": count}
    if params:
        facts["device"] = str(params[0].device)
        facts["dtype"] = str(params[0].dtype).removeprefix("torch.")
    linears = [
        [name, int(module.in_features), int(module.out_features)]
        for name, module in value.named_modules()
        if hasattr(module, "in_features") and hasattr(module, "out_features")
    ]
    if linears:
        facts["linears"] = linears[:50]
    embeddings = [
        [name, int(module.num_embeddings), int(module.embedding_dim)]
        for name, module in value.named_modules()
        if isinstance(getattr(module, "num_embeddings", None), int) and isinstance(getattr(module, "embedding_dim", None), int)
    ]
    if embeddings:
        facts["embeddings"] = embeddings[:50]
    return Summary(type(value).__name__, f"{type(value).__name__} ({count} parameters): {describe(value)}", facts)


def _optimizer(value: Any) -> Summary:
    """The first param group's settings, at most `_HYPER` of them (torch puts its own first): code may add
    any entry to a group, so what is shown is bounded, and what is left out is said."""
    groups = value.param_groups
    entries = [(k, v) for k, v in groups[0].items() if k != "params"] if groups else []
    shown = {str(k)[:_KEY_CHARS]: _setting(v) for k, v in entries[:_HYPER]}
    facts: dict[str, Fact] = {"class": type(value).__name__, "groups": len(groups)}
    facts.update({k: v for k, v in shown.items() if not isinstance(v, (list, str)) or _plain_text(v)})
    text = f"{type(value).__name__}({len(groups)} groups) {{{', '.join(f'{k!r}: {v!r}' for k, v in shown.items())}}}"
    if len(entries) > _HYPER:
        facts["cut"] = [f"{len(entries) - _HYPER} of the {len(entries)} settings of the first param group"]
        text += f" (+{len(entries) - _HYPER} settings not shown)"
    return Summary(type(value).__name__, text, facts)


def _plain_text(value: Any) -> bool:
    return isinstance(value, str) and not value.startswith("<")


def _setting(value: Any) -> Fact:
    """A param group's setting as a report shows it: a number, a short string, a pair of numbers."""
    if type(value) in (bool, int, float) or value is None:
        return value  # type: ignore[no-any-return]
    if type(value) is str:
        return truncate(value, _SETTING_CHARS)
    if type(value) is tuple and len(value) <= 4 and all(type(item) in (int, float) for item in value):
        return list(value)
    return f"<{_type_name(value)}>"


def _loader(value: Any) -> Summary:
    facts: dict[str, Fact] = {"class": "DataLoader", "batch_size": value.batch_size}
    try:
        facts["dataset_len"] = len(value.dataset)
    except TypeError:  # an IterableDataset has no length
        facts["dataset_len"] = None
    return Summary("DataLoader", f"DataLoader batch_size={value.batch_size} dataset_len={facts['dataset_len']}", facts)
