"""Live object facts for a failed lookup: which object the faulty statement looked in, and what it holds.

A `KeyError` names the key, an `AttributeError` the attribute, an `IndexError` nothing at all; the
repair (the key the dict does hold, the index clamped to the list) needs the object. In each user frame
of the crash, from the deepest up, this module reads the statement that raised, finds the
sub-expressions that could have failed that way, evaluates those it can evaluate without running the
program's code (`_value`: names, attributes found without calling a descriptor, a builtin mapping or
sequence indexed by a constant or a name, `len` of one, a little integer arithmetic) and keeps those
whose failure it confirms on the live object: the key is not in the mapping, the index is past the
sequence's end, the divisor is 0, the attribute's object is the one the `AttributeError` names. Each
becomes a `Lookup` (`repairbot.protocol`): what was looked in and what it holds instead (keys,
attribute names, names in scope: the closest to the wanted one first, with the kind of value under
each), bounded and redacted like the rest of the report. Nothing here raises: a statement it cannot
read gives no lookup.
"""

from __future__ import annotations

import ast
import builtins
import collections
import difflib
import inspect
import itertools
import re
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import BuiltinFunctionType, FrameType, FunctionType, MethodType
from typing import Any

from daifu.core.bounded import TimedOut, bounded
from daifu.core.crash import Crash
from daifu.report.redact import looks_like_environment, redact
from repairbot.protocol import Lookup

MAX_LOOKUPS = 4
MAX_NAMES = 60
"""Keys, attribute or scope names one lookup carries, the closest to the wanted one first."""
_SCANNED = 2000
"""Keys or names looked at to find the closest: a mapping of a million entries costs no more."""
_MAX_TEXT = 200
_MAPPINGS = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
_SEQUENCES = (list, tuple, str, collections.deque, range)
_KEYS = (str, int, float, bool, type(None))
_DIVISIONS = (ast.Div, ast.FloorDiv, ast.Mod)
_ERRORS = (KeyError, AttributeError, NameError, IndexError, ZeroDivisionError)
_SUGGESTION = re.compile(r"Did you mean:? '([^']+)'\?")
_MODULE_HOLDERS = ("_parameters", "_buffers", "_modules")
"""Where a `torch.nn.Module` keeps its parameters, buffers and layers: out of its `__dict__`."""


class _Unknown(Exception):
    """A sub-expression this module does not evaluate: it might run the program's code."""


@dataclass
class _Place:
    """One frame's faulty statement: its syntax (dedented), its text, the frame's scopes."""

    roots: list[ast.AST]
    text: str
    locals: Mapping[str, Any]
    globals: Mapping[str, Any]
    function: str
    lineno: int

    def segment(self, node: ast.AST) -> str:
        return truncate(redact(ast.get_source_segment(self.text, node) or "", code=True))

    def walk(self) -> Iterator[ast.AST]:
        for root in self.roots:
            yield from ast.walk(root)


def lookups(crash: Crash, callees: list[tuple[FrameType, int]]) -> list[Lookup]:
    """The failed lookups of `crash`, found in its deepest user frame that shows one (`callees`: the user
    frames below the vaccinated function, outermost first, with their lines)."""
    error = crash.exception
    if not isinstance(error, _ERRORS):
        return []
    places = [_callee_place(frame, lineno) for frame, lineno in reversed(callees)]
    places.append(_place(crash.statement, crash.kind, crash.locals, crash.globals, crash.qualname, crash.lineno))
    for place in places:
        if place is None:
            continue
        try:
            found = list(itertools.islice(_found(place, error), MAX_LOOKUPS))
        except (TimedOut, RecursionError, ValueError, TypeError):
            continue
        if found:
            return found
    return []


