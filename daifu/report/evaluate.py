"""Evaluating the parts of a faulty statement in its frame, where that is safe.

A message says what a failing call got; a person at a debugger evaluates the statement's parts to see
which value it was. DaiFu does the same for a crash report, but it may never change the run: what it
evaluates must read the program's state and compute from it, nothing else. So this evaluator is an
allowlist, not Python:

- names (the frame's locals, its globals, the builtins), constants, tuple and list displays, slices;
- a list comprehension `[expression for name in sequence]` (or `for a, b in sequence`) over a list or
  tuple of at most `MAX_ITEMS` items, or the items of a one-dimensional tensor or array of as many, its
  expression evaluated by these same rules for each item (the rows a batch is built from);
- an item read by its index from a list, tuple or dict of any length (`MAX_STORE` keys for a dict),
  named or an attribute: the store a batch's samples are looked up in (`[clips[k] for k in picks]`)
  is read one item at a time, never copied, described or computed with whole;
- attribute reads from an object's own storage: a module's namespace, a tensor's or an array's
  metadata (`shape`, `dtype`...), a `torch.nn.Module`'s submodules, parameters, buffers and plain
  attributes, a plain object's instance dictionary — never a property, a descriptor or `__getattr__`;
- subscripts of tensors, arrays, lists, tuples and dicts, by ints, slices, tensors;
- arithmetic on numbers, tensors and arrays;
- calls of the pure functions and methods named in `FUNCTIONS`, `METHODS` and `BUILTINS`: casts,
  shapes, reductions, conversions; no randomness (it would move the generator's state), nothing in
  place, no user code, no module call (a layer may keep running statistics).

Every value met is of an exact type named here (a tensor subclass, a user class with `__index__`,
`__add__` or `__len__` of its own stops the evaluation), and a tensor is computed with only on the
CPU and up to `MAX_ELEMENTS` elements. What cannot be evaluated this way is left out, and so is what
contains it: when in doubt, nothing is evaluated.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from daifu.report.redact import is_secret_key

MAX_ELEMENTS = 1 << 22
"""Elements of a tensor or array DaiFu computes with; a bigger one is only described."""
MAX_ITEMS = 256
"""Items of a list or tuple DaiFu builds or reads."""
MAX_STORE = 1 << 16
"""Keys of a dict DaiFu looks one item up in (its keys' types are checked first, one by one)."""

FUNCTIONS = {
    "torch": "from_numpy as_tensor tensor cat concat stack flatten squeeze unsqueeze reshape transpose permute "
    "argmax argmin sum mean abs exp log sigmoid tanh softmax log_softmax numel is_floating_point is_tensor",
    "torch.nn.functional": "softmax log_softmax one_hot sigmoid relu",
    "numpy": "asarray array concatenate stack squeeze reshape transpose argmax argmin sum mean abs exp log "
    "ravel shape size ndim",
}
"""Functions of the numeric libraries evaluated, by module: each computes a value from its arguments only."""
METHODS = frozenset(
    "float double half bfloat16 long int short bool byte cpu detach clone contiguous size dim numel view reshape "
    "flatten squeeze unsqueeze t transpose permute sum mean max min argmax argmin abs exp log sigmoid tanh softmax "
    "log_softmax type_as numpy item tolist astype copy ravel is_floating_point".split()
)
"""Methods of a tensor or an array evaluated: none works in place, none reaches outside the value."""
_METADATA = frozenset("size dim numel is_floating_point".split())
"""Methods that only read a tensor's metadata: evaluated on any device and at any size."""
ATTRIBUTES = frozenset("shape dtype device ndim T mT requires_grad is_cuda size itemsize".split())
"""Attributes of a tensor or an array read: its metadata, and the transpose."""
BUILTINS = frozenset("len int float abs round min max tuple list bool".split())

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.MatMult: operator.matmul,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_NUMBERS = (bool, int, float)


class Unsafe(Exception):
    """This expression is not evaluated: it is not on the allowlist, or it raised."""


class Evaluator:
    """Evaluates the expressions of one frame (its `scope` and `globals`), each node once."""

    def __init__(self, scope: Mapping[str, Any], globals_: Mapping[str, Any],
                 functions: set[int] | None = None) -> None:
        self.scope, self.globals = scope, globals_
        self.torch, self.numpy = sys.modules.get("torch"), sys.modules.get("numpy")
        self.values: dict[int, Any] = {}
        self._refused: set[int] = set()
        self._functions = self._pure_functions() if functions is None else functions

    def evaluate_all(self, root: ast.AST) -> Iterator[tuple[ast.expr, Any]]:
        """Each sub-expression of `root` that can be evaluated, with its value, innermost first."""
        for node in _postorder(root):
            if isinstance(node, ast.expr) and id(node) not in self._refused and _loaded(node):
                try:
                    yield node, self.value(node)
                except Unsafe:
                    pass

    def value(self, node: ast.expr) -> Any:
        """The value of `node`, or `Unsafe`."""
        key = id(node)
        if key in self.values:
            return self.values[key]
        if key in self._refused:
            raise Unsafe(type(node).__name__)
        try:
            result = self._evaluate(node)
            self._admit(result)
        except Unsafe:
            self._refused.add(key)
            raise
        except Exception as error:  # the expression raised (often: the crash itself); not evaluated
            self._refused.add(key)
            raise Unsafe(type(error).__name__) from None
        self.values[key] = result
        return result

    # -- the allowlist ---------------------------------------------------------------------------

    def _evaluate(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.value(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            return self._subscript(self._store(node.value), self.value(node.slice))
        if isinstance(node, ast.Slice):
            parts = [self.value(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) <= MAX_ITEMS:
            items = [self.value(e) for e in node.elts if not isinstance(e, ast.Starred)]
            if len(items) != len(node.elts):
                raise Unsafe("starred")
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._compute(_BINARY[type(node.op)], self.value(node.left), self.value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return self._compute(_UNARY[type(node.op)], self.value(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return self._compute(_COMPARE[type(node.ops[0])], self.value(node.left), self.value(node.comparators[0]))
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.ListComp):
            return self._list_comprehension(node)
        raise Unsafe(type(node).__name__)

    def _list_comprehension(self, node: ast.ListComp) -> list[Any]:
        """`[expression for name in sequence]`: the expression evaluated for each item of a list or tuple (or
        of a one-dimensional tensor or array), in a scope where `name` is that item — `for a, b in pairs`
        unpacks each pair — with a fresh evaluator each time (values are cached by node)."""
        loop = node.generators[0]
        names = _target_names(loop.target)
        if len(node.generators) != 1 or loop.ifs or loop.is_async or names is None:
            raise Unsafe("a comprehension other than [expression for name in sequence]")
        items = self._items(self.value(loop.iter))
        found = []
        for item in items:
            if isinstance(loop.target, ast.Name):
                bound = {loop.target.id: item}
            elif type(item) in (list, tuple) and len(item) == len(names):
                bound = dict(zip(names, item))
            else:
                raise Unsafe("an item that does not unpack into the comprehension's names")
            found.append(Evaluator({**self.scope, **bound}, self.globals, self._functions).value(node.elt))
        return found

    def _items(self, sequence: Any) -> list[Any] | tuple[Any, ...]:
        """What a comprehension walks: a short list or tuple, or the items of a short one-dimensional tensor
        or array (iterating one reads it, nothing more)."""
        if type(sequence) in (list, tuple) and len(sequence) <= MAX_ITEMS:
            return sequence  # type: ignore[no-any-return]
        if self._array(sequence) and getattr(sequence, "ndim", 0) == 1 and _elements(sequence) <= MAX_ITEMS:
            self._computable(sequence)
            return list(sequence)
        raise Unsafe("a comprehension over something other than a short list, tuple or vector")

    def _store(self, node: ast.expr) -> Any:
        """The value a subscript reads from: as `value`, but a list, tuple or dict named or read as an
        attribute may be of any length — one item is looked up in it (`_subscript`), it is never admitted
        as a value of the statement."""
        if isinstance(node, ast.Name):
            found = self._name(node.id)
        elif isinstance(node, ast.Attribute):
            found = self._attribute(self._store(node.value), node.attr)
        else:
            return self.value(node)
        if type(found) in (list, tuple, dict):
            return found
        return self.value(node)

    def _name(self, name: str) -> Any:
        if is_secret_key(name):
            raise Unsafe("a secret's name")
        for namespace in (self.scope, self.globals):
            if name in namespace:
                return namespace[name]
        if name in BUILTINS:
            return getattr(builtins, name)
        raise Unsafe(f"{name} is not defined here")

    def _attribute(self, base: Any, name: str) -> Any:
        if name.startswith("__"):
            raise Unsafe("a dunder attribute")
        if is_a(base, types.ModuleType):
            if name not in base.__dict__:
                raise Unsafe("not in the module's namespace")
            return base.__dict__[name]
        if self._array(base):
            if name in ATTRIBUTES:
                return getattr(base, name)
            if name in METHODS:
                return getattr(base, name)
            raise Unsafe(f"the attribute {name} of an array")
        if self.torch is not None and is_a(base, self.torch.nn.Module):
            return self._module_attribute(base, name)
        return _own_attribute(base, name)

    def _module_attribute(self, module: Any, name: str) -> Any:
        """A module's attribute where `nn.Module` keeps it: its own dict, its submodules, parameters, buffers."""
        own = object.__getattribute__(module, "__dict__")
        if name in own and not _data_descriptor(type(module), name):
            return own[name]
        for store in ("_modules", "_parameters", "_buffers"):
            found = own.get(store)
            if type(found) is dict and name in found:
                return found[name]
        raise Unsafe(f"no stored attribute {name}")

    def _subscript(self, base: Any, index: Any) -> Any:
        if type(base) in (list, tuple):
            index = self._position(index)
        if type(base) in (list, tuple) and type(index) in (int, slice):
            return base[index]
        if type(base) is dict and type(index) in (str, int) and len(base) <= MAX_STORE \
                and all(type(key) in (str, int) for key in base):  # no key of the program's compared
            return base[index]
        if self._array(base):
            self._computable(base)
            for part in index if type(index) is tuple else (index,):
                if self._array(part):
                    self._computable(part)
                elif not (part is None or part is Ellipsis or type(part) in (int, slice, bool)):
                    raise Unsafe("an index of another type")
            return self._with_no_grad(operator.getitem, base, index)
        raise Unsafe("a subscript of another type")

    def _position(self, index: Any) -> Any:
        """A list's index as an int where it is one integer held by a 0-d tensor on the CPU or by a NumPy
        integer (an item of the indices a comprehension walks); else `index` itself."""
        torch = self.torch
        if torch is not None and type(index) is torch.Tensor and index.dim() == 0 and index.device.type == "cpu" \
                and not index.is_floating_point() and not index.is_complex() and index.dtype != torch.bool:
            return int(index)
        if self.numpy is not None and is_a(index, self.numpy.integer):
            return int(index)
        return index

    def _call(self, node: ast.Call) -> Any:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Unsafe("unpacked arguments")
        function = self.value(node.func)
        args = [self.value(a) for a in node.args]
        kwargs = {str(k.arg): self.value(k.value) for k in node.keywords}
        if is_a(function, types.BuiltinFunctionType) and id(function) in self._functions:
            return self._compute(function, *args, **kwargs)
        if is_a(function, types.FunctionType) and id(function) in self._functions:
            return self._compute(function, *args, **kwargs)
        builtin = (is_a(function, types.BuiltinFunctionType) and function.__name__ in BUILTINS
                   and function is getattr(builtins, function.__name__, None))
        if builtin or any(function is kind for kind in (int, float, tuple, list, bool)):
            if function is not len and any(self._array(a) and _elements(a) > MAX_ITEMS for a in args):
                raise Unsafe("a builtin iterating over a large array")
            return self._compute(function, *args, **kwargs)
        owner = _bound_to(function)
        if owner is not None and self._array(owner) and getattr(function, "__name__", "") in METHODS:
            if function.__name__ not in _METADATA:
                self._computable(owner)
            return self._compute(function, *args, **kwargs)
        raise Unsafe("a call DaiFu does not know to be pure")

    # -- values --------------------------------------------------------------------------------------

    def _compute(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`function(*args, **kwargs)` when every argument is data (arrays within bounds): no object whose
        own methods an operator or a builtin would call, no power that would take long to compute."""
        for value in (*args, *kwargs.values()):
            self._data(value)
        if function is operator.pow and type(args[1]) is int and abs(args[1]) > 64:
            raise Unsafe("a large power")
        if function in (operator.mul, operator.add) and any(type(a) in (str, bytes, list, tuple) for a in args):
            raise Unsafe("a sequence built by an operator")
        return self._with_no_grad(function, *args, **kwargs)

    def _data(self, value: Any, depth: int = 0) -> None:
        """`Unsafe` unless `value` is data: numbers, text, slices, metadata, small sequences of them, arrays."""
        kind = type(value)
        if value is None or value is Ellipsis or kind in (*_NUMBERS, str, slice, bytes) or self._metadata(value):
            return
        if kind in (list, tuple) and depth < 3 and len(value) <= MAX_ITEMS:
            for item in value:
                self._data(item, depth + 1)
            return
        if self._array(value):
            self._computable(value)
            return
        raise Unsafe(f"a {kind.__name__} given to a computation")

    def _with_no_grad(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.torch is None:
            return function(*args, **kwargs)
        with self.torch.no_grad():  # grad mode is the thread's own: the program's is untouched
            return function(*args, **kwargs)

    def _admit(self, value: Any, depth: int = 0) -> None:
        """Whether `value` is of a type this evaluator knows; `Unsafe` if not."""
        kind = type(value)
        if value is None or value is Ellipsis or kind in (*_NUMBERS, str, slice, bytes):
            return
        if kind in (list, tuple) and depth < 3:
            if len(value) > MAX_ITEMS:
                raise Unsafe("a long sequence")
            for item in value:
                self._admit(item, depth + 1)
            return
        if kind is dict or self._array(value) or self._metadata(value) or self._callable(value):
            return
        if is_a(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
            return  # a callee or a namespace: compared by identity, read from, called only when pure
        if self.torch is not None and is_a(value, self.torch.nn.Module):
            return  # read from, never called
        if _plain_object(value):
            return  # read from by its instance dictionary only
        raise Unsafe(f"a value of type {kind.__name__}")

    def _array(self, value: Any) -> bool:
        kind = type(value)
        if self.torch is not None and kind in (self.torch.Tensor, self.torch.nn.Parameter):
            return True
        if self.numpy is not None and (kind is self.numpy.ndarray or is_a(value, self.numpy.generic)):
            return True
        return False

    def _metadata(self, value: Any) -> bool:
        torch, numpy = self.torch, self.numpy
        if torch is not None and type(value) in (torch.dtype, torch.device, torch.Size):
            return True
        return numpy is not None and (type(value) is numpy.dtype.__class__ or is_a(value, numpy.dtype))

    def _callable(self, value: Any) -> bool:
        if id(value) in self._functions:
            return True
        if any(value is kind for kind in (int, float, tuple, list, bool)) or (
                is_a(value, types.BuiltinFunctionType) and getattr(builtins, value.__name__, None) is value):
            return True
        owner = _bound_to(value)
        return owner is not None and self._array(owner) and getattr(value, "__name__", "") in METHODS

    def _computable(self, value: Any) -> None:
        """`Unsafe` unless DaiFu may compute with this tensor or array: on the CPU, small enough."""
        if self.torch is not None and is_a(value, self.torch.Tensor):
            if value.device.type != "cpu" or value.numel() > MAX_ELEMENTS or value.is_sparse:
                raise Unsafe("a tensor off the CPU or too large to compute with")
        elif getattr(value, "size", 0) > MAX_ELEMENTS:
            raise Unsafe("an array too large to compute with")

    def _pure_functions(self) -> set[int]:
        found: set[int] = set()
        for module_name, names in FUNCTIONS.items():
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for name in names.split():
                function = module.__dict__.get(name)
                if callable(function) and not is_a(function, type):
                    found.add(id(function))
        return found


def is_a(value: Any, kinds: type | tuple[type, ...]) -> bool:
    """`isinstance` by the value's real type only: `isinstance` falls back on a `__class__` attribute, which
    a program's class may compute."""
    return issubclass(type(value), kinds)


def _bound_to(value: Any) -> Any:
    """The object a method is bound to, read only from a method's own type (never an object's `__getattr__`)."""
    if is_a(value, (types.BuiltinMethodType, types.MethodType, types.MethodWrapperType)):
        return value.__self__
    return None


def _elements(array: Any) -> int:
    count = array.numel() if hasattr(array, "numel") else getattr(array, "size", 1)
    return int(count)


def _own_attribute(base: Any, name: str) -> Any:
    """`base.name` from its instance dictionary, when nothing of its class stands in the way."""
    if not _plain_object(base):
        raise Unsafe(f"an attribute of a {type(base).__name__}")
    own = object.__getattribute__(base, "__dict__")
    if type(own) is not dict or name not in own or _data_descriptor(type(base), name):
        raise Unsafe(f"no plain attribute {name}")
    return own[name]


def _plain_object(value: Any) -> bool:
    """An instance of an ordinary class: attribute reads go to its instance dictionary, nothing custom."""
    kind = type(value)
    if kind.__module__ == "builtins" or is_a(value, (type, types.ModuleType, types.FunctionType)):
        return False
    if getattr(kind, "__getattribute__", None) is not object.__getattribute__:
        return False
    try:
        return type(object.__getattribute__(value, "__dict__")) is dict
    except AttributeError:
        return False


def _data_descriptor(cls: type, name: str) -> bool:
    """Whether the class defines `name` as a property or another descriptor that takes precedence."""
    found = inspect.getattr_static(cls, name, None)
    return found is not None and (hasattr(type(found), "__set__") or hasattr(type(found), "__delete__"))


def _target_names(target: ast.expr) -> list[str] | None:
    """The names a comprehension's target binds: one name, or a tuple of names; `None` for any other."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        return [e.id for e in target.elts if isinstance(e, ast.Name)]
    return None


def _loaded(node: ast.expr) -> bool:
    """Whether the statement reads `node` (not an assignment's or a `del`'s target)."""
    return not isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del))


def _postorder(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes under `root`, children before parents, in source order; not into nested scopes (a list
    comprehension is one node, evaluated whole)."""
    for child in ast.iter_child_nodes(root):
        if isinstance(child, ast.ListComp):
            yield child
            continue
        if isinstance(child, (ast.Lambda, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                              ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield from _postorder(child)
    yield root
