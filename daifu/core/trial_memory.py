"""A trial's memory: what it may dirty, what the machine can give it, the limits it runs under, what it took.

A trial is a fork. Copy-on-write makes the copy cheap to start, but every page it writes becomes
a page of its own: one training step rewrites every parameter and makes every gradient, so the
copy of a large model can need as much memory again as the model. When the machine runs out,
the kernel's OOM killer picks a process, and it may pick the live run the trial was meant to
protect. So:

- before forking, `estimate` sums what the trial may dirty, from the trained state reachable
  from the crashed frame (the inventory its verdict's health is read from: modules, optimizers,
  tensors in locals), and `allowance` says what the machine can give: the kernel's
  `MemAvailable`, the room left under the memory cgroup's limit, the `trial_memory` setting.
  A trial that does not fit is not started (its verdict: *unavailable: memory*);
- in the copy, `limit` makes the trial the OOM killer's first choice (`oom_score_adj` 1000) and
  caps what it may allocate anew with `RLIMIT_DATA`;
- at the end, `peak` says what the copy took.

Why `RLIMIT_DATA` and not `RLIMIT_AS` or a cgroup: `RLIMIT_AS` counts address space that is only
reserved (glibc reserves 64 MiB per thread arena, OpenMP and BLAS reserve stacks and buffers), so
a limit near real use fails allocations that would never have touched memory. `RLIMIT_DATA`
counts private writable mappings, which is what an allocation makes. It does not count the pages
the copy shares with the live run and rewrites (copy-on-write): the estimate is there for those,
and `oom_score_adj` for what the estimate missed. A memory cgroup would cap both, but creating
one needs a delegated, writable cgroup hierarchy, which an ordinary training process does not
have.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from daifu.core import health

MARGIN = 64 * 2**20
"""Bytes added to every estimate: activations, allocator slack, and the pages of Python objects whose
reference counts a trial changes (each such page is copied)."""
MARGIN_SHARE = 0.1
"""The part of the estimated state added to the margin, for activations that grow with the model."""
RESERVE = 256 * 2**20
"""Bytes of free memory never given to a trial: the live run and the rest of the machine go on while it runs."""
_UNLIMITED = 1 << 60
"""A cgroup v1 limit at or above this is the kernel's way of saying "no limit"."""


@dataclass(frozen=True)
class Estimate:
    """What a trial may dirty, in bytes.

    rewritten: the trained state it may write in place (parameters, buffers, gradients that
    exist, optimizer state, tensors in locals), each page of which becomes a copy of its own;
    created: the gradients a backward pass would make where there are none yet.
    """

    rewritten: int = 0
    created: int = 0

    @property
    def margin(self) -> int:
        return MARGIN + int((self.rewritten + self.created) * MARGIN_SHARE)

    @property
    def total(self) -> int:
        return self.rewritten + self.created + self.margin


def estimate(before: health.Inventory, watched: Mapping[str, Any]) -> Estimate:
    """The memory a trial may dirty, from the state `before` holds and the tensors among `watched`.

    Bounded: it looks at the modules and optimizers the inventory found (a bounded walk of the
    frame already) and at the tensors `health.reachable` yields, nothing deeper. A tensor in shared
    memory is left out: the copy makes that one private before the trial runs (`isolate`).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return Estimate()
    counted: set[int] = set()
    rewritten = created = 0

    def add(tensor: Any) -> None:
        nonlocal rewritten
        try:
            if tensor.device.type != "cpu" or tensor.is_shared():
                return
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key and key not in counted:
                counted.add(key)
                rewritten += storage.nbytes()
        except (RuntimeError, TypeError, NotImplementedError):  # sparse, meta, or a subclass without storage
            pass

    for held in before.held:
        for tensor in _state_tensors(torch, held):
            add(tensor)
            if held.kind == "module" and tensor.requires_grad and tensor.grad is None:
                created += tensor.numel() * tensor.element_size()
            elif getattr(tensor, "grad", None) is not None:
                add(tensor.grad)
    for _, value in health.reachable(watched):
        if isinstance(value, torch.Tensor):
            add(value)
    return Estimate(rewritten, created)


def _state_tensors(torch: Any, held: health.Held) -> Iterable[Any]:
    if held.kind == "module":
        yield from held.obj.parameters()
        yield from held.obj.buffers()
        return
    for state in held.obj.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


@dataclass(frozen=True)
class Allowance:
    """The memory a trial may take, in bytes, and what set it (for the verdict of a refusal)."""

    bytes: int
    source: str


def allowance(setting: int | None) -> Allowance:
    """The least of: free memory, room under the memory cgroup's limit (each less `RESERVE`), the setting."""
    found = []
    available = _meminfo().get("MemAvailable")
    if available is not None:
        found.append(Allowance(available - RESERVE, "free (MemAvailable)"))
    room = _cgroup_room()
    if room is not None:
        found.append(Allowance(room - RESERVE, "free under the memory cgroup's limit"))
    if setting is not None:
        found.append(Allowance(setting, "allowed by the trial_memory setting"))
    if not found:
        return Allowance(_UNLIMITED, "unknown: no /proc/meminfo")
    return min(found, key=lambda figure: figure.bytes)


