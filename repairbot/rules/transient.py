"""Transient failures: I/O hiccups, lost connections, collective timeouts, device hiccups."""

from __future__ import annotations

from repairbot.rules.context import Context, Finding, present, retry, search, wait_code

_TRANSIENT = (
    r"collective|NCCL|Gloo|Connection reset|connection refused|Broken pipe|timed? ?out|Timeout"
    r"|temporarily unavailable|Resource temporarily|Input/output error|Stale file handle|EOF occurred"
    r"|unspecified launch failure|ECC error|CUDA error: unknown error|device not ready"
)
_TRANSIENT_TYPES = {
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
_PERMANENT_OS = {"FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError", "FileExistsError"}
MAX_RETRIES = 5


def transient(ctx: Context) -> Finding | None:
    """Retry with a growing delay, a bounded number of times; after that, let the crash stand."""
    plain_os = ctx.report.exception.type in {"OSError", "IOError"} and not ctx.exception_types & _PERMANENT_OS
    if not (ctx.exception_types & _TRANSIENT_TYPES or plain_os or search(_TRANSIENT, ctx.message)):
        return None
    tries = ctx.tried_count()
    if tries >= MAX_RETRIES:
        return Finding(
            "transient", f"A transient-looking failure came back after {tries} retries; it is likely not transient.", []
        )
    delay = min(60, 2**tries)
    return Finding(
        "transient",
        "A transient failure (I/O, network, collective communication or a device hiccup) "
        "that often passes when tried again.",
        present(
            ctx.outer().action(
                wait_code(delay),
                f"Wait {delay} s (back-off grows with each retry, at most {MAX_RETRIES}), then rerun the statement.",
                0.7,
            ),
            retry("Run the statement again at once.", 0.5),
        ),
    )


RULES = [transient]
