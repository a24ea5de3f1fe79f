"""The faulty statement's operands: their facts, and the one the failing call did not expect.

A message says what a failing call got ("Target 5 is out of bounds", "got Double and Float", "slice
indices must be integers"), rarely which of the statement's values it was, and never where that value
was made. The repair bot needs both: the fix is often where the value was made, a few statements up.
So the report evaluates the faulty statement's sub-expressions in its frame (`daifu.report.evaluate`:
only what is safe), records their facts (type, dtype, shape, device, range, finiteness, a number's
value), and names the operand whose facts disagree with what the failing call expects:

- a classification loss (`cross_entropy`, `nll_loss`, their modules): a target outside the classes
  its input has (`input.shape[1]`);
- a layer called on a tensor: a floating dtype other than its parameters', ids past an embedding's
  rows, ids of a floating dtype holding whole numbers among its rows, a last dimension other than its
  `in_features`;
- a message naming dtypes: the tensor whose floating dtype is the minority among the statement's;
- a message asking for an int: the operand that holds a float;
- a message about sizes: the tensor whose rows equal a configured number (an int of the frame, or of
  an options object: `batch_size`, `args.batch_size`) where another operand has as many rows as the data.

The statements read are the vaccinated function's faulty one and, when the exception came from deeper,
the deepest user callee's (a model's `forward`). All of it is one bounded call: the report's deadline holds.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from daifu.core.bounded import TimedOut, bounded
from daifu.core.crash import Crash
from daifu.report.evaluate import MAX_ELEMENTS, Evaluator, is_a
from daifu.report.redact import redact
from repairbot.protocol import MAX_OPERANDS, Operand

SECONDS = 2.0
"""What evaluating and describing the operands of a crash may take, all frames together."""
_MAX_TEXT = 120
_FACT_ELEMENTS = 1_000_000
"""Elements up to which a tensor's range and non-finite counts are computed (as `daifu.report.summary` does)."""
_INT_NEEDED = (
    r"must be integers|cannot be interpreted as an integer|must be int\b|only integers|indices must be integers"
    r"|tuple of ints|got float|integer"
)
_DTYPE_WORDS = r"\b(?:Float|Double|Half|BFloat16|float16|float32|float64|bfloat16)\b"
_SIZE_TALK = r"size|match|shape|dimension|mat1|mat2"
_INDEX_TALK = r"index|bounds|range|target|assert"
_INTEGER_IDS = r"\bindices\b.*\b(?:Long|Int)\b|\b(?:Long|Int)\b.*\bindices\b"
"""An index argument refused for its dtype: "Expected tensor for argument #1 'indices' to have one of the
following scalar types: Long, Int"."""
_DTYPE_TALK = r"dtype|scalar type|" + _DTYPE_WORDS
_SIZE_KEYWORDS = frozenset("size dim start end length step shape k n num index kernel_size stride padding "
                           "num_samples in_features out_features output_size".split())
_LOSSES = frozenset({"cross_entropy", "nll_loss"})
_LOSS_MODULES = frozenset({"CrossEntropyLoss", "NLLLoss"})


@dataclass
class _Statement:
    """One faulty statement to read: where it runs, its syntax, its frame's values."""

    function: str
    source: str
    roots: list[ast.AST]
    scope: dict[str, Any]
    globals: dict[str, Any]


@dataclass
class _Found:
    """The evaluated operands of one statement, keyed by their text, and what is wrong with some."""

    statement: _Statement
    values: dict[str, tuple[ast.expr, Any]] = field(default_factory=dict)
    expect: dict[str, dict[str, Any]] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)


def operands(crash: Crash, library: Callable[[str], bool]) -> list[Operand]:
    """The operands of the crash's faulty statements, wrong ones first; `[]` when nothing could be read in
    time. `library` tells a file of Python or an installed package from the user's. Never raises: a report
    without operands is still a report."""
    try:
        return bounded(_operands, crash, library, seconds=SECONDS)
    except (TimedOut, Exception):  # DaiFu's own failure here must not cost the report
        return []