def truncate(text: str, limit: int = _MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- where: the statement of each frame ---------------------------------------------------------------


def _place(statement: str, kind: str, local: Mapping[str, Any], global_: Mapping[str, Any], function: str,
           lineno: int) -> _Place | None:
    """The vaccinated function's statement; a compound statement's header is read with a body added."""
    text = textwrap.dedent(statement)
    tree = _parse(text) or _parse(text.rstrip() + "\n    pass\n")
    if tree is None or len(tree.body) != 1:
        return None
    node = tree.body[0]
    return _Place(_evaluated(node, kind != "statement"), text, local, global_, function, lineno)


def _callee_place(frame: FrameType, lineno: int) -> _Place | None:
    """A user callee's statement at `lineno`, read from its function's source."""
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return None
    text = textwrap.dedent("".join(lines))
    tree = _parse(text)
    if tree is None:
        return None
    line = lineno - first + 1
    spanning = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)
                and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if not spanning:
        return None
    node = min(spanning, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    compound = any(isinstance(getattr(node, f, None), list) and getattr(node, f) for f in ("body", "orelse"))
    function = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return _Place(_evaluated(node, compound), text, frame.f_locals, frame.f_globals, function, lineno)


def _evaluated(node: ast.stmt, header: bool) -> list[ast.AST]:
    """What a statement evaluates where it raised: the whole of a simple one, a compound one's header."""
    if not header:
        return [node]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.iter]
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in node.items]
    return []


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# -- what failed: the sub-expressions each error can come from -----------------------------------------


def _found(place: _Place, error: BaseException) -> Iterator[Lookup]:
    if isinstance(error, KeyError) and len(error.args) == 1:
        yield from _missing_keys(place, error.args[0])
    elif isinstance(error, AttributeError):
        yield from _missing_attributes(place, error)
    elif isinstance(error, NameError):
        yield from _missing_names(place, error)
    elif isinstance(error, IndexError):
        yield from _past_the_end(place)
    elif isinstance(error, ZeroDivisionError):
        yield from _zero_divisors(place)


def _missing_keys(place: _Place, key: Any) -> Iterator[Lookup]:
    """Subscripts by the key, `str.format(**m)`, `format_map(m)` and `'%(key)s' % m` of a mapping without it."""
    if type(key) not in _KEYS and type(key) is not tuple:
        return
    for node in place.walk():
        looked: list[ast.expr] = []
        if isinstance(node, ast.Subscript) and _is_key(place, node.slice, key):
            looked = [node.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            looked = [k.value for k in node.keywords if k.arg is None]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format_map":
            looked = node.args[:1]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            looked = [node.right]
        for container in looked:
            mapping, known = _known(place, container)
            if known and type(mapping) in _MAPPINGS and key not in mapping:
                yield _mapping_lookup(place, container, mapping, key)


def _is_key(place: _Place, node: ast.AST, key: Any) -> bool:
    value, known = _known(place, node)
    return known and type(value) is type(key) and value == key


def _mapping_lookup(place: _Place, node: ast.expr, mapping: dict[Any, Any], key: Any) -> Lookup:
    keys = [k for k in itertools.islice(mapping, _SCANNED) if type(k) in _KEYS]
    secret = looks_like_environment(mapping)
    shown = [] if secret else _closest(keys, key, lambda k: str(k))
    return Lookup(kind="key", function=place.function, lineno=place.lineno, expression=place.segment(node),
                  wanted=truncate(redact(repr(key))), type=type(mapping).__name__, length=len(mapping),
                  names=[truncate(redact(repr(k))) for k in shown],
                  kinds={truncate(redact(repr(k))): kind_of(dict.__getitem__(mapping, k)) for k in shown})


def _missing_attributes(place: _Place, error: AttributeError) -> Iterator[Lookup]:
    """The attribute node `error` names, whose object is `error.obj` (or cannot be evaluated to tell)."""
    name, owner = getattr(error, "name", None), getattr(error, "obj", None)
    if not isinstance(name, str) or owner is None:
        return
    nodes = [n for n in place.walk() if isinstance(n, ast.Attribute) and n.attr == name]
    for node in nodes:
        value, known = _known(place, node.value)
        if (known and value is owner) or (not known and len(nodes) == 1):
            names = _closest(_attribute_names(owner), name, str)
            yield Lookup(kind="attribute", function=place.function, lineno=place.lineno,
                         expression=place.segment(node.value), wanted=name, type=type_name(owner),
                         names=[truncate(redact(n)) for n in names],
                         kinds={truncate(redact(n)): _attribute_kind(owner, n) for n in names},
                         suggestion=_python_suggestion(error))
            return


def _missing_names(place: _Place, error: NameError) -> Iterator[Lookup]:
    name = getattr(error, "name", None)
    if not isinstance(name, str) or not any(isinstance(n, ast.Name) and n.id == name for n in place.walk()):
        return
    scopes = [place.locals, place.globals, vars(builtins)]
    every = list(dict.fromkeys(n for scope in scopes for n in itertools.islice(scope, _SCANNED)
                               if isinstance(n, str) and not n.startswith("__")))
    names = _closest(every, name, str)
    yield Lookup(kind="name", function=place.function, lineno=place.lineno, wanted=name,
                 names=[truncate(redact(n)) for n in names],
                 kinds={truncate(redact(n)): kind_of(_scoped(scopes, n)) for n in names},
                 suggestion=_python_suggestion(error))


def _past_the_end(place: _Place) -> Iterator[Lookup]:
    for node in place.walk():
        if not isinstance(node, ast.Subscript) or isinstance(node.slice, ast.Slice):
            continue
        sequence, known = _known(place, node.value)
        index, index_known = _known(place, node.slice)
        if not (known and index_known and type(sequence) in _SEQUENCES and type(index) is int):
            continue
        if -len(sequence) <= index < len(sequence):
            continue
        items = {kind_of(item) for item in itertools.islice(sequence, _SCANNED)}
        yield Lookup(kind="index", function=place.function, lineno=place.lineno, expression=place.segment(node.value),
                     wanted=str(index), type=type(sequence).__name__, length=len(sequence),
                     kinds={"item": items.pop() if len(items) == 1 else "mixed" if items else ""})


def _zero_divisors(place: _Place) -> Iterator[Lookup]:
    for node in place.walk():
        if isinstance(node, ast.BinOp) and isinstance(node.op, _DIVISIONS):
            divisor = node.right
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _DIVISIONS):
            divisor = node.value
        else:
            continue
        value, known = _known(place, divisor)
        if known and type(value) in (int, float, bool) and value == 0:
            yield Lookup(kind="divisor", function=place.function, lineno=place.lineno,
                         expression=place.segment(divisor), wanted=repr(value), type=type(value).__name__)


