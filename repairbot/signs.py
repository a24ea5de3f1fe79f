"""What the message rules and the candidate generator both read in a crash: the signs of an out-of-memory
error, of a device held by another process, of a transient fault; and the code of a wait.

Shared here so that `repairbot.generate` needs nothing from `repairbot.rules` (whose engine uses it).
"""

from __future__ import annotations

import ast
import re
import textwrap

from repairbot import parsing

OOM = r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|failed to allocate"
BUSY = r"busy or unavailable|another process|in use by|cudaErrorDevicesUnavailable"
_OTHER_PROCESS = r"\bProcess \d+ has ([\d.]+) ([KMGT]?i?B) memory in use"
_THIS_PROCESS = r"this process has ([\d.]+) ([KMGT]?i?B) memory in use"
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

TRANSIENT = (
    r"collective|NCCL|Gloo|Connection reset|connection refused|Broken pipe|timed? ?out|Timeout"
    r"|temporarily unavailable|Resource temporarily|Input/output error|Stale file handle|EOF occurred"
    r"|unspecified launch failure|ECC error|CUDA error: unknown error|device not ready"
)
TRANSIENT_TYPES = {
    "TimeoutError",
    "ConnectionError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "BrokenPipeError",
    "InterruptedError",
    "BlockingIOError",
    "DistBackendError",
    "DistNetworkError",
}
PERMANENT_OS = {"FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError", "FileExistsError"}
MAX_RETRIES = 5


def search(pattern: str, text: str) -> re.Match[str] | None:
    """`re.search`, ignoring case: messages vary in capitals between PyTorch versions."""
    return re.search(pattern, text, re.IGNORECASE)


def others_hold_more(message: str) -> bool:
    """Whether a CUDA out-of-memory message says other processes hold more of the device than this one.

    PyTorch's caching allocator lists each process on the device: `Process 4242 has 70.00 GiB memory in
    use.` for the others, `Including non-PyTorch memory, this process has 7.82 GiB memory in use.` for
    itself.
    """
    if not search(r"out of memory", message):
        return False
    others = sum(_bytes(size, unit) for size, unit in re.findall(_OTHER_PROCESS, message, re.IGNORECASE))
    mine = search(_THIS_PROCESS, message)
    return others > (_bytes(*mine.groups()) if mine else 0)


def _bytes(size: str, unit: str) -> float:
    return float(size) * _UNITS.get(unit, 1)


def wait_code(seconds: float) -> str:
    """Action code sleeping `seconds`, binding no name of the user's module.

    An action's names that are not the function's locals become the module's globals, so a plain
    `import time` would replace a user's `from time import time` by the module.
    """
    return f"import time as _daifu_time\n_daifu_time.sleep({seconds})\ndel _daifu_time"


def parse(text: str) -> ast.Module | None:
    """`text` parsed, or `None` for anything the parser refuses (reports are untrusted: see `repairbot.parsing`)."""
    try:
        return parsing.parse(text)
    except parsing.REFUSED:
        return None


def parse_def(source: str) -> ast.Module | None:
    """The module holding the `def` in `source`, which may be indented (a method); `None` if it does not parse."""
    return parse(textwrap.dedent(source))
