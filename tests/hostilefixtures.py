"""Reports that used to hurt the repair bot, as request bodies (the issue's reproductions)."""

from __future__ import annotations

import copy
from typing import Any

from tests.botfixtures import report_of


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


def base_report() -> dict[str, Any]:
    """A real report (a float used as a slice bound), as JSON data, to be varied."""
    return report_of(halves, [1, 2, 3, 4]).model_dump(mode="json")


def huge_message_report(size: int = 200_000, tag: str = "") -> dict[str, Any]:
    """A report whose message is `size` characters that one rules regex used to take 30 s on.

    `Parent directory (.+?) does not exist`, tried at each of the 12k places the words appear,
    scanned to the end of the line every time.
    """
    report = base_report()
    report["exception"]["message"] = (tag + "Parent directory " * (size // 17 + 1))[:size]
    return report


def many_floats_report(count: int = 300, padding: int = 0) -> dict[str, Any]:
    """A report whose faulty statement reads `count` float locals (each once gave two suggestions).

    padding: lines of comment added to the function, to make its source (repeated in each surgery) longer.
    """
    names = [f"a{i}" for i in range(count)]
    statement = "    return xs[:" + " + ".join(names) + "]\n"
    lines = ["def many(xs):\n"] + [f"    # {'-' * 70}\n"] * padding
    lines += [f"    {name} = {i} / 2\n" for i, name in enumerate(names)] + [statement]
    report = base_report()
    report["function"].update(
        name="many",
        qualname="many",
        source="".join(lines),
        first_lineno=1,
        lineno=len(lines),
        statement=statement,
    )
    variables = {
        name: {"type": "float", "text": repr(i / 2), "facts": {"value": i / 2}} for i, name in enumerate(names)
    }
    variables["xs"] = {"type": "list", "text": "list of length 4: [1, 2, 3, ...]", "facts": {"len": 4}}
    report["variables"] = variables
    frame = report["frames"][0]
    frame.update(
        function="many", qualname="many", lineno=len(lines), code=statement.strip(), locals=copy.deepcopy(variables)
    )
    report["frames"] = [frame]
    return report
