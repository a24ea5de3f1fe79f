"""Reading rescues back: `daifu.rescued(workspace)` for a restart, `listing` for `daifu rescue`.

A restart loads the newest rescue into freshly built objects and continues from the rescued position:

    rescue = daifu.rescued()                 # None when the workspace holds none
    if rescue is not None:
        rescue.load("model", model)          # model.load_state_dict(...), by the name it was found under
        rescue.load("optimizer", optimizer)
        rescue.restore_rng()                 # Python's, NumPy's, torch's generators, as they were
        start = rescue.position["step"]      # the loop's numbers at that point

Reading a rescue only parses data (`torch.load(weights_only=True)`, JSON): it never runs code saved in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daifu import config, ranks
from daifu.rescue.save import FOLDER, MANIFEST, STATE


@dataclass
class Rescue:
    """One rescue (in a multi-rank job, one rank's shard of it), read from `path`.

    manifest: what `manifest.json` says (`why`, `exception` or `signal`, `function`, `file`, `line`,
        `objects`, `position`, `not_saved`...).
    map_location: where `torch.load` puts the tensors (as saved, when `None`).
    """

    path: Path
    manifest: dict[str, Any]
    map_location: Any = None
    _state: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def state(self) -> dict[str, Any]:
        """The saved state (`objects`, `rng`, `position`), read from `state.pt` when first asked."""
        if self._state is None:
            import torch

            self._state = torch.load(self.path / STATE, map_location=self.map_location, weights_only=True)
        return self._state

    @property
    def objects(self) -> dict[str, Any]:
        """Each saved object's state (a `state_dict`, a generator's state), by the name it was found under."""
        return dict(self.state.get("objects", {}))

    @property
    def position(self) -> dict[str, Any]:
        """The numbers the crashed frame held (epoch, step, batch index, counters)."""
        return dict(self.manifest.get("position", {}))

    def __getitem__(self, name: str) -> Any:
        return self.objects[name]

    def load(self, name: str, target: Any) -> Any:
        """Load the state saved under `name` into `target` (a module, optimizer, scheduler, grad scaler, or a
        `torch.Generator`); returns `target`. `KeyError` naming the saved ones when `name` is not among them."""
        objects = self.objects
        if name not in objects:
            raise KeyError(f"no object {name!r} in the rescue {self.path}; saved: {', '.join(objects) or 'none'}")
        if hasattr(target, "load_state_dict"):
            target.load_state_dict(objects[name])
        else:
            target.set_state(objects[name])
        return target

    def restore_rng(self) -> None:
        """Put the random generators back as they were at the rescue: Python's `random`, NumPy's global
        generator, torch's CPU generator and the CUDA ones (each that was saved)."""
        rng = self.state.get("rng", {})
        if "python" in rng:
            import random

            version, internal, gauss = rng["python"]
            random.setstate((version, tuple(internal), gauss))
        if "numpy" in rng:
            import numpy

            name, keys, position, has_gauss, gauss = rng["numpy"]
            numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, gauss))
        if "torch" in rng or "cuda" in rng:
            import torch

            if "torch" in rng:
                torch.set_rng_state(rng["torch"])
            if "cuda" in rng:
                torch.cuda.set_rng_state_all(rng["cuda"])


def rescued(workspace: str | Path | None = None, rank: int | None = None, map_location: Any = None) -> Rescue | None:
    """The newest rescue of `workspace` (default: the one in effect), or `None` when it holds none.

    In a multi-rank rescue, the shard of `rank` (default: this process's rank, else the leader's).
    """
    folders = listing(workspace)
    if not folders:
        return None
    folder, manifest = folders[-1]
    shards = manifest.get("shards")
    if shards is None and not (folder / STATE).exists():
        shards = {path.name[4:]: path.name for path in folder.glob("rank*") if path.is_dir()}
    if shards:
        wanted = rank if rank is not None else ranks.rank()
        key = str(wanted if wanted is not None else ranks.leader())
        if key not in shards or not (folder / shards[key] / MANIFEST).exists():
            raise FileNotFoundError(f"the rescue {folder} holds no shard of rank {key}")
        folder = folder / shards[key]
        manifest = _manifest(folder)
    return Rescue(folder, manifest, map_location)


def listing(workspace: str | Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every whole rescue of `workspace`, oldest first, with its manifest (the job's, for a multi-rank one;
    a folder holding shards but no job manifest gets that of its first shard)."""
    root = Path(workspace if workspace is not None else config.settings().workspace) / FOLDER
    found = []
    for folder in root.glob("*") if root.is_dir() else ():
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        path = folder / MANIFEST
        if not path.exists():
            path = next(iter(sorted(folder.glob(f"rank*/{MANIFEST}"))), path)
        if path.exists():
            found.append((path.stat().st_mtime_ns, folder, _manifest(path.parent)))
    return [(folder, manifest) for _, folder, manifest in sorted(found, key=lambda item: item[0])]


def _manifest(folder: Path) -> dict[str, Any]:
    value = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{folder / MANIFEST} is not a rescue's manifest")
    return value


def shard_status(folder: Path, manifest: dict[str, Any]) -> dict[str, bool]:
    """For a multi-rank rescue: whether each rank's shard named by the manifest is there, whole."""
    shards = manifest.get("shards") or {}
    return {rank: (folder / name / MANIFEST).exists() for rank, name in sorted(shards.items(), key=lambda i: int(i[0]))}
