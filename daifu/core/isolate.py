"""Detach a trial's copy from the live run: after this, the copy shares nothing writable with it.

`fork` gives the copy its own copy-on-write memory, but not everything is copied:

- **shared mappings** (`MAP_SHARED`, the `s` in `/proc/self/maps`) stay shared: the storages of
  `tensor.share_memory_()` and of a `DataLoader`'s worker batches (in `/dev/shm`), an
  `np.memmap(mode="r+")` (the file itself), anonymous shared memory. A write by the copy is a
  write to the live run's tensors, or to the file. `detach_memory` replaces each writable one by
  a private copy at the same address, with the same content and protection, so the trial runs on
  as before; one it cannot copy (a device's, or more than the trial's memory allows) is made
  read-only, and a write to it ends the trial as *stopped at effect* (`stop_on_write`);
- **open file descriptions** stay shared: a descriptor inherited from the live run has the same
  offset, so a read by the copy moves the live run's place in the file. `detach_descriptors`
  re-opens each regular file and folder (through `/proc/self/fd/N`, same access mode and the
  flags of how it reads and writes, same offset) and puts the private description at the same number; every other inherited
  descriptor (pipes, sockets, terminals, event and timer descriptors) is *sealed*: its number now
  holds `/dev/null`, and the sandbox refuses reading, writing or closing it, so a `DataLoader`'s queue or
  a process group's socket cannot be read from (a message taken from the live run) or written to.

Everything here runs in the copy, right after `fork`, before any of the trial's code, with one
thread and the garbage collector off: a collection could free a tensor whose shared mapping is being
copied (the mapping would vanish under the copy), or close a descriptor being sealed.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import signal
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from daifu.core.trial_memory import size

_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_SA_SIGINFO = 4
_SI_ADDR_OFFSET = 16
"""Where `si_addr` lies in a 64-bit `siginfo_t`: after three ints and the padding that aligns the union."""
_COPYABLE_DEVICES = ("/dev/shm/", "/dev/zero")
"""Shared mappings under /dev whose content is plain memory (POSIX shared memory, anonymous shared)."""
_HARMLESS_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
"""Inherited character devices with no offset and no data of the live run: kept as they are."""


@dataclass(frozen=True)
class Region:
    """One line of `/proc/self/maps`."""

    start: int
    end: int
    perms: str
    path: str

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def shared_writable(self) -> bool:
        return self.perms[1] == "w" and self.perms[3] == "s"

    @property
    def copyable(self) -> bool:
        """Plain memory that can be read: not a device's registers or buffers."""
        return self.perms[0] == "r" and (not self.path.startswith("/dev/") or self.path.startswith(_COPYABLE_DEVICES))

    @property
    def protection(self) -> int:
        return (mmap.PROT_READ if self.perms[0] == "r" else 0) | (mmap.PROT_WRITE if self.perms[1] == "w" else 0) | (
            mmap.PROT_EXEC if self.perms[2] == "x" else 0)

    def __str__(self) -> str:
        return self.path or "anonymous shared memory"


def shared_writable() -> list[Region]:
    """The writable shared mappings of this process."""
    found = []
    with open("/proc/self/maps") as stream:
        for line in stream:
            fields = line.split(maxsplit=5)
            start, _, end = fields[0].partition("-")
            region = Region(int(start, 16), int(end, 16), fields[1], fields[5].strip() if len(fields) > 5 else "")
            if region.shared_writable:
                found.append(region)
    return found


@dataclass
class Isolation:
    """What was done to detach the copy: shared memory copied or made read-only, descriptors re-opened or sealed."""

    copied: list[Region] = field(default_factory=list)
    read_only: list[Region] = field(default_factory=list)
    reopened: int = 0
    sealed: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    """Descriptors of the copy's own (re-opened files, harmless devices) between the sealed ones."""

    def shared_memory(self) -> str:
        """`shared memory: 3 mappings copied (1.0 GB), 1 made read-only`, or "" when there was none."""
        parts = [_mappings(regions, done) for regions, done in ((self.copied, "copied"),
                                                                 (self.read_only, "made read-only")) if regions]
        return f"shared memory: {', '.join(parts)}" if parts else ""

    def describe(self) -> str:
        parts = [self.shared_memory()] if self.copied or self.read_only else []
        if self.reopened:
            parts.append(f"{_count(self.reopened, 'inherited file', 'inherited files')} re-opened at the same offset")
        if self.sealed:
            parts.append(f"{_count(len(self.sealed), 'other inherited descriptor', 'other inherited descriptors')}"
                         " sealed")
        return "; ".join(parts)


def _mappings(regions: Sequence[Region], done: str) -> str:
    return f"{_count(len(regions), 'mapping', 'mappings')} {done} ({size(sum(region.size for region in regions))})"


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


# -- memory --------------------------------------------------------------------------------------


