"""The sandbox of a trial: what a forked copy of the training process may do, and nothing else.

A trial runs the user's real code on the real data; it must leave no trace outside its own
memory. Before the sandbox, the copy has been detached from the live run (`daifu.core.isolate`:
no shared memory, no shared file offsets, inherited pipes and sockets sealed). Then two layers:

1. a seccomp filter (libseccomp, through `pyseccomp`), the barrier: an allowlist of the system
   calls a training iteration makes — memory, threads of its own, time, signals to itself,
   reading files, writing to the trial's own three descriptors (0, 1, 2: the verdict pipe and
   the captured output) — and every other call fails with `SANDBOX_ERRNO`, whatever code asks,
   native code included (`torch.save` writes through PyTorch's C++ file writer, which no Python
   hook sees). Refused, because they are not on the list: opening a file for writing, deleting,
   renaming or creating files, changing modes, reading a sealed descriptor, sockets, programs and
   processes, signals to other processes, another process's priority or memory, SysV shared
   memory, io_uring. A refused call is an `OSError` the trial's verdict calls *stopped at effect*;
   a refusal native code cannot survive ends the copy, which the verdict reports as such;
2. audit hooks (PEP 578) and a few wrappers, to *name* what Python code tried before it
   happens: the trial stops there with `SandboxStop`, a `BaseException` the user's
   `except Exception` does not swallow. Spawning a process or opening a connection is
   `dangerous`; writing a file or taking part in a collective is an effect the trial stops at.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

SANDBOX_ERRNO = errno.EBADE
"""The error the seccomp filter answers with: rare enough that a trial knows the sandbox caused it."""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_ALLOWED = (
    # memory of its own (mmap is allowed below unless it maps a file shared and writable)
    "brk", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "membarrier", "get_mempolicy",
    # threads of its own (clone below, with CLONE_THREAD only), and waiting
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq", "sched_yield",
    "sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "arch_prctl", "prctl", "seccomp", "restart_syscall", "exit", "exit_group",
    "wait4", "waitid",
    # time and identity
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times",
    "getrusage", "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "capget", "uname", "sysinfo", "getcpu",
    "getrandom", "getrlimit", "getpriority", "sched_getattr",
    # signals to itself (tgkill below, to its own threads only)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
    "sigaltstack", "pause", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete",
    # reading files and folders (open and openat below, without a flag that writes; read and close by
    # descriptor below)
    "lseek", "fstat", "stat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
    "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir",
    "fchdir", "fcntl", "dup", "dup2", "dup3", "fadvise64", "readahead", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "umask", "fsync", "fdatasync",
    # waiting on descriptors of its own
    "pipe", "pipe2", "eventfd2", "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
)
"""The system calls a training iteration makes, allowed whatever their arguments."""
_BY_DESCRIPTOR = ("read", "readv", "pread64", "preadv", "preadv2", "close")
"""Allowed on any descriptor but a sealed one: reading one would take the live run's data, and
closing one would free its number for a file of the trial's, which the filter would then refuse."""
_WRITES = ("write", "writev")
_IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5451, 0x5450)
"""The `ioctl` requests allowed: TCGETS and TIOCGWINSZ (is it a terminal, how wide), FIONREAD,
FIONBIO, FIOCLEX, FIONCLEX. Not TIOCSTI (typing into a terminal) nor any device's own."""
_CLONE_THREAD = 0x00010000
_PROT_WRITE, _MAP_SHARED = 0x2, 0x01
_NEGATIVE_INT = 0x80000000

_DANGEROUS_EVENTS = (
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "urllib.Request", "ctypes.dlopen", "webbrowser.open",
)
_EFFECT_EVENTS = (
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
    "shutil.move", "shutil.chown",
)
_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "gather", "scatter", "send", "recv",
    "isend", "irecv", "all_to_all", "all_to_all_single", "monitored_barrier", "batch_isend_irecv",
)


class SandboxStop(BaseException):
    """A trial reached an effect it may not have; `dangerous` for a process or a connection.

    A `BaseException`, so that the user's `except Exception` lets it through to the trial.
    """

    def __init__(self, effect: str, dangerous: bool) -> None:
        super().__init__(effect)
        self.effect = effect
        self.dangerous = dangerous
        self.frame: FrameType | None = None  # the vaccinated frame it stopped in, set by the runtime


def unavailable() -> str | None:
    """Why no sandbox can be installed here, or `None` when it can."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux's seccomp, and this is {sys.platform}"
    try:
        import pyseccomp  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as error:  # OSError: libseccomp itself is missing
        return f"libseccomp cannot be loaded ({error}); install pyseccomp and libseccomp2"
    return None


def install(sealed: Sequence[int] = (), kept: Sequence[int] = ()) -> None:
    """Install both layers in this (child) process; for good: there is no way back.

    `sealed`: the descriptors the copy may not read (`daifu.core.isolate`); `kept`: the copy's own
    descriptors between the lowest and the highest sealed one.
    """
    _guard_python()
    _filter_system_calls(sealed, kept)


def caused(error: BaseException) -> bool:
    """Whether `error`, or an exception in its chain, is the seccomp filter's refusal."""
    seen: set[int] = set()
    current: BaseException | None = error
    marker = os.strerror(SANDBOX_ERRNO)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if getattr(current, "errno", None) == SANDBOX_ERRNO or marker in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _guard_python() -> None:
    sys.dont_write_bytecode = True  # an import during the trial must not try to write a .pyc
    sys.addaudithook(_audit)
    torch = sys.modules.get("torch")
    if torch is not None:
        _stop_torch_effects(torch, lambda: True)


class _Guarding(threading.local):
    on = False


