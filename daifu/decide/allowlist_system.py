"""The system, as the allowlist sees it: what reaches files, processes, the network, the environment or code.

A repair from the bot may compute; it may not reach the system. Two things name the system here:

- `SYSTEM_MODULES`: the modules whose functions, classes and methods reach it (`os`, `shutil`,
  `subprocess`, `socket`, `ctypes`, `importlib`, `pickle`, ..., and the libraries that send data off
  the machine: `requests`, `wandb`, `mlflow`, ...). A callable they define is never admitted, whatever
  name it goes by.
- `system_attributes()`: the names of the methods of the system's own types — `pathlib.Path`, open
  files, sockets, processes, memory maps, archives — and of the functions of its modules, less those
  that only compute (`Path.with_suffix`, `os.fspath`) or read a fact about a path (`Path.exists`).
  On a receiver whose type the checker cannot know, such a name is refused wherever it appears:
  called (`p.unlink()`), or taken as a value (`map(Path(f).touch, modes)`, `max(key=p.chmod)`), since a
  callable handed to another callable is called.

The list is computed from the running Python, so a method a new version adds to `pathlib.Path` is
refused until it is reviewed into `HARMLESS`.
"""

from __future__ import annotations

import functools

SYSTEM_MODULES = frozenset(
    "os posix nt posixpath ntpath subprocess shutil socket _socket ssl select selectors pickle _pickle marshal "
    "shelve dbm ctypes _ctypes importlib builtins sys io _io pathlib glob tempfile code codeop runpy "
    "operator asyncio multiprocessing concurrent threading _thread signal pty tty fcntl resource mmap "
    "zipfile tarfile gzip bz2 lzma zipimport sqlite3 urllib http requests urllib3 httpx aiohttp ftplib smtplib "
    "telnetlib poplib imaplib xmlrpc webbrowser gc inspect types logging atexit faulthandler tracemalloc "
    "wandb mlflow neptune comet_ml clearml tensorboard tensorboardX torch.utils.tensorboard "
    "torch.serialization torch.hub torch.jit torch.package torch.utils.cpp_extension torch.distributed "
    "torch.multiprocessing torch.library torch.ops torch.classes torch.compiler torch._dynamo torch.export "
    "torch.onnx torch.profiler torch.autograd.profiler numpy.lib.npyio numpy.lib._npyio_impl numpy.lib.format "
    "numpy.lib._datasource numpy._core.memmap numpy.core.memmap numpy.ctypeslib numpy.f2py numpy.testing "
    "pandas.io".split()
)
"""Modules (and their submodules) whose callables reach the system: files, processes, the network, the
process's own state (`sys`, `gc`, `signal`), code loading and introspection (`importlib`, `inspect`,
`types`, `operator.attrgetter`), and the libraries that write logs or send data away."""

HARMLESS = frozenset(
    (
        # path algebra and facts about a path (metadata, not contents)
        "absolute as_posix as_uri cwd exists expanduser home is_absolute is_relative_to is_reserved joinpath "
        "match full_match relative_to resolve samefile with_name with_segments with_stem with_suffix "
        "is_block_device is_char_device is_dir is_fifo is_file is_junction is_mount is_socket is_symlink "
        "fspath fsdecode fsencode getcwd getcwdb cpu_count getpid getppid strerror "
        # facts about an open file, a socket or a map, read without reading or moving anything
        "fileno isatty readable seekable writable tell size gettimeout getblocking get_inheritable getsockname "
        "getpeername getvalue group owner find rfind namelist getinfo infolist getnames getmember getmembers "
        # what a tensor or a container shares a name with: `detach` of a text file only unwraps it
        "detach getsizeof exc_info exception getrecursionlimit getdefaultencoding getfilesystemencoding "
        "waitstatus_to_exitcode WCOREDUMP WEXITSTATUS WIFCONTINUED WIFEXITED WIFSIGNALED WIFSTOPPED WSTOPSIG "
        "WTERMSIG major minor makedev ignore_patterns escape has_magic "
        # the path classes: making a path object computes it
        "Path PurePath PosixPath PurePosixPath WindowsPath PureWindowsPath "
        # folders: what `os.makedirs` may do, checked by the trial (only the folder a failing write needs)
        "mkdir"
    ).split()
)
"""Names of the system's methods and functions that compute, or read a fact about a path or an open
object, without reading contents, writing, running or connecting."""