class _Libc:
    """The few C functions that remap memory and catch a fault, typed for ctypes."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        self.mremap = libc.mremap
        self.mremap.restype = ctypes.c_void_p
        self.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.munmap = libc.munmap
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.mprotect = libc.mprotect
        self.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.sigaction = libc.sigaction
        self.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]


@functools.cache
def _libc() -> _Libc:
    """Loaded once, by the copy before its sandbox (which stops a `ctypes` load), on Linux only."""
    return _Libc()


_FAILED = ctypes.c_void_p(-1).value


def detach_memory(budget: int, isolation: Isolation) -> None:
    """Make every writable shared mapping private: copied while `budget` bytes allow, the rest read-only.

    The smallest are copied first (a `DataLoader`'s batches before a memmapped data set). A mapping
    that can be neither copied nor made read-only leaves the trial without a sandbox: `OSError`.
    """
    libc = _libc()
    left = budget
    for region in sorted(shared_writable(), key=lambda r: r.size):
        if region.copyable and region.size <= left and _copy(libc, region):
            isolation.copied.append(region)
            left -= region.size
            continue
        if libc.mprotect(region.start, region.size, region.protection & ~mmap.PROT_WRITE) != 0:
            raise OSError(ctypes.get_errno(), f"the shared mapping of {region} cannot be made private or read-only")
        isolation.read_only.append(region)


def _copy(libc: _Libc, region: Region) -> bool:
    """Copy `region` into new private memory, then move that over it (`mremap` replaces it whole)."""
    anonymous = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    copy = libc.mmap(None, region.size, mmap.PROT_READ | mmap.PROT_WRITE, anonymous, -1, 0)
    if copy in (None, _FAILED):
        return False
    ctypes.memmove(copy, region.start, region.size)
    moved = libc.mprotect(copy, region.size, region.protection) == 0 and libc.mremap(
        copy, region.size, region.size, _MREMAP_MAYMOVE | _MREMAP_FIXED, region.start) == region.start
    if not moved:
        libc.munmap(copy, region.size)
    return moved


class _SigAction(ctypes.Structure):
    """glibc's `struct sigaction` (x86-64, AArch64)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


@dataclass
class _Guard:
    """What the fault handler needs: the read-only regions and what to call on a write to one."""

    read_only: Sequence[Region] = ()
    stop: Callable[[str], None] | None = None


_GUARD = _Guard()


def _on_fault(signal_number: int, info: int, context: int) -> None:
    address = ctypes.c_void_p.from_address(info + _SI_ADDR_OFFSET).value or 0
    for region in _GUARD.read_only:
        if region.start <= address < region.end and _GUARD.stop is not None:
            _GUARD.stop(f"a write to shared memory ({region}, made read-only for the trial)")
    _libc().sigaction(signal_number, ctypes.byref(_SigAction()), None)  # SIG_DFL: the fault repeats, ends the copy


_FAULT_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_on_fault)
"""Made when the module is imported, in the live run: the copy makes no new native callback (libffi may
write those through a shared mapping, which the copy has made private)."""


def stop_on_write(read_only: Sequence[Region], stop: Callable[[str], None]) -> None:
    """A write to one of the `read_only` regions calls `stop(effect)`, which must not return.

    The write faults (`SIGSEGV`); the handler, given the faulting address (`SA_SIGINFO`), tells it
    from any other fault, which keeps the default action: the copy ends with the signal, as it would have.
    """
    if not read_only:
        return
    _GUARD.read_only, _GUARD.stop = tuple(read_only), stop
    action = _SigAction(ctypes.cast(_FAULT_HANDLER, ctypes.c_void_p).value, flags=_SA_SIGINFO)
    if _libc().sigaction(signal.SIGSEGV, ctypes.byref(action), None) != 0:
        raise OSError(ctypes.get_errno(), "cannot catch a write to read-only shared memory")


# -- descriptors ---------------------------------------------------------------------------------


def detach_descriptors(keep: Sequence[int], isolation: Isolation) -> None:
    """Give each inherited regular file and folder a private description; seal every other descriptor.

    `keep`: the copy's own descriptors (its verdict pipe, its captured output), left alone. The
    free numbers between the lowest and the highest sealed one are sealed too, so that the copy's
    own files never land between them (the sandbox refuses reads there by number).
    """
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    inherited = sorted(int(name) for name in os.listdir("/proc/self/fd"))
    for fd in inherited:
        if fd in keep or fd == null:
            continue
        try:
            info = os.fstat(fd)
        except OSError:  # the listing's own descriptor, closed already
            continue
        if (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) and _reopen(fd):
            isolation.reopened += 1
            isolation.kept.append(fd)
        elif stat.S_ISCHR(info.st_mode) and _target(fd) in _HARMLESS_DEVICES:
            isolation.kept.append(fd)
        else:
            os.dup2(null, fd, inheritable=os.get_inheritable(fd))
            isolation.sealed.append(fd)
    if not isolation.sealed:
        os.close(null)
        return
    low, high = min(isolation.sealed), max(isolation.sealed)
    taken = set(isolation.sealed) | set(isolation.kept) | set(keep) | {null}
    for fd in range(low, high):
        if fd not in taken:
            os.dup2(null, fd, inheritable=False)
    isolation.kept = [fd for fd in isolation.kept if low < fd < high]
    if not low < null < high:  # else it fills its own number
        os.close(null)


def _target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _reopen(fd: int) -> bool:
    """Put at `fd` a new open file description of the same file, at the same offset; False if it cannot."""
    try:
        flags = _status_flags(fd)
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        fresh = os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.lseek(fresh, offset, os.SEEK_SET)
        os.dup2(fresh, fd, inheritable=os.get_inheritable(fd))
        return True
    except OSError:
        return False
    finally:
        os.close(fresh)


_CARRIED_FLAGS = os.O_ACCMODE | os.O_APPEND | os.O_NONBLOCK | os.O_DSYNC | os.O_SYNC | getattr(os, "O_DIRECT", 0)
"""What a re-opened description keeps of the inherited one's flags: how it reads and writes. Not how it was
opened: `O_NOFOLLOW` (every `shm_open`, so every shared tensor's descriptor) makes the open of the
/proc/self/fd link fail (ELOOP), and `O_TMPFILE`/`O_DIRECTORY` would ask for another kind of file."""


def _status_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL) & _CARRIED_FLAGS

