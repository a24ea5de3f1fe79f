"""The sandbox of a trial: what a forked copy of the training process may not do.

A trial runs the user's real code on the real data; it must leave no trace outside its own
memory. Two layers, installed in the child right after `fork`:

1. a seccomp filter (libseccomp, through `pyseccomp`), the barrier: opening a file for writing,
   deleting, renaming or creating files and folders, changing their modes, writing to any file
   descriptor other than the trial's own (0, 1, 2: the verdict pipe and the captured output),
   reading from inherited pipes and sockets (a DataLoader's queues, a process group), creating
   sockets or connecting them, starting programs or processes, signalling other processes: each
   fails with `SANDBOX_ERRNO`, whatever code asks — native code included (`torch.save` writes
   through PyTorch's C++ file writer, which no Python hook sees);
2. audit hooks (PEP 578) and a few wrappers, to *name* what Python code tried before it
   happens: the trial stops there with `SandboxStop`, a `BaseException` the user's
   `except Exception` does not swallow. Spawning a process or opening a connection is
   `dangerous`; writing a file or taking part in a collective is an effect the trial stops at.
"""

from __future__ import annotations

import errno
import os
import sys
from types import FrameType
from typing import Any

SANDBOX_ERRNO = errno.EBADE
"""The error the seccomp filter answers with: rare enough that a trial knows the sandbox caused it."""

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_FILE_CHANGES = (
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link", "linkat",
    "symlink", "symlinkat", "truncate", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat", "creat", "openat2", "name_to_handle_at",
    "open_by_handle_at",
)
_WRITES = (
    "write", "writev", "pwrite64", "pwritev", "pwritev2", "sendto", "sendmsg", "sendmmsg", "ftruncate",
    "fallocate", "copy_file_range", "sendfile", "splice", "tee", "vmsplice",
)
_READS = ("read", "readv", "preadv", "preadv2", "pread64", "recvfrom", "recvmsg", "recvmmsg")
_NETWORK = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")
_PROCESSES = ("execve", "execveat", "fork", "vfork", "kill", "ptrace", "process_vm_writev", "process_vm_readv")
_CLONE_THREAD = 0x00010000
_PROT_WRITE, _MAP_SHARED = 0x2, 0x01

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


def install() -> None:
    """Install both layers in this (child) process; for good: there is no way back."""
    _guard_python()
    _filter_system_calls()


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
        _stop_torch_effects(torch)


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


def _stop_torch_effects(torch: Any) -> None:
    """`torch.save` to a path and the collectives of `torch.distributed` stop a trial, named.

    The seccomp filter would refuse them anyway; stopping first says what was reached. DDP's
    gradient synchronisation is turned off, as its `no_sync` does, so a rank's trial runs locally.
    """
    real_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, bytes, os.PathLike)):
            raise SandboxStop(f"torch.save to {os.fsdecode(f)!r}", dangerous=False)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    for name in _COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _stopping(f"torch.distributed.{name}"))


def _stopping(effect: str) -> Any:
    def stop(*args: Any, **kwargs: Any) -> Any:
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


def _inherited_channels() -> list[int]:
    """The pipes and sockets this process inherited (beyond 0, 1 and 2)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            found.append(fd)
    return found


def _filter_system_calls() -> None:
    import pyseccomp as seccomp  # type: ignore[import-untyped]

    refuse = seccomp.ERRNO(SANDBOX_ERRNO)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)

    def add(action: int, name: str, *args: Any) -> None:
        try:
            rules.add_rule(action, name, *args)
        except (OSError, ValueError, RuntimeError):  # a system call this architecture does not have
            pass

    for name, position in (("open", 1), ("openat", 2)):
        for flag in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND):
            add(refuse, name, seccomp.Arg(position, seccomp.MASKED_EQ, flag, flag))
    for name in _FILE_CHANGES + _NETWORK + _PROCESSES:
        add(refuse, name)
    for name in _WRITES:
        add(refuse, name, seccomp.Arg(0, seccomp.GT, 2))
    for fd in _inherited_channels():
        for name in _READS:
            add(refuse, name, seccomp.Arg(0, seccomp.EQ, fd))
    add(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))
    add(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are out of reach: C libraries fall back to clone
    add(refuse, "tgkill", seccomp.Arg(0, seccomp.NE, os.getpid()))
    add(refuse, "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, _PROT_WRITE, _PROT_WRITE),
        seccomp.Arg(3, seccomp.MASKED_EQ, _MAP_SHARED, _MAP_SHARED),
        seccomp.Arg(4, seccomp.MASKED_EQ, 0xFFFFFFFF80000000, 0))
    rules.load()
