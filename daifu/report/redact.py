"""Redaction by value: secrets recognised in text by their format or their context.

A crash report leaves the process (to the repair bot, possibly an LLM service) and stays in the
record, so a secret must not reach it whatever the variable holding it is called. `redact(text)`
replaces each secret it recognises by `<redacted:kind>` and keeps the rest readable
(`postgresql://user:<redacted:password>@db/x`):

- known token formats: OpenAI (`sk-...`, `sk-proj-...`), Anthropic (`sk-ant-...`), GitHub (`ghp_`,
  `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), AWS access key ids (`AKIA...`, `ASIA...`) and secret
  keys next to an AWS word, Slack (`xox[baprs]-`), Google API keys (`AIza...`), Hugging Face (`hf_`),
  JWTs (`eyJ....eyJ....`), PEM private key blocks;
- context: `Bearer`/`Basic`/`Token` credentials, `Authorization:` headers, passwords in URLs
  (`scheme://user:pw@host`), and the value given to a secret-looking key (`api_key=...`,
  `"password": "..."`, `token: ...`); in code only string literals count as such values;
- the same key shapes written backwards, or inside a hex or base64 word;
- high-entropy words (20+ characters, mixed classes, 3.5+ bits per character) a few characters after
  a secret-looking word ("invalid secret: 9fQ..."), and the environment's secrets (the value of every
  variable whose name looks secret, every key of a known shape a variable holds), wherever they appear;
- the values the crash itself marks as secret (`secret_values`: what its variables and dicts hold
  under secret-looking names, what its source assigns to them, any key of a known shape they hold),
  wherever else they appear (`scrub`, `known_secrets`): an exception message that quotes a password
  without saying so.

A secret known by value — the environment's, the crash's — is found in every form that
`daifu.report.secret_forms` derives: reversed, hex, base64, and in pieces of eight characters or more
(two halves in two fields, or joined with a separator), so code that stores it disguised in the program's
state does not carry it out in the next report.

A replacement keeps the lines of what it replaces (a PEM block becomes a placeholder on each of its
lines), so line numbers in redacted source still point at the same statements; `restore_lines` puts
back the original of the lines a repair kept, where that can be told unambiguously.
"""

from __future__ import annotations

import ast
import contextvars
import functools
import itertools
import math
import os
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from daifu.environ import EnvironmentMemo
from daifu.report.secret_forms import decoded, hide

PLACEHOLDER = "<redacted:{}>"
_MAX_TEXT = 256 * 1024
"""Characters of one text looked at; a longer one is cut first (a report never sends that much)."""


def _lazy(pattern: str) -> Callable[[], re.Pattern[str]]:
    """`pattern`, compiled at its first use. Most texts hold no anchor of most patterns (an exception
    message rarely mentions a token), and compiling them all at import cost the first crash 7 ms."""
    return functools.cache(lambda: re.compile(pattern))


SECRET_WORDS = (
    r"passw(?:or)?d|passwd|passphrase|pwd|secret|credentials?|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|auth[_-]?token|access[_-]?token|refresh[_-]?token|id[_-]?token|session[_-]?(?:id|key|token)|bearer"
    r"|authori[sz]ation|cookie|(?:hf|gh|github|gitlab|slack|openai|anthropic|aws|wandb|api|bot|client)[_-]?"
    r"(?:token|key|secret)"
)
"""Words that make a name or a key secret-looking. Bare `token` and `key` are ambiguous in deep learning
(`tokens`, `pad_token`, `key_padding_mask`), so only the exact names `token` and `auth` are added."""
_SECRET_KEY = _lazy(rf"(?i)(?:{SECRET_WORDS})")
_EXACT_SECRET_KEYS = frozenset({"token", "auth", "pass", "pw", "aws_secret_access_key"})
_NOT_SECRET = frozenset({"pwd", "oldpwd"})
"""Names that only look secret: the shell's working directories (`$PWD`, `$OLDPWD`)."""