def _operands(crash: Crash, library: Callable[[str], bool]) -> list[Operand]:
    message = _message(crash.exception)
    found: list[Operand] = []
    for statement in _statements(crash, library):
        result = _Found(statement)
        evaluator = Evaluator(statement.scope, statement.globals)
        for root in statement.roots:
            for node, value in evaluator.evaluate_all(root):
                text = _text(statement.source, node)
                if text and _described(value) and _operand(node) and text not in result.values:
                    result.values[text] = (node, value)
        _judge(result, evaluator, message)
        found += _described_operands(result)
    found.sort(key=lambda o: not o.wrong)
    return found[:MAX_OPERANDS]


def _message(error: BaseException) -> str:
    try:
        return str(error)[:4000]
    except Exception:  # a user exception's __str__
        return ""


# -- the statements ---------------------------------------------------------------------------------


def _statements(crash: Crash, library: Callable[[str], bool]) -> Iterator[_Statement]:
    """The vaccinated function's faulty statement, then the deepest user callee's, when there is one."""
    entries = list(traceback.walk_tb(crash.exception.__traceback__))
    mine = [i for i, (f, _) in enumerate(entries) if f.f_code.co_filename == crash.filename
            and f.f_code.co_name == crash.function_name]
    start = mine[-1] if mine else None
    globals_ = dict(entries[start][0].f_globals) if start is not None else dict(crash.globals)
    outer = _parsed(crash.source, crash.lineno - crash.first_lineno + 1, crash.kind)
    if outer is not None:
        yield _Statement(crash.qualname, *outer, scope=dict(crash.locals), globals=globals_)
    if start is None:
        return
    for frame, lineno in reversed(entries[start + 1 :]):
        if library(frame.f_code.co_filename) or frame.f_code.co_name.startswith("<"):
            continue
        callee = _callee(frame, lineno)
        if callee is not None:
            yield callee
        return


def _callee(frame: FrameType, lineno: int) -> _Statement | None:
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return None
    parsed = _parsed("".join(lines), lineno - first + 1, "statement")
    if parsed is None:
        return None
    name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return _Statement(name, *parsed, scope=dict(frame.f_locals), globals=dict(frame.f_globals))


def _parsed(source: str, line: int, kind: str) -> tuple[str, list[ast.AST]] | None:
    """The dedented source and the expressions its statement at `line` evaluates (a compound's header)."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    found = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno == line
             and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    simple = [n for n in found if not _compound(n)]
    if kind == "statement" and simple:
        return text, [simple[-1]]
    if not found:
        return None
    node = found[-1]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return text, [node.iter]
    if isinstance(node, (ast.If, ast.While)):
        return text, [node.test]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return text, [item.context_expr for item in node.items]
    return (text, [node]) if not _compound(node) else None


def _compound(node: ast.AST) -> bool:
    return any(isinstance(getattr(node, name, None), list) and getattr(node, name)
               for name in ("body", "handlers", "cases"))


def _text(source: str, node: ast.AST) -> str:
    try:
        return (ast.get_source_segment(source, node) or "").strip()
    except (IndexError, ValueError):
        return ""


# -- facts --------------------------------------------------------------------------------------------


def _operand(node: ast.expr) -> bool:
    """Whether `node` is worth describing: not a literal, not the index of a subscript."""
    return not isinstance(node, (ast.Constant, ast.Slice)) and not (
        isinstance(node, ast.Tuple) and any(isinstance(e, ast.Slice) for e in node.elts))


def _described(value: Any) -> bool:
    """Whether a value's facts say something: numbers, text, sequences, arrays; not modules or functions."""
    return _kind(value) != ""


def _kind(value: Any) -> str:
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and is_a(value, torch.Tensor):
        return "Tensor"
    if numpy is not None and is_a(value, numpy.ndarray):
        return "ndarray"
    if numpy is not None and is_a(value, numpy.generic):
        return type(value).__name__
    if value is None or type(value) in (bool, int, float, str, list, tuple):
        return type(value).__name__
    return ""


