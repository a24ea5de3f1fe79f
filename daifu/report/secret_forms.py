"""The forms a known secret may take in text, and finding them: plain, reversed, hex, base64, in pieces.

Redaction by value (`daifu.report.redact`) knows some secrets exactly: the values of the environment's
secret variables, the strings a crash keeps under secret names. Code that wants one of them to leave the
process in a crash report need not send it as it is: it can store it reversed, encoded, or cut in two
halves in two fields (an optimizer's param group, an object's attributes). So for each known secret this
module derives its forms — the secret and its reverse, each as text, as hex (either case) and as
base64 (standard and URL-safe, at each of the three byte alignments a longer encoded text may put it
at), and each of those reversed — and finds in a text every run of eight characters or more that
belongs to one of them, extended to as long as it goes on matching. A secret cut into pieces of eight
characters or more is found piece by piece, whatever separates them.

What is not found: pieces under eight characters, other encodings (a cipher, a compression, base32),
and secrets not known by value. The formats of `daifu.report.redact` cover the last, also reversed or
encoded; the report's bounds (`daifu.report.summary`) limit how much of a value can be sent at all.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Iterator

PIECE = 8
"""The shortest run of a form that is looked for: shorter ones would match ordinary words and numbers."""


def forms(secret: str) -> set[str]:
    """`secret` as it may be disguised: reversed, hex, base64 (each alignment), and those reversed."""
    found: set[str] = set()
    for text in (secret, secret[::-1]):
        data = text.encode("utf-8", "surrogatepass")
        encoded = [text, data.hex(), data.hex().upper(), *_base64_cores(data)]
        found.update(encoded)
        found.update(form[::-1] for form in encoded)
    return {form for form in found if len(form) >= PIECE or form in (secret, secret[::-1])}


def _base64_cores(data: bytes) -> Iterator[str]:
    """The characters of base64 that depend on `data` alone, for each byte offset modulo 3 at which a
    longer encoded text may hold it (the characters at its edges also carry the neighbours' bits)."""
    for offset in range(3):
        standard = base64.b64encode(b"\0" * offset + data).decode()
        first, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
        core = standard[first:end]
        yield core
        yield core.translate(str.maketrans("+/", "-_"))


class Finder:
    """Where the forms of some secrets occur in a text (`spans`)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.whole: set[str] = set()  # every form, looked for whole (a form of one kind of letters has no piece)
        self.pieces: dict[str, list[tuple[str, int]]] = {}  # each piece: the forms holding it, where
        for secret in secrets:
            for form in forms(secret):
                self.whole.add(form)
                for start in range(len(form) - PIECE + 1):
                    piece = form[start : start + PIECE]
                    if _distinctive(piece):
                        self.pieces.setdefault(piece, []).append((form, start))
        alphabet = "".join(sorted(set().union(*self.pieces))) if self.pieces else "\0"
        self.runs = re.compile(f"[{re.escape(alphabet)}]{{{PIECE},}}")
        """Runs of the characters that pieces are made of: the only places a piece can be (found in C)."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The `(start, end)` ranges of `text` that hold a form or a piece of one, merged."""
        found = [(i, i + len(form)) for form in self.whole for i in _occurrences(text, form)]
        for run in self.runs.finditer(text):
            if _distinctive(run.group()):
                found += self._in_run(text, run.start(), run.end())
        return _merged(found)

    def _in_run(self, text: str, position: int, stop: int) -> Iterator[tuple[int, int]]:
        while position <= stop - PIECE:
            places = self.pieces.get(text[position : position + PIECE])
            if places is None:
                position += 1
                continue
            extents = [_extent(text, position, form, at) for form, at in places]
            end = max(e for _, e in extents)
            yield min(s for s, _ in extents), end
            position = max(end - PIECE + 1, position + 1)


def _distinctive(piece: str) -> bool:
    """A piece worth looking for: two kinds of letters or digits at least, so not a word or a number."""
    lower, upper = piece.upper() != piece, piece.lower() != piece
    return lower + upper + (_DIGIT.search(piece) is not None) >= 2


_DIGIT = re.compile(r"\d")


def _extent(text: str, position: int, form: str, at: int) -> tuple[int, int]:
    """How far around `position` the text goes on reading as `form` from its index `at`."""
    before = 0
    while before < min(position, at) and text[position - before - 1] == form[at - before - 1]:
        before += 1
    after = PIECE
    while position + after < len(text) and at + after < len(form) and text[position + after] == form[at + after]:
        after += 1
    return position - before, position + after


def _occurrences(text: str, form: str) -> Iterator[int]:
    start = text.find(form)
    while start != -1:
        yield start
        start = text.find(form, start + 1)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@functools.lru_cache(maxsize=16)
def finder(secrets: frozenset[str]) -> Finder:
    """The finder of `secrets`, built once for a given set (the environment's changes rarely)."""
    return Finder(secrets)


def hide(text: str, secrets: frozenset[str], placeholder: str) -> str:
    """`text` with every form of `secrets` found in it replaced by `placeholder`."""
    if not secrets:
        return text
    spans = finder(secrets).spans(text)
    if not spans:
        return text
    parts, position = [], 0
    for start, end in spans:
        parts += [text[position:start], placeholder]
        position = end
    return "".join(parts) + text[position:]


def decoded(word: str) -> str | None:
    """`word` decoded as hex or base64 (standard or URL-safe), when it decodes to mostly printable text."""
    candidates: list[bytes] = []
    if len(word) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in word):
        candidates.append(bytes.fromhex(word))
    for alphabet in (None, b"-_"):
        padded = word + "=" * (-len(word) % 4)
        try:
            candidates.append(base64.b64decode(padded, altchars=alphabet, validate=True))
        except (binascii.Error, ValueError):
            continue
    for data in candidates:
        text = data.decode("latin-1")
        if text and sum(c.isprintable() for c in text) >= 0.9 * len(text):
            return text
    return None