_GUARDING = _Guarding()
_HOOKED: list[bool] = []


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """The audit-hook layer alone, in this process, for the calling thread while the block runs: an
    in-process trial (`daifu.core.inprocess`). No seccomp filter (it could not be taken off again):
    what native code does on its own is not stopped, only what Python code and `torch.save` ask for.

    An audit hook cannot be removed either: one is installed at the first trial, and acts only in a
    thread whose trial is running (other threads of the live run go on as they were)."""
    if not _HOOKED:
        sys.addaudithook(_gated_audit)
        _HOOKED.append(True)
    torch = sys.modules.get("torch")
    undo = _stop_torch_effects(torch, lambda: _GUARDING.on) if torch is not None else None
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    _GUARDING.on = True
    try:
        yield
    finally:
        _GUARDING.on = False
        sys.dont_write_bytecode = bytecode
        if undo is not None:
            undo()


def _gated_audit(event: str, arguments: tuple[Any, ...]) -> None:
    guarding = _GUARDING  # `None` while the interpreter tears the module down: the hook outlives it
    if guarding is not None and guarding.on:
        _audit(event, arguments)


def _audit(event: str, arguments: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = (tuple(arguments) + (None, None, None))[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing and not isinstance(path, int):
            raise SandboxStop(f"open({path!r}, {mode or flags!r}) for writing", dangerous=False)
    elif event.startswith(_DANGEROUS_EVENTS):
        raise SandboxStop(f"{event}{_shown(arguments)}", dangerous=True)
    elif event in _EFFECT_EVENTS:
        raise SandboxStop(f"{event}{_shown(arguments)}", dangerous=False)


def _shown(arguments: tuple[Any, ...]) -> str:
    try:
        text = ", ".join(repr(a) for a in arguments[:2])
    except Exception:
        text = "..."
    return f"({text[:200]})"


def _stop_torch_effects(torch: Any, active: Callable[[], bool]) -> Callable[[], None]:
    """`torch.save` to a path and the collectives of `torch.distributed` stop a trial, named, while
    `active()`; returns what puts the originals back.

    The seccomp filter would refuse them anyway; stopping first says what was reached. DDP's
    gradient synchronisation is turned off, as its `no_sync` does, so a rank's trial runs locally.
    """
    real_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if active() and isinstance(f, (str, bytes, os.PathLike)):
            raise SandboxStop(f"torch.save to {os.fsdecode(f)!r}", dangerous=False)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
    replaced: list[tuple[Any, str, Any]] = [(torch, "save", real_save)]
    dist = sys.modules.get("torch.distributed")
    for name in _COLLECTIVES if dist is not None else ():
        if hasattr(dist, name):
            replaced.append((dist, name, getattr(dist, name)))
            setattr(dist, name, _stopping(f"torch.distributed.{name}", getattr(dist, name), active))

    def undo() -> None:
        for owner, name, original in replaced:
            setattr(owner, name, original)
    return undo


def _stopping(effect: str, original: Any, active: Callable[[], bool]) -> Any:
    def stop(*args: Any, **kwargs: Any) -> Any:
        if not active():
            return original(*args, **kwargs)
        raise SandboxStop(f"the collective {effect}", dangerous=False)

    return stop


def quiet_distributed(objects: list[Any]) -> None:
    """Turn off DistributedDataParallel's synchronisation for the modules among `objects`."""
    torch = sys.modules.get("torch")
    ddp = getattr(getattr(getattr(torch, "nn", None), "parallel", None), "DistributedDataParallel", None)
    if ddp is None:
        return
    for obj in objects:
        if isinstance(obj, ddp):
            obj.require_backward_grad_sync = False
            obj.require_forward_param_sync = False


def _filter_system_calls(sealed: Sequence[int] = (), kept: Sequence[int] = ()) -> None:
    """The allowlist: every system call not allowed here fails with `SANDBOX_ERRNO`."""
    import pyseccomp as seccomp  # type: ignore[import-untyped]

    allow = seccomp.ALLOW
    rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(SANDBOX_ERRNO))

    def add(action: int, name: str, *args: Any) -> None:
        try:
            rules.add_rule(action, name, *args)
        except (OSError, ValueError, RuntimeError):  # a system call this architecture does not have
            pass

    for name in _ALLOWED:
        add(allow, name)
    for name, position in (("open", 1), ("openat", 2)):
        add(allow, name, seccomp.Arg(position, seccomp.MASKED_EQ, _WRITE_FLAGS, 0))
    for name in _BY_DESCRIPTOR:
        if not sealed:
            add(allow, name)
            continue
        add(allow, name, seccomp.Arg(0, seccomp.LT, min(sealed)))
        add(allow, name, seccomp.Arg(0, seccomp.GT, max(sealed)))
        for fd in kept:
            add(allow, name, seccomp.Arg(0, seccomp.EQ, fd))
    for name in _WRITES:
        add(allow, name, seccomp.Arg(0, seccomp.LE, 2))
    for request in _IOCTLS:
        add(allow, "ioctl", seccomp.Arg(1, seccomp.EQ, request))
    add(allow, "mmap", seccomp.Arg(3, seccomp.MASKED_EQ, _MAP_SHARED, 0))  # private
    add(allow, "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, _PROT_WRITE, 0))  # read-only
    add(allow, "mmap", seccomp.Arg(4, seccomp.MASKED_EQ, _NEGATIVE_INT, _NEGATIVE_INT))  # no file: its own memory
    add(allow, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, _CLONE_THREAD))
    add(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are out of reach: C libraries fall back to clone
    add(allow, "tgkill", seccomp.Arg(0, seccomp.EQ, os.getpid()))
    add(allow, "prlimit64", seccomp.Arg(0, seccomp.EQ, 0))  # its own limits only
    rules.load()