def facts(value: Any) -> dict[str, Any]:
    """What a report says of one evaluated value (see the module docstring)."""
    kind = _kind(value)
    found: dict[str, Any] = {"type": kind}
    if kind == "Tensor":
        found.update(shape=list(value.shape), dtype=str(value.dtype).removeprefix("torch."), device=str(value.device))
        if value.requires_grad:
            found["requires_grad"] = True
        if value.device.type != "meta" and 0 < value.numel() <= _FACT_ELEMENTS and not value.is_complex():
            found.update(_tensor_range(value))
    elif kind == "ndarray":
        found.update(shape=list(value.shape), dtype=str(value.dtype))
        if 0 < value.size <= _FACT_ELEMENTS and value.dtype.kind in "iufb":
            found.update(_array_range(value))
    elif kind in ("int", "bool") or (kind == "float" and value == value and abs(value) != float("inf")):
        found["value"] = value
    elif kind == "float":
        found["nonfinite"] = True
    elif kind in ("list", "tuple", "str"):
        found["len"] = len(value)
    elif kind:  # a NumPy scalar
        found["value"] = value.item() if hasattr(value, "item") else None
    return found


def _tensor_range(value: Any) -> dict[str, Any]:
    import torch

    with torch.no_grad():
        data = value.detach()
        if data.dtype == torch.bool:
            return {"min": int(data.min()), "max": int(data.max())}
        if not data.is_floating_point():
            return {"min": int(data.min()), "max": int(data.max())}
        result: dict[str, Any] = {"nan": int(torch.isnan(data).sum()), "inf": int(torch.isinf(data).sum())}
        finite = data[torch.isfinite(data)]
        if finite.numel():
            result.update(min=float(finite.min()), max=float(finite.max()))
        return result


def _array_range(value: Any) -> dict[str, Any]:
    import numpy

    if value.dtype.kind == "f":
        finite = value[numpy.isfinite(value)]
        result: dict[str, Any] = {"nan": int(numpy.isnan(value).sum()), "inf": int(numpy.isinf(value).sum())}
        if finite.size:
            result.update(min=float(finite.min()), max=float(finite.max()))
        return result
    return {"min": int(value.min()), "max": int(value.max())}


def _described_operands(result: _Found) -> list[Operand]:
    found = []
    for text, (_, value) in result.values.items():
        found.append(Operand(
            expression=redact(text[: 4 * _MAX_TEXT], code=True)[:_MAX_TEXT],
            function=result.statement.function[:200],
            facts=facts(value),
            expect=result.expect.get(text, {}),
            wrong=redact(result.wrong.get(text, ""))[:1000],
        ))
    return found


# -- what the failing call expects --------------------------------------------------------------------


