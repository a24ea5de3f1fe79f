"""Run Python programs as `python main.py` would, forked from one process that has imported torch.

Importing torch takes seconds (and its first optimizer imports `torch._dynamo`, seconds more); the
seed programs themselves run in a fraction of one. This runner imports both once, then forks a
child per run: the child is a fresh main process in every way a
program can see (its own working directory, environment, `sys.argv`, `sys.path[0]`, `__main__`,
standard streams, no daifu imported yet, `multiprocessing.parent_process()` is `None`, atexit
handlers run at the end), with torch already in `sys.modules`.

Protocol: one JSON request per line on stdin, `{"id", "cwd", "argv", "env", "stdout", "stderr"}`
(`argv` as after `python`: `["main.py"]` or `["-m", "daifu", "replay", "main.py"]`; `stdout` and
`stderr` are files to write); one JSON line per finished run on stdout, `{"id", "status"}`. The
runner is single-threaded (forking from a threaded process is unsafe) and exits when stdin closes
and its children are done.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import select
import sys
import traceback
from typing import Any

import torch  # noqa: F401  # the imports every child shares: torch, and what its first optimizer imports
import torch._dynamo  # noqa: F401

_STARTUP_PATH = list(sys.path)
_STARTUP_PYTHONPATH = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _child(request: dict[str, Any]) -> None:
    """Become the program of `request`; never returns."""
    status = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        writing = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        streams = ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], writing), (2, request["stderr"], writing))
        for fd, path, mode in streams:
            target = os.open(path, mode, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        wanted = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        rest = [entry for entry in _STARTUP_PATH[1:] if entry not in _STARTUP_PYTHONPATH]
        argv = request["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[:] = [os.getcwd(), *wanted, *rest]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[0])
            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(script), *wanted, *rest]
            runpy.run_path(script, run_name="__main__")
        status = 0
    except SystemExit as leaving:
        code = leaving.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException as uncaught:
        # as the interpreter does for an uncaught exception, before atexit handlers run
        sys.last_type, sys.last_value, sys.last_traceback = type(uncaught), uncaught, uncaught.__traceback__
        if sys.version_info >= (3, 12):
            sys.last_exc = uncaught
        sys.excepthook(*sys.exc_info())
        status = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
    os._exit(status)


def main() -> None:
    pending = b""
    running: dict[int, str] = {}
    reading = True
    while reading or running:
        ready, _, _ = select.select([0] if reading else [], [], [], 0.02)
        if ready:
            data = os.read(0, 1 << 16)
            reading = bool(data)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request)
                running[pid] = request["id"]
        while running:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reply = {"id": running.pop(pid), "status": os.waitstatus_to_exitcode(wait_status)}
            os.write(1, (json.dumps(reply) + "\n").encode())


if __name__ == "__main__":
    main()
