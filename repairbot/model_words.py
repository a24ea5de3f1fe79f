"""A model's words, given as the model's: never passed off as DaiFu's, never a command that seems to have run.

A crash report carries the program's own data (messages, values, paths), and a model may obey an
instruction planted there: its "diagnosis" may then tell the user to run something. Whatever the
model wrote that reaches a person is therefore marked as the model's before its first word (the
terminal shows a diagnosis's first line only), and, when it holds anything shaped like a command,
says that nothing in it was run. What is shaped like a command is decided by an allowlist: plain
prose (letters, digits, spaces, sentence punctuation, a hyphen inside a word) is not; a backtick,
a pipe, a path, an option like `-rf`, a call, an attribute, an underscore or any other character is.
"""

from __future__ import annotations

import re

_PROSE = re.compile(
    r"(?:[^\W_]|\s|[,;:!?'\")%+*\u2018\u2019\u201c\u201d\u2013\u2014]"
    r"|(?<![^\W_])\("  # an opening parenthesis, not a call's
    r"|\.(?![^\W_])|(?<=\d)\.(?=\d)"  # a full stop, not an attribute's dot; a decimal point
    r"|(?<=[^\W_])-(?=[^\W_]))*"  # a hyphen inside a word
)
"""Plain prose, whole: word characters but `_`, spaces, sentence punctuation, a parenthesis that
opens an aside (not a call), a full stop or decimal point (not an attribute's dot), a hyphen
between two letters or digits ("4-D", "re-run")."""
NOT_RUN = "nothing in it was run"


def holds_commands(text: str) -> bool:
    """Whether `text` holds anything but plain prose: code, a command line, a path, an identifier."""
    return _PROSE.fullmatch(text) is None


def as_the_models(model: str, text: str) -> str:
    """`text`, opened by who wrote it, and by `NOT_RUN` when it holds anything like a command."""
    said = f" ({NOT_RUN})" if holds_commands(text) else ""
    return f"The model ({model}) says, not DaiFu{said}: {text}"


def flagged(explanation: str) -> str:
    """A suggestion's explanation as the model wrote it (the response marks the suggestion's origin),
    opened by a warning when it holds anything like a command."""
    return f"(the model's words; nothing in them was run) {explanation}" if holds_commands(explanation) else explanation