# -- evaluating a sub-expression without running the program's code --------------------------------------


def _known(place: _Place, node: ast.AST) -> tuple[Any, bool]:
    """`(value, True)` when `node` can be evaluated safely, else `(None, False)`."""
    try:
        return _value(place, node, 0), True
    except (_Unknown, RecursionError):
        return None, False


def _value(place: _Place, node: ast.AST, depth: int) -> Any:
    if depth > 20:
        raise _Unknown
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return _scoped([place.locals, place.globals, vars(builtins)], node.id)
    if isinstance(node, ast.Attribute):
        return _attribute(_value(place, node.value, depth + 1), node.attr)
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        return _item(_value(place, node.value, depth + 1), _value(place, node.slice, depth + 1))
    if isinstance(node, ast.Tuple):
        return tuple(_value(place, item, depth + 1) for item in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _value(place, node.operand, depth + 1)
        if type(operand) in (int, float):
            return -operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left, right = _value(place, node.left, depth + 1), _value(place, node.right, depth + 1)
        if type(left) in (int, float) and type(right) in (int, float):
            return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1 and not node.keywords
            and _value(place, node.func, depth + 1) is len):
        container = _value(place, node.args[0], depth + 1)
        if type(container) in _MAPPINGS or type(container) in _SEQUENCES:
            return len(container)
    raise _Unknown


def _scoped(scopes: list[Mapping[str, Any]], name: str) -> Any:
    for scope in scopes:
        if name in scope:
            return scope[name]
    raise _Unknown


def _item(container: Any, key: Any) -> Any:
    """`container[key]` for a builtin mapping (never calling a `__missing__`) or sequence."""
    if type(key) not in _KEYS and not (type(key) is tuple and all(type(k) in _KEYS for k in key)):
        raise _Unknown
    if type(container) in _MAPPINGS and key in container:
        return dict.__getitem__(container, key)
    if type(container) in _SEQUENCES and type(key) is int and -len(container) <= key < len(container):
        return container[key]
    raise _Unknown