@functools.cache
def system_attributes() -> frozenset[str]:
    """The names of the system's methods and functions, less `HARMLESS` (computed once)."""
    import io
    import mmap
    import os
    import pathlib
    import pickle
    import shutil
    import socket
    import subprocess
    import sys
    import tarfile
    import tempfile
    import zipfile

    surfaces: list[object] = [
        os, shutil, tempfile, pickle, sys, pathlib.Path, io.TextIOWrapper, io.BufferedWriter, io.BufferedReader,
        io.BufferedRandom, io.FileIO, io.BytesIO, io.StringIO, socket.socket, subprocess.Popen, mmap.mmap,
        zipfile.ZipFile, tarfile.TarFile,
    ]
    found = {name for surface in surfaces for name in _public_callables(surface)}
    found |= {"open", "exec", "eval", "compile", "breakpoint", "input", "tofile", "dump", "dumps", "save", "load",
              "loads", "send", "system"}
    return frozenset((found | INTROSPECTION) - HARMLESS)


INTROSPECTION = frozenset({"getattr", "setattr", "delattr", "globals", "locals", "vars", "format", "format_map"})
"""Names of what reads or changes attributes and namespaces by name (`'{0.__globals__}'.format(f)`): no
effect by themselves, refused in a repair's code as the way to one."""


def _public_callables(surface: object) -> set[str]:
    found = set()
    for name in dir(surface):
        if name.startswith("_"):
            continue
        try:
            value = getattr(surface, name)
        except Exception:  # noqa: BLE001 - an attribute its own type cannot give is no method
            continue
        if callable(value):
            found.add(name)
    return found


def in_system_module(owner: str) -> bool:
    """Whether the module named `owner` is one of `SYSTEM_MODULES` or inside one."""
    return any(owner == m or owner.startswith(m + ".") for m in SYSTEM_MODULES)


FILE_FUNCTIONS = {
    "open": (0, "file"),
    "torch.save": (1, "f"),
    "torch.load": (0, "f"),
    "torch.from_file": (0, "filename"),
    "numpy.save": (0, "file"),
    "numpy.savez": (0, "file"),
    "numpy.savez_compressed": (0, "file"),
    "numpy.savetxt": (0, "fname"),
    "numpy.load": (0, "file"),
    "numpy.loadtxt": (0, "fname"),
    "numpy.genfromtxt": (0, "fname"),
    "numpy.fromfile": (0, "file"),
    "numpy.memmap": (0, "filename"),
    "pickle.dump": (1, "file"),
    "pickle.load": (0, "file"),
    "json.dump": (1, "fp"),
    "json.load": (0, "fp"),
}
"""Calls that read or write a file, with the argument (position, keyword) naming it: for these, the
file is what a repair must not aim, while the data written is the program's (a checkpoint's tensors)."""

FILE_READERS = frozenset(
    {"torch.load", "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "pickle.load", "json.load"}
)
"""The calls of `FILE_FUNCTIONS` that only read their file (`open` does when its mode says so)."""

EFFECT_FUNCTIONS = frozenset(FILE_FUNCTIONS) | {"exec", "eval", "compile", "__import__", "breakpoint", "input"}
"""Calls outside `SYSTEM_MODULES` that reach the system all the same."""

PATH_METHODS = frozenset(
    "save save_pretrained save_model save_weights savefig to_csv to_json to_parquet to_pickle to_hdf to_excel "
    "to_netcdf export log_artifact upload_file upload push_to_hub".split()
)
"""Method names that, on the objects of libraries outside `SYSTEM_MODULES` (a model, a DataFrame, a
figure, an experiment tracker), write their receiver to the file or place their first argument names."""

LOG_METHODS = frozenset("log log_metrics log_metric log_dict add_scalar add_scalars add_image add_text "
                        "add_histogram add_figure".split())
"""Method names that record data where their receiver was set up to (a summary writer's folder, a
tracker's server): the receiver aims them, the data is the program's metrics."""

CONTENT_METHODS = frozenset("write writelines send sendall sendmsg sendto write_text write_bytes".split())
"""Methods of the system's types whose arguments are the data written or sent: the receiver (the file,
the socket, the path) aims them, and calling them does not change where it points."""

READ_METHODS = frozenset("read read1 readline readlines readall readinto readinto1 read_text read_bytes".split())
"""Methods of files and paths that read them: the receiver (the file, the path) is what they read."""

EFFECT_METHODS = PATH_METHODS | LOG_METHODS
