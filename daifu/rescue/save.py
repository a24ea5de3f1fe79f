"""Writing a rescue: one folder, whole or not at all, in bounded time, said on the terminal.

`after_crash` rescues a crash that nothing repaired, just before its exception goes on;
`at_signal` the frame a preemption signal stopped at (`daifu.rescue.signals`). Both write
`<workspace>/rescue/<name>/` (`<name>`: the repair number of the crash, or the signal's name; `.2`,
`.3`... when an earlier run left one of that name):

    manifest.json   what was saved, where in the code, why (the exception, or the signal), how to load
    state.pt        the state (`torch.save`): `objects` by name, `rng`, `position`

In a multi-rank job each rank writes its shard, `<name>/rank<r>/` (both files), and the leader rank
(`daifu.ranks.leader`) writes `<name>/manifest.json`, which names every rank's shard.

The folder is written under a temporary name, each file flushed to the disk (`fsync`), then renamed:
a reader — `daifu.rescued`, `daifu rescue` — sees a whole rescue or none. The work runs on a helper
thread while the run waits at most `rescue_seconds`; a rescue that overstays is abandoned (it is
never renamed into place), and said. Nothing here raises: a rescue that fails says why in one line,
and the user's exception goes on as it would have without DaiFu.
"""

from __future__ import annotations

import json
import linecache
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from daifu import ranks
from daifu.config import Settings
from daifu.rescue import devices
from daifu.rescue.collect import Caller, Collected, callers_of, collect, globals_read, loop_names
from daifu.say import say

if TYPE_CHECKING:
    from daifu.core.crash import Crash

FOLDER = "rescue"
MANIFEST = "manifest.json"
STATE = "state.pt"
FORMAT = "daifu-rescue/1"


@dataclass
class Subject:
    """What is rescued: a frame's values, and the facts the manifest tells about why and where."""

    name: str
    namespace: Mapping[str, Any]
    module_globals: Mapping[str, Any]
    callers: list[Caller]
    source: str
    """The function's source: where its loop names are read (`collect.loop_names`)."""
    facts: dict[str, Any] = field(default_factory=dict)
    then: str = "the exception goes on"
    """What happens to the run after the rescue, as the terminal line ends."""


def after_crash(crash: Crash, number: int, settings: Settings) -> Path | None:
    """Rescue the state `crash` held (repair `number`), before its exception goes on; where it went."""

    def subject() -> Subject:
        from daifu.report.redact import redact

        frame = crash.frame
        facts = {
            "why": "crash",
            "repair": number,
            "exception": {"type": crash.exception_type, "message": redact(crash.message)},
            "function": crash.qualname,
            "file": crash.filename,
            "line": crash.lineno,
            "statement": crash.statement,
        }
        module_globals = globals_read(frame, crash.locals) if frame is not None else {}
        return Subject(str(number), crash.locals, module_globals, callers_of(frame), crash.source, facts)

    return _guarded(subject, settings)


def at_signal(frame: FrameType, source: str, signal_name: str, then: str, settings: Settings) -> Path | None:
    """Rescue the state `frame` (running the function whose source is `source`) holds as it starts a
    statement, a signal having asked for it; `then`: what the signal does next, as the terminal line says."""

    def subject() -> Subject:
        code = frame.f_code
        namespace = {name: value for name, value in frame.f_locals.items() if not name.startswith("@")}
        facts = {
            "why": "signal",
            "signal": signal_name,
            "function": getattr(code, "co_qualname", code.co_name),
            "file": code.co_filename,
            "line": frame.f_lineno,
            "statement": linecache.getline(code.co_filename, frame.f_lineno).strip(),
        }
        return Subject(signal_name, namespace, globals_read(frame, namespace), callers_of(frame), source, facts,
                       then)

    return _guarded(subject, settings)


def _guarded(subject: Callable[[], Subject], settings: Settings) -> Path | None:
    """Run a rescue: never in a trial's copy, never raising, never longer than `rescue_seconds`."""
    trial = sys.modules.get("daifu.core.trial")  # half imported by the warm thread: no trial yet
    if trial is not None and getattr(trial, "active", lambda: False)():
        return None
    try:
        return _Rescue(subject(), settings).run()
    except Exception as error:  # a bug of ours must never hide the user's exception or stop the signal
        say(f"rescue: DaiFu failed to save the trained state ({type(error).__name__}: {error}); nothing was saved")
        return None