def _attribute(owner: Any, name: str) -> Any:
    """`owner.name` when it is a plain value found without calling code: in the instance's or a class's
    namespace (not a property, not a method to bind), or among a `torch.nn.Module`'s layers and parameters."""
    found = inspect.getattr_static(owner, name, _Unknown)
    if found is _Unknown:
        for holder in _MODULE_HOLDERS:
            held = inspect.getattr_static(owner, holder, None)
            if type(held) is dict and name in held:
                return held[name]
        raise _Unknown
    if hasattr(type(found), "__get__") and not _in_instance(owner, name):
        raise _Unknown
    return found


def _in_instance(owner: Any, name: str) -> bool:
    namespace = inspect.getattr_static(owner, "__dict__", None)
    if type(namespace) is not dict:  # the instance's own `__dict__` is found through its type's descriptor
        try:
            namespace = object.__getattribute__(owner, "__dict__")
        except (AttributeError, TypeError):
            return False
    return type(namespace) is dict and name in namespace


# -- what the object holds -------------------------------------------------------------------------------


def _closest(names: list[Any], wanted: Any, text: Callable[[Any], str]) -> list[Any]:
    """`names`, the closest to `wanted` first, at most `MAX_NAMES`."""
    target = text(wanted)

    def nearness(name: Any) -> float:
        return difflib.SequenceMatcher(None, text(name), target).ratio()

    return sorted(names, key=nearness, reverse=True)[:MAX_NAMES]


def _attribute_names(owner: Any) -> list[str]:
    """The names `dir` lists (as Python's own suggestion reads them), bounded in time, dunders left out."""
    try:
        names = bounded(dir, owner)
    except (TimedOut, Exception):
        return []
    return [n for n in itertools.islice(names, _SCANNED) if isinstance(n, str) and not n.startswith("__")]


def _attribute_kind(owner: Any, name: str) -> str:
    try:
        found = inspect.getattr_static(owner, name, _Unknown)
    except Exception:
        return "unknown"
    if found is _Unknown:
        try:
            return kind_of(_attribute(owner, name))
        except _Unknown:
            return "unknown"
    if isinstance(found, property):
        return "property"
    if isinstance(found, (FunctionType, MethodType, BuiltinFunctionType, staticmethod, classmethod)) or (
            callable(found) and hasattr(type(found), "__get__") and not _in_instance(owner, name)):
        return "method"
    return kind_of(found)


def kind_of(value: Any, depth: int = 0) -> str:
    """The kind of a value, by its type alone (no code of the value runs): `float`, `list[float]`,
    `Tensor`, `Parameter`, `Module`, `Optimizer`, `function`, a class's name; a list, tuple or deque by its
    first item's kind too."""
    cls = type(value)
    torch = sys.modules.get("torch")
    if torch is not None:
        for name, base in (("Parameter", torch.nn.Parameter), ("Tensor", torch.Tensor), ("Module", torch.nn.Module),
                           ("Optimizer", torch.optim.Optimizer)):
            if issubclass(cls, base):
                return name
    if cls in (list, tuple, collections.deque):
        return f"{cls.__name__}[{kind_of(value[0], depth + 1)}]" if len(value) and depth < 2 else cls.__name__
    if cls in (FunctionType, MethodType, BuiltinFunctionType):
        return "function"
    return type_name(value)


def type_name(value: Any) -> str:
    cls = type(value)
    return truncate(cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}", 100)


def _python_suggestion(error: BaseException) -> str | None:
    """Python's own "Did you mean" for `error`, where the running Python's `traceback` module gives it (3.12
    and later; 3.10 and 3.11 compute it only while printing)."""
    def text() -> str:
        return "".join(traceback.TracebackException.from_exception(error, limit=0).format_exception_only())

    try:
        found = _SUGGESTION.search(bounded(text))
    except (TimedOut, Exception):
        return None
    return truncate(redact(found.group(1))) if found else None