def _judge(result: _Found, evaluator: Evaluator, message: str) -> None:
    """Name the operands whose facts disagree with what the failing call expects (module docstring)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        for root in result.statement.roots:
            for node in ast.walk(root):
                if isinstance(node, ast.Call):
                    if re.search(_INDEX_TALK, message, re.IGNORECASE):
                        _loss_targets(result, evaluator, node, torch)
                    _layer_input(result, evaluator, node, torch, message)
        if re.search(_DTYPE_WORDS, message):
            _minority_dtype(result, torch)
        if re.search(_SIZE_TALK, message, re.IGNORECASE):
            _configured_rows(result, message, torch)
    if re.search(_INT_NEEDED, message, re.IGNORECASE):
        _floats(result)


def _said(result: _Found, node: ast.AST, expect: dict[str, Any], why: str) -> None:
    text = _text(result.statement.source, node)
    if text in result.values and text not in result.wrong:
        result.expect[text] = expect
        result.wrong[text] = f"operand `{text}`: {why}"


def _evaluated(evaluator: Evaluator, node: ast.expr | None) -> Any:
    return evaluator.values.get(id(node)) if node is not None else None


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _loss_targets(result: _Found, evaluator: Evaluator, call: ast.Call, torch: Any) -> None:
    """A classification loss's target outside the classes of its input."""
    loss = _evaluated(evaluator, call.func)
    functional = torch.nn.functional
    is_loss = any(loss is functional.__dict__.get(name) for name in _LOSSES) or (
        is_a(loss, torch.nn.Module) and type(loss).__name__ in _LOSS_MODULES
        and type(loss).__module__.startswith("torch.nn"))
    if not is_loss:
        return
    scores, target_node = _evaluated(evaluator, _argument(call, 0, "input")), _argument(call, 1, "target")
    target = _evaluated(evaluator, target_node)
    if not (is_a(scores, torch.Tensor) and is_a(target, torch.Tensor)) or scores.dim() == 0:
        return
    if target.is_floating_point() or target.numel() == 0 or target.numel() > MAX_ELEMENTS:
        return  # class probabilities, or nothing to judge
    classes = int(scores.shape[1] if scores.dim() >= 2 else scores.shape[0])
    ignored = getattr(loss, "ignore_index", None) if is_a(loss, torch.nn.Module) else None
    keyword = _argument(call, 99, "ignore_index")
    ignored = _evaluated(evaluator, keyword) if keyword is not None else ignored
    ignored = ignored if type(ignored) is int else -100
    with torch.no_grad():
        kept = target[target != ignored]
        if kept.numel() == 0:
            return
        low, high = int(kept.min()), int(kept.max())
    if (low < 0 or high >= classes) and target_node is not None:
        _said(result, target_node, {"classes": classes},
              f"{_dtype(target)}, range {low}..{high}; the loss has {classes} classes (0..{classes - 1})")


def _layer_input(result: _Found, evaluator: Evaluator, call: ast.Call, torch: Any, message: str) -> None:
    """A layer's input with ids past its rows, of another floating dtype, or of other features: each only
    where the message speaks of indices, dtypes or sizes."""
    layer = _evaluated(evaluator, call.func)
    if not is_a(layer, torch.nn.Module) or not call.args:
        return
    node = call.args[0]
    given = _evaluated(evaluator, node)
    if not is_a(given, torch.Tensor):
        return
    name = _text(result.statement.source, call.func)
    own = object.__getattribute__(layer, "__dict__")
    rows = own.get("num_embeddings")
    if type(rows) is int and not given.is_floating_point() and 0 < given.numel() <= MAX_ELEMENTS \
            and re.search(_INDEX_TALK, message, re.IGNORECASE):
        with torch.no_grad():
            low, high = int(given.min()), int(given.max())
        if low < 0 or high >= rows:
            _said(result, node, {"embeddings": rows},
                  f"{_dtype(given)}, range {low}..{high}; `{name}` has {rows} rows (0..{rows - 1})")
            return
    if type(rows) is int and given.is_floating_point() and re.search(_INTEGER_IDS, message):
        whole = _whole_ids(given, rows, torch)
        if whole is not None:
            _said(result, node, {"dtype": "int64"}, f"{_dtype(given)} holding whole numbers {whole[0]}..{whole[1]}; "
                                                    f"`{name}` looks up its {rows} rows by integer ids")
            return
    wanted = _parameter_dtype(layer, torch)
    if wanted is not None and given.is_floating_point() and given.dtype != wanted \
            and re.search(_DTYPE_TALK, message, re.IGNORECASE):
        _said(result, node, {"dtype": _dtype_name(wanted)},
              f"{_dtype(given)}; `{name}` computes in {_dtype_name(wanted)}")
        return
    features = own.get("in_features")
    if type(features) is int and given.dim() >= 1 and given.shape[-1] != features \
            and re.search(_SIZE_TALK, message, re.IGNORECASE):
        _said(result, node, {"features": features},
              f"shape {tuple(given.shape)}; `{name}` takes {features} features in its last dimension")