Replacer = Callable[["re.Match[str]"], str]


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """Whether a dict key, a keyword or a variable's name suggests that its value is a credential."""
    lowered = name.lower()
    if lowered in _NOT_SECRET:
        return False
    return lowered in _EXACT_SECRET_KEYS or bool(_SECRET_KEY().search(name))


def _placeholder(kind: str, matched: str) -> str:
    """The placeholder for `matched`, once on each of its lines, so that line numbers stay right."""
    return "\n".join([PLACEHOLDER.format(kind)] * (matched.count("\n") + 1))


def _whole(kind: str) -> Replacer:
    return lambda m: _placeholder(kind, m.group(0))


def _group(kind: str, group: int) -> Replacer:
    """Replace only `group` of the match, keeping what surrounds it (`Bearer `, `user:`, `@host`)."""

    def replace(m: re.Match[str]) -> str:
        start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
        text = m.group(0)
        return text[:start] + _placeholder(kind, m.group(group)) + text[end:]

    return replace


def _scheme(m: re.Match[str]) -> str:
    """`Bearer <credential>`: redacted when the word after the scheme looks like a credential, not prose
    ("token embeddings"): it has a digit or a symbol, or mixed case, and after `token` 16+ characters."""
    value = m.group(2)
    if not _credential_like(value) or (m.group(1).lower() == "token" and len(value) < 16):
        return m.group(0)
    return _group("bearer", 2)(m)