def _meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """The figures of `/proc/meminfo` (or of `/proc/<pid>/status`) given in kB, in bytes."""
    figures = {}
    try:
        with open(path) as stream:
            for line in stream:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                    figures[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return figures


def _cgroup_room() -> int | None:
    """Bytes left under the tightest memory limit of this process's cgroup and its ancestors (v1 or v2)."""
    try:
        with open("/proc/self/cgroup") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            rooms += _rooms("/sys/fs/cgroup", path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            rooms += _rooms("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes")
    return min(rooms) if rooms else None


def _rooms(root: str, path: str, limit_file: str, usage_file: str) -> list[int]:
    rooms = []
    parts = [part for part in path.split("/") if part]
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(root, *parts[:depth])
        limit, usage = _number(os.path.join(folder, limit_file)), _number(os.path.join(folder, usage_file))
        if limit is not None and usage is not None and limit < _UNLIMITED:
            rooms.append(limit - usage)
    return rooms


def _number(path: str) -> int | None:
    try:
        with open(path) as stream:
            text = stream.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


# -- in the copy -------------------------------------------------------------------------------


def limit(new_bytes: int) -> str:
    """Make this process the OOM killer's first choice and cap its new allocations at `new_bytes`.

    Called in the copy before the sandbox (both write files the sandbox then refuses). Returns what
    was done, for the verdict.
    """
    done = []
    try:
        with open("/proc/self/oom_score_adj", "w") as stream:
            stream.write("1000")
        done.append("first for the OOM killer")
    except OSError:
        pass
    data = _meminfo("/proc/self/status").get("VmData")
    if data is not None:
        cap = data + max(new_bytes, 0)
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        if soft == resource.RLIM_INFINITY or soft > cap:  # then the hard limit is above the cap too
            try:
                resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
                done.append(f"new allocations capped at {size(max(new_bytes, 0))} (RLIMIT_DATA)")
            except (OSError, ValueError):
                pass
    _reset_peak()
    return ", ".join(done)


def _reset_peak() -> None:
    """Start the peak of resident memory afresh (clear_refs 5), so that `peak` leaves out the setup."""
    try:
        with open("/proc/self/clear_refs", "w") as stream:
            stream.write("5")
    except OSError:
        pass


def peak(pid: int | str = "self") -> int:
    """The memory process `pid` (a trial's copy) took at most, in bytes; 0 when it cannot be read.

    The pages only it holds now (`Private_Dirty`: the pages it rewrote and the memory it
    allocated), plus how far its resident memory fell from its high-water mark (allocations it
    made and freed again). An upper estimate: resident pages still shared with the live run that
    the copy let go also count as a fall.
    """
    private = _meminfo(f"/proc/{pid}/smaps_rollup").get("Private_Dirty")
    status = _meminfo(f"/proc/{pid}/status")
    if private is None or "VmHWM" not in status or "VmRSS" not in status:
        return 0
    return private + max(0, status["VmHWM"] - status["VmRSS"])


def size(count: int) -> str:
    """`count` bytes for a person: `812 KiB`, `1.1 GiB`."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