def _whole_ids(given: Any, rows: int, torch: Any) -> tuple[int, int] | None:
    """The range of floating ids that are all whole numbers among an embedding's rows (so that an integer
    dtype is all they lack: a cast changes no id), else `None`."""
    if not 0 < given.numel() <= MAX_ELEMENTS:
        return None
    with torch.no_grad():
        if not bool(torch.isfinite(given).all()) or not bool((given == given.floor()).all()):
            return None
        low, high = int(given.min()), int(given.max())
    return (low, high) if 0 <= low and high < rows else None


def _parameter_dtype(layer: Any, torch: Any) -> Any:
    """The dtype of the first parameter found in the layer's own storage, breadth first, bounded."""
    pending, seen = [layer], 0
    while pending and seen < 64:
        module = pending.pop(0)
        seen += 1
        own = object.__getattribute__(module, "__dict__")
        for parameter in (own.get("_parameters") or {}).values():
            if is_a(parameter, torch.Tensor) and parameter.is_floating_point():
                return parameter.dtype
        pending += [m for m in (own.get("_modules") or {}).values() if is_a(m, torch.nn.Module)]
    return None


def _minority_dtype(result: _Found, torch: Any) -> None:
    """Among the statement's floating tensors (names), those of a dtype fewer of them have."""
    tensors = {text: value for text, (node, value) in result.values.items()
               if isinstance(node, ast.Name) and is_a(value, torch.Tensor) and value.is_floating_point()}
    counts = Counter(value.dtype for value in tensors.values())
    if len(counts) != 2:
        return
    (majority, most), (minority, fewest) = counts.most_common()
    if most == fewest:
        return
    for text, value in tensors.items():
        if value.dtype == minority:
            _said(result, result.values[text][0], {"dtype": _dtype_name(majority)},
                  f"{_dtype(value)}; the statement's other tensors are {_dtype_name(majority)}")


def _floats(result: _Found) -> None:
    """The names and attributes holding a float where the message asks for an int, in a place an int goes:
    an index, a slice's bound, a positional argument, a size argument (not a rate or a scale)."""
    places = {id(node) for root in result.statement.roots for node in _int_places(root)}
    for text, (node, value) in result.values.items():
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and type(value) is float and id(node) in places:
            _said(result, node, {"int": True}, f"float {value!r} where an int is needed")


def _int_places(root: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(root):
        if isinstance(node, ast.Subscript):
            yield from ast.walk(node.slice)
        elif isinstance(node, ast.Call):
            for argument in [*node.args, *(k.value for k in node.keywords if k.arg in _SIZE_KEYWORDS)]:
                yield from ast.walk(argument)


def _configured_rows(result: _Found, message: str, torch: Any) -> None:
    """The tensor whose rows are a configured number, where another has a different count named in the message."""
    numbers = {int(n) for n in re.findall(r"\b\d+\b", message)}
    tensors = {text: value for text, (node, value) in result.values.items()
               if isinstance(node, ast.Name) and is_a(value, torch.Tensor) and value.dim() >= 1}
    rows = {text: int(value.shape[0]) for text, value in tensors.items() if int(value.shape[0]) in numbers}
    if len(set(rows.values())) != 2:
        return
    configured = _configured(result.statement)
    for text, count in rows.items():
        names = [name for name, number in configured.items() if number == count]
        others = {c for c in rows.values() if c != count}
        if names and not any(number in others for number in configured.values()):
            other = next(iter(others))
            _said(result, result.values[text][0], {"rows": other, "sized_by": names[0]},
                  f"{count} rows, as many as `{names[0]}`; the statement's other tensors have {other}")


def _configured(statement: _Statement) -> dict[str, int]:
    """The frame's ints, and the ints of its options objects (`args.batch_size`), by the name they are read by."""
    found: dict[str, int] = {}
    for name, value in statement.scope.items():
        if type(value) is int and not is_a(value, bool):
            found[name] = value
        elif type(value).__name__ in ("Namespace", "SimpleNamespace") and type(value).__module__ in ("argparse", "types"):
            for key, item in vars(value).items():
                if type(item) is int:
                    found[f"{name}.{key}"] = item
    return found


def _dtype(value: Any) -> str:
    return _dtype_name(value.dtype)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