_SHAPES: list[tuple[tuple[str, ...], Callable[[], re.Pattern[str]], Replacer]] = [
    (("sk-ant-",), _lazy(r"\bsk-ant-[A-Za-z0-9_\-]{16,}"), _whole("anthropic-key")),
    (("sk-",), _lazy(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}"), _whole("openai-key")),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        _lazy(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
        _whole("github-token"),
    ),
    (("glpat-",), _lazy(r"\bglpat-[A-Za-z0-9_\-]{20,}"), _whole("gitlab-token")),
    (
        ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
        _lazy(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),
        _whole("aws-access-key-id"),
    ),
    (("aws",), _lazy(r"(?i)(aws.{0,30}?)\b([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"), _group("aws-secret-key", 2)),
    (("xox",), _lazy(r"\bxox[baprs]-[A-Za-z0-9\-]{10,}"), _whole("slack-token")),
    (("aiza",), _lazy(r"\bAIza[0-9A-Za-z_\-]{35,40}"), _whole("google-api-key")),
    (("hf_",), _lazy(r"\bhf_[A-Za-z0-9]{30,}"), _whole("huggingface-token")),
    (("eyj",), _lazy(r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"), _whole("jwt")),
]
"""Secrets recognised by their own shape, in the order they are tried (`sk-ant-` before `sk-`), each
with the lower-case fragments one of which the text must hold for the pattern to be tried at all.
Written backwards or encoded they are still found (`_disguised_shapes`)."""
_CONTEXTS: list[tuple[tuple[str, ...], Callable[[], re.Pattern[str]], Replacer]] = [
    (
        ("bearer", "basic", "token"),
        _lazy(r"(?i)\b(bearer|basic|token)\s+((?!<redacted)[A-Za-z0-9._~+/=\-]{8,})"),
        _scheme,
    ),
    (
        ("://",),
        _lazy(r"\b([a-zA-Z][a-zA-Z0-9+.\-]{1,20}://[^\s:/@'\"<>]{1,200}:)([^\s@/'\"<>]{1,200})(@)"),
        _group("password", 2),
    ),
]
"""Credentials recognised by the words around them (`Bearer ...`, `scheme://user:password@`)."""
_FORMATS = _SHAPES + _CONTEXTS
_ENCODED = _lazy(r"[A-Za-z0-9+/_\-]{24,}={0,2}")
"""A word that may be hex or base64: long enough to hold a key."""

_PEM_BEGIN = _lazy(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_KEY_ANCHORS = ("pass", "pwd", "secret", "credential", "key", "token", "auth", "bearer", "cookie", "session")
"""Fragments one of which a text must hold for the secret-looking-key patterns to be tried."""

_KEY = rf"[\w\-]*(?:{SECRET_WORDS})[\w\-]*|token|auth"
_QUOTED_VALUE = _lazy(
    rf"(?i)\b(?P<key>{_KEY})(?P<sep>['\"]?\s*[:=]\s*)(?P<q>['\"])(?P<value>(?:(?!(?P=q))[^\n\\]|\\.){{1,500}}?)(?P=q)"
)
_BARE_VALUE = _lazy(
    rf"(?i)\b(?P<key>{_KEY})(?P<sep>['\"]?\s*[:=]\s*)(?P<value>(?!<redacted)(?!(?:bearer|basic|token)\b)[^\s,;'\"()\[\]{{}}<>]{{4,}})"
)
_HEADER = _lazy(
    r"(?i)\b(authori[sz]ation['\"]?\s*[:=]\s*['\"]?)((?!<redacted)(?!bearer\b|basic\b|token\b)[^\s'\"][^'\"\n]{3,})"
)
_NEAR_WORD = _lazy(
    rf"(?i)(?:{SECRET_WORDS}|\btoken\b)[^\n]{{0,30}}?(?<![A-Za-z0-9+/_\-])([A-Za-z0-9+/_\-]{{20,200}})"
)


def redact(text: str, *, code: bool = False) -> str:
    """`text` with every secret recognised in it replaced by `<redacted:kind>`.

    code: `text` is source code, where a secret-looking key's value counts only as a string literal
    (`token = tokens[i]` is not a secret; `api_key = "..."` is).
    The values of the environment's secrets, and those made known with `known_secrets`, are found in
    every form `daifu.report.secret_forms` derives (reversed, encoded, in pieces).
    """
    environment, known = _secrets.get(_scan_environment), _known.get()
    if len(text) > _MEMO_TEXT:
        return _redacted(text, code, environment, known)
    return _redacted_short(text, code, environment, known)


_MEMO_TEXT = 4096
"""Texts up to this many characters are redacted once for the same secrets (`_redacted_short`): a repeated
crash redacts the same message and code lines again, and its restore time is a few hundred microseconds."""


def _redacted(text: str, code: bool, environment: frozenset[str], known: frozenset[str]) -> str:
    """`redact(text, code=code)` with these secrets known by value: a function of its arguments alone."""
    text = _private_keys(text[:_MAX_TEXT])
    lowered = text.lower()
    for anchors, pattern, replace in _FORMATS:
        if any(anchor in lowered for anchor in anchors):
            text = pattern().sub(replace, text)
    text = _disguised_shapes(text)
    if any(anchor in lowered for anchor in _KEY_ANCHORS):
        text = _QUOTED_VALUE().sub(_keyed, text)
        if not code:
            text = _HEADER().sub(_group("secret", 2), text)
            text = _BARE_VALUE().sub(_keyed, text)
            text = _NEAR_WORD().sub(_high_entropy, text)
    text = hide(text, environment, PLACEHOLDER.format("environment"))
    return hide(text, known, PLACEHOLDER.format("secret"))


_redacted_short = functools.lru_cache(maxsize=512)(_redacted)


def _disguised_shapes(text: str) -> str:
    """`text` with each key of a known shape (`_SHAPES`) written backwards, or hidden (forwards or
    backwards) in a hex or base64 word (itself forwards or backwards), redacted."""
    spans = [(len(text) - end, len(text) - start) for start, end in _shape_spans(text[::-1])]
    for word in _ENCODED().finditer(text):
        plains = [decoded(word.group()), decoded(word.group()[::-1])]
        if any(plain is not None and (_shape_spans(plain) or _shape_spans(plain[::-1])) for plain in plains):
            spans.append(word.span())
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + _placeholder("disguised-key", text[start:end]) + text[end:]
    return text


def _shape_spans(text: str) -> list[tuple[int, int]]:
    lowered = text.lower()
    return [
        match.span()
        for anchors, pattern, _ in _SHAPES
        if any(anchor in lowered for anchor in anchors)
        for match in pattern().finditer(text)
    ]


def _private_keys(text: str) -> str:
    """`text` with each PEM private key block, from its BEGIN line to its END line (or the end), redacted."""
    if "PRIVATE KEY" not in text:
        return text
    parts, position = [], 0
    for begin in _PEM_BEGIN().finditer(text):
        if begin.start() < position:
            continue
        end = text.find("-----END", begin.end())
        close = text.find("-----", end + 8) if end != -1 else -1
        stop = close + 5 if close != -1 else len(text)
        parts += [text[position : begin.start()], _placeholder("private-key", text[begin.start() : stop])]
        position = stop
    return "".join(parts) + text[position:]


def _keyed(m: re.Match[str]) -> str:
    value, key = m.group("value"), m.group("key")
    if "<redacted:" in value or not is_secret_key(key) or _harmless(value):
        return m.group(0)
    if key.lower() in _AMBIGUOUS_KEYS and "q" not in m.groupdict() and not _credential_like(value):
        return m.group(0)  # `token = tokens[i]` in a message: a bare word after an ambiguous key
    return _group("secret", m.re.groupindex["value"])(m)


_AMBIGUOUS_KEYS = frozenset({"token", "auth", "pass", "pw"})


def _credential_like(value: str) -> bool:
    """Whether a word looks like a credential rather than prose: a digit or a symbol, or mixed case."""
    return any(c.isdigit() or c in "._~+/=-" for c in value) or (value.lower() != value and value.upper() != value)


def _harmless(value: str) -> bool:
    """Values a secret-looking key may have without being secret: numbers, booleans, None, empty."""
    stripped = value.strip().lower()
    return not stripped or stripped in {"none", "null", "true", "false", "***", "<redacted>"} or stripped.isdigit()


def _high_entropy(m: re.Match[str]) -> str:
    word = m.group(1)
    classes = sum(any(test(c) for c in word) for test in (str.islower, str.isupper, str.isdigit))
    if classes < 2 or _entropy(word) < 3.5 or word.startswith("redacted"):
        return m.group(0)
    return _group("secret", 1)(m)


def _entropy(word: str) -> float:
    counts = Counter(word)
    return -sum(n / len(word) * math.log2(n / len(word)) for n in counts.values())


def secret_environment() -> set[str]:
    """The environment's secrets: the values (6+ characters) of the variables whose names look secret,
    and the keys of a known shape (`_SHAPES`) that any variable holds.

    Every record line of a crash is redacted with them, so they are found again only when the
    environment changed (`EnvironmentMemo`: decoding and testing every variable took 30 us of a
    450 us restore).
    """
    return set(_secrets.get(_scan_environment))


def _scan_environment() -> frozenset[str]:
    found = set()
    for name, value in os.environ.items():
        if len(value) >= 6 and (is_secret_key(name) or name.upper().endswith(("_KEY", "_TOKEN"))):
            found.add(value)
        found.update(value[start:end] for start, end in _shape_spans(value))
    return frozenset(found)


_secrets: EnvironmentMemo[frozenset[str]] = EnvironmentMemo()
_known: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("daifu_known_secrets", default=frozenset())


@contextmanager
def known_secrets(values: Iterable[str]) -> Iterator[None]:
    """Inside the block, `redact` also hides `values` (a crash's own secrets, `secret_values`) in every form,
    before any text is cut to its bound: a secret cut in two by a bound is not left half visible."""
    token = _known.set(_known.get() | frozenset(values))
    try:
        yield
    finally:
        _known.reset(token)


def secret_values(namespaces: Iterable[Mapping[str, Any]], sources: Iterable[str]) -> set[str]:
    """Strings a crash itself marks as secret, to be redacted wherever else they appear (`scrub`).

    They are the string values of secret-looking names (`is_secret_key`) in the given namespaces and of
    secret-looking keys in the dicts those hold (two levels down), the keys of a known shape (`_SHAPES`)
    in any of those strings, and the string literals the given sources assign to secret-looking names
    or keys; at least 6 characters, not only digits.
    """
    found: set[str] = set()
    for namespace in namespaces:
        for name, value in list(namespace.items())[:500]:
            found |= _secret_strings(name, value, depth=2)
    for source in sources:
        found |= _literal_secrets(source)
    return {value for value in found if len(value) >= 6 and not value.isdigit() and "<redacted:" not in value}


def _secret_strings(name: Any, value: Any, depth: int) -> set[str]:
    """The secret strings under `name`, and the keys of a known shape in any string. Types are read with
    `type()`, dicts with `dict.items`: neither runs the value's own code (`isinstance` would read a
    `__class__` property, which may block)."""
    if issubclass(type(value), str):
        text = str.__str__(value)[:_MAX_TEXT]
        shaped = {text[start:end] for start, end in _shape_spans(text)}
        return shaped | ({text} if issubclass(type(name), str) and is_secret_key(str.__str__(name)) else set())
    if issubclass(type(value), dict) and depth > 0:
        found: set[str] = set()
        for key, item in itertools.islice(dict.items(value), 200):
            found |= _secret_strings(key, item, depth - 1)
        return found
    return set()


@functools.lru_cache(maxsize=64)
def _literal_secrets(source: str) -> frozenset[str]:
    """The string literals `source` assigns to secret-looking names or keys; kept per source, which a
    repeated crash parses again otherwise."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    found = set()
    for node in ast.walk(tree):
        pairs: list[tuple[Any, Any]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.keyword):
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
        for key, value in pairs:
            if isinstance(key, str) and is_secret_key(key) and isinstance(value, ast.Constant):
                if isinstance(value.value, str):
                    found.add(value.value)
    return frozenset(found)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every form of the given secret strings (`daifu.report.secret_forms`: plain, reversed,
    encoded, in pieces) replaced by `<redacted:secret>`."""
    return hide(text, frozenset(secrets), PLACEHOLDER.format("secret"))


def looks_like_environment(mapping: Mapping[Any, Any]) -> bool:
    """Whether a mapping looks like a copy of the process environment (`dict(os.environ)`).

    Its keys are environment-variable names (upper case, digits, underscores), at least three of
    them, and its values strings; or half its keys or more are names in this process's environment.
    """
    keys = [k for k in list(mapping)[:200] if isinstance(k, str)]
    if len(keys) < 3 or len(keys) < len(mapping) * 0.9:
        return False
    shaped = sum(bool(re.fullmatch(r"[A-Z_][A-Z0-9_]*", k)) for k in keys) >= 0.9 * len(keys)
    strings = all(isinstance(mapping[k], str) for k in keys)
    return strings and (shaped or sum(k in os.environ for k in keys) >= 0.5 * len(keys))


def restore_lines(new: str, original: str) -> str:
    """`new` (a repair built from a redacted report) with each redacted line put back as it was.

    A line of `new` that reads, apart from its indentation, as a line that redaction changed in
    `original` gets the original line's text back. What remains redacted is new code that copies a
    placeholder: `has_placeholder` finds it.
    """
    shown = redact(original, code=True).splitlines()
    real = original.splitlines()
    if len(shown) != len(real):
        return new
    changed = [(s.strip(), r.strip()) for s, r in zip(shown, real) if s != r and "<redacted:" in s]
    counts = Counter(s for s, _ in changed)
    back = {s: r for s, r in changed if counts[s] == 1}  # a line shown alike twice cannot be told apart
    lines = []
    for line in new.splitlines(keepends=True):
        body = line.strip()
        if body in back:
            indent = line[: len(line) - len(line.lstrip())]
            line = indent + back[body] + line[len(line.rstrip("\r\n")) :]
        lines.append(line)
    return "".join(lines)


def has_placeholder(text: str) -> bool:
    """Whether `text` holds a redaction placeholder, which must never be applied as code."""
    return "<redacted:" in text