class _Rescue:
    """One rescue, written on a helper thread while the run waits for it."""

    def __init__(self, subject: Subject, settings: Settings) -> None:
        self.subject = subject
        self.settings = settings
        self.root = settings.workspace / FOLDER
        self.outcome: Path | BaseException | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._doing = "collecting the state"

    def run(self) -> Path | None:
        try:
            threading.Thread(target=self._work, name="daifu-rescue", daemon=True).start()
        except RuntimeError:  # no thread can be started (interpreter shutdown): in this thread, unbounded
            self._work()
        seconds = self.settings.rescue_seconds
        try:
            finished = self.done.wait(seconds)
        except KeyboardInterrupt:  # the person wants out: the rescue gives way, the exception still goes on
            self._abandon()
            say(f"rescue: interrupted while {self._doing}; nothing was saved; {self.subject.then}")
            return None
        if not finished and self._abandon():
            say(f"rescue: abandoned after {seconds:g} s while {self._doing} (rescue_seconds, "
                f"DAIFU_RESCUE_SECONDS); nothing was saved; {self.subject.then}")
            return None
        if isinstance(self.outcome, BaseException):
            say(f"rescue: the trained state could not be saved in {self.root} while {self._doing} "
                f"({type(self.outcome).__name__}: {self.outcome}); {self.subject.then}")
            return None
        return self.outcome

    def _abandon(self) -> bool:
        """Give up waiting, unless the rescue finished meanwhile; an abandoned one is never put in place."""
        with self._lock:
            self._abandoned = not self.done.is_set()
            return self._abandoned

    def _work(self) -> None:
        try:
            self.outcome = self._write()
        except BaseException as error:  # handed to the waiting run, which says it
            self.outcome = error
        with self._lock:
            self.done.set()

    def _write(self) -> Path | None:
        subject = self.subject
        unusable = devices.unusable()
        found = collect(subject.namespace, subject.module_globals, subject.callers, unusable,
                        loop_names(subject.source))
        torch = sys.modules.get("torch")
        if torch is None or not (found.objects or found.unsaved):
            return None  # no trained state: nothing a restart would miss
        self._doing = f"creating {self.root}"
        name, target = self._place()
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        partial.mkdir(parents=True)
        try:
            self._doing = f"writing {partial / STATE}"
            size = _written(partial / STATE, lambda stream: torch.save(found.state, stream))
            manifest = self._manifest(name, found, size)
            size += _written(partial / MANIFEST, lambda stream: stream.write(_json(manifest)))
            _synced(partial)
            self._doing = f"renaming {partial} to {target}"
            with self._lock:
                if self._abandoned:
                    raise TimeoutError("abandoned")
                os.rename(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)  # a half-written rescue is no rescue: leave none
            raise
        _synced(target.parent)
        if target.name != name:  # a shard: the leader names every rank's
            self._job_manifest(target.parent, manifest)
        self._say(target, found, size)
        return target

    def _place(self) -> tuple[str, Path]:
        """The rescue's name and the folder its shard goes to: the first of `<name>`, `<name>.2`... that
        this rank has not written yet (every rank of a job that rescued together picks the same)."""
        base, rank = self.subject.name, _rank()
        for suffix in range(1, 1000):
            name = base if suffix == 1 else f"{base}.{suffix}"
            folder = self.root / name
            target = folder if rank is None else folder / f"rank{rank}"
            if not target.exists():
                return name, target
        raise FileExistsError(f"{self.root / base} and 998 more exist")

    def _manifest(self, name: str, found: Collected, size: int) -> dict[str, Any]:
        workspace = str(self.settings.workspace)
        return {
            "format": FORMAT,
            "name": name,
            **self.subject.facts,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "pid": os.getpid(),
            "rank": _rank(),
            "world_size": _world_size(),
            "objects": found.objects,
            "rng": found.rng,
            "position": found.position,
            "loop": found.loop,
            "callers": found.callers,
            "not_saved": found.unsaved,
            "state_file": STATE,
            "state_bytes": size,
            "load": f"rescue = daifu.rescued({workspace!r}); rescue.load('<name>', obj) for each object; "
                    "rescue.restore_rng(); rescue.position holds the loop's numbers",
        }

    def _job_manifest(self, folder: Path, shard: dict[str, Any]) -> None:
        """The leader's manifest of a multi-rank rescue: the crash it saw and every rank's shard."""
        if _rank() != ranks.leader():
            return
        world = int(shard["world_size"] or 1)
        job = {key: value for key, value in shard.items() if key not in ("objects", "rng", "position", "callers",
                                                                         "not_saved", "state_file", "state_bytes")}
        job["shards"] = {str(rank): f"rank{rank}" for rank in range(world)}
        partial = folder / f".{MANIFEST}.{os.getpid()}.tmp"
        _written(partial, lambda stream: stream.write(_json(job)))
        os.replace(partial, folder / MANIFEST)
        _synced(folder)

    def _say(self, target: Path, found: Collected, size: int) -> None:
        names = ", ".join(f"{o['name']} ({o['kind']})" for o in found.objects[:6])
        more = f" and {len(found.objects) - 6} more" if len(found.objects) > 6 else ""
        where = ", ".join(f"{name}={found.position[name]}" for name in found.loop[:4])
        lost = "; ".join(f"{u['what']} ({u['why']})" for u in found.unsaved[:3])
        at = f" at {where}" if where else ""
        missing = f"; not saved: {lost}" if lost else ""
        say(f"rescue: {names or 'no object'}{more}{at} saved to {target} ({size_text(size)}); "
            f"load it with daifu.rescued(){missing}; {self.subject.then}")


def _written(path: Path, write: Callable[[Any], Any]) -> int:
    """Write the new file `path` through `write(binary_stream)`, flushed to the disk; its size."""
    with open(path, "xb") as stream:
        write(stream)
        stream.flush()
        os.fsync(stream.fileno())
    return path.stat().st_size


def _synced(folder: Path) -> None:
    """Flush a folder's entries (a new file, a rename) to the disk."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, default=str) + "\n").encode("utf-8")


def _rank() -> int | None:
    return ranks.rank()


def _world_size() -> int | None:
    if ranks.active():
        return int(sys.modules["torch.distributed"].get_world_size())
    value = os.environ.get("WORLD_SIZE")
    return int(value) if value and value.isdigit() and int(value) > 1 else None


def size_text(count: int) -> str:
    """A size in bytes as people read it: `812 bytes`, `19.8 KB`, `1.3 GB`."""
    if count < 1000:
        return f"{count} bytes"
    scaled = float(count)
    for unit in ("KB", "MB", "GB"):
        scaled /= 1000
        if scaled < 1000 or unit == "GB":
            return f"{scaled:.1f} {unit}"
    raise AssertionError("unreachable: the last unit returns")
