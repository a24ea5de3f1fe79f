"""Transient failures: I/O hiccups, lost connections, collective timeouts, device hiccups."""

from __future__ import annotations

from repairbot.rules.context import ReportView, Finding, present, retry, search
from repairbot.signs import MAX_RETRIES, PERMANENT_OS, TRANSIENT, TRANSIENT_TYPES, wait_code



def transient(ctx: ReportView) -> Finding | None:
    """Retry with a growing delay, a bounded number of times; after that, let the crash stand."""
    plain_os = ctx.report.exception.type in {"OSError", "IOError"} and not ctx.exception_types & PERMANENT_OS
    if not (ctx.exception_types & TRANSIENT_TYPES or plain_os or search(TRANSIENT, ctx.message)):
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
