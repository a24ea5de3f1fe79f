"""What code from the repair bot may run without a person: a small allowlisted language.

An LLM's output is attacker-influenced (crash messages and file contents reach its prompt), so code
that `approve="auto"` applies unattended must stay inside a language small enough to read:

- statements: assignments (plain, augmented, annotated), expression statements, `if`, `for`, `assert`,
  `raise`, `pass`, `break`, `continue`, `return`, `del` of names the code itself binds, `import` of the
  modules in `IMPORTS` (with `as`), `with` of the context managers in `CONTEXT_MANAGERS`, and `try`
  whose every handler names specific exceptions (not bare, `Exception` or `BaseException`);
- expressions: literals, arithmetic, comparisons, boolean logic, `x if c else y`, subscripts and slices,
  list/tuple/dict/set displays, comprehensions, f-strings, and lambdas passed straight to a call;
- calls, whose callee must be, syntactically, one of: a builtin in `BUILTINS`; a dotted path in `CALLS`
  reached through a module (`torch.cuda.empty_cache`, `F.relu` where `F` is `torch.nn.functional`); a
  method in `METHODS` (`x.float()`), in `CONTAINER_METHODS` on a name known to hold a list, dict or set
  (`losses.append(...)`), or in `STRING_METHODS` on a name known to hold a string; or a callee the
  vaccinated function already calls (`model(x)`, `optimizer.zero_grad()`, `cnn.accuracy(...)`), checked
  against its live value (`context_for`) so that a callable from `os`, `subprocess`, `pickle`... never is.

Refused, each with the line: attributes whose name starts with `_` (dunders and private names), names
starting with `__`, builtins not in `BUILTINS` (`eval`, `getattr`, `vars`, `open`, `type`...), modules used
as values (`shell = os`), module attributes outside `CALLS`/`VALUES` (`os.environ`, `sys.modules`),
imports outside `IMPORTS` and every `from x import *`, `while`, `def`, `class`, `global`, `nonlocal`,
`async`, `await`, `yield`, `match`, `:=`, calls whose callee is computed (`fns[0](x)`, `type(x)(y)`), names
the code binds and then calls (aliasing), assignments that shadow a module or a builtin, `time.sleep`
without a literal bound of `MAX_SLEEP_S`, and literal sizes beyond `MAX_INT`, `MAX_ELEMENTS`, `MAX_RANGE`.

A surgery is the vaccinated function's new source: its `def` line (decorators, parameters, defaults,
annotations) must be the running one's, and only its body statements that differ from the running
source are held to the allowlist — unchanged statements are the user's own code. Statements are
aligned block by block (`difflib` on their ASTs); a compound statement that changed keeps its body
aligned with the old one, so a changed `for` header is checked without re-checking its whole body.
A `patch_function` is checked the same way against the callee's running source, and its target must
be a user function on the crash's stack.

This is the static layer; the trial sandbox (issue 17) is the dynamic one. Values the code computes
from the user's state (a `range(n)` over a huge `n`) are bounded by that state, not here.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import difflib
import functools
import inspect
import math
import operator
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from daifu.crash import Crash
from daifu.report import is_library
from daifu.suggestions import Verdict

MAX_SLEEP_S = 60
"""Seconds `time.sleep` may wait unattended; a longer wait needs a person."""
MAX_INT = 2**32
"""Largest integer literal (after folding constant arithmetic)."""
MAX_ELEMENTS = 10**8
"""Largest product of the integer literals given to one call (a tensor's size) or repeating a sequence."""
MAX_RANGE = 10**6
"""Largest literal bound of a `range`."""
MAX_CODE = 256 * 1024
"""Characters of code the checker reads; longer code needs a person."""

IMPORTS = frozenset(
    {
        "os",
        "os.path",
        "time",
        "math",
        "difflib",
        "pathlib",
        "numpy",
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.utils",
        "torch.utils.data",
        "torch.cuda",
    }
)
"""Modules an `import` may name (and their `from` forms, for names in `CALLS`, `VALUES` or `IMPORTS`)."""

BUILTINS = frozenset(
    "abs all any bool dict divmod enumerate filter float frozenset int isinstance issubclass iter len list map max "
    "min next print range repr reversed round set slice sorted str sum tuple zip".split()
)
"""Builtins that compute from their arguments and reach nothing else (`iter` with one argument only)."""

_TORCH_FUNCTIONS = (
    "tensor as_tensor from_numpy zeros ones full empty zeros_like ones_like full_like empty_like rand randn randint "
    "randperm arange linspace eye cat concat stack hstack vstack flatten reshape squeeze unsqueeze transpose permute "
    "where clamp clip isfinite isnan isinf nan_to_num isclose allclose equal all any sum mean std var max min amax "
    "amin argmax argmin abs exp log log1p sqrt pow softmax log_softmax sigmoid tanh relu matmul mm bmm einsum split "
    "chunk narrow gather index_select masked_select topk sort argsort cumsum norm dot outer numel is_tensor "
    "is_floating_point broadcast_to no_grad enable_grad inference_mode set_grad_enabled autocast device finfo iinfo "
    "get_default_dtype manual_seed round floor ceil sign maximum minimum logical_and logical_or logical_not"
)
_CUDA_FUNCTIONS = (
    "empty_cache synchronize is_available device_count current_device memory_allocated memory_reserved "
    "max_memory_allocated mem_get_info reset_peak_memory_stats"
)
_NN_MODULES = (
    "Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d BatchNorm1d BatchNorm2d BatchNorm3d "
    "LayerNorm GroupNorm RMSNorm Dropout Dropout2d Embedding LSTM GRU RNN ReLU LeakyReLU GELU SiLU Tanh Sigmoid "
    "Softmax LogSoftmax Identity Flatten Unflatten MaxPool1d MaxPool2d AvgPool1d AvgPool2d AdaptiveAvgPool1d "
    "AdaptiveAvgPool2d Sequential ModuleList ModuleDict CrossEntropyLoss NLLLoss MSELoss L1Loss SmoothL1Loss BCELoss "
    "BCEWithLogitsLoss KLDivLoss HuberLoss"
)
_FUNCTIONAL = (
    "relu gelu silu leaky_relu sigmoid tanh softmax log_softmax dropout linear conv1d conv2d max_pool2d avg_pool2d "
    "adaptive_avg_pool2d layer_norm batch_norm normalize pad interpolate one_hot embedding cross_entropy nll_loss "
    "mse_loss l1_loss smooth_l1_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div"
)
_MATH_FUNCTIONS = (
    "floor ceil trunc sqrt isqrt exp log log2 log10 log1p pow fabs fmod isfinite isnan isinf isclose prod fsum gcd "
    "lcm copysign hypot sin cos tan atan2 tanh"
)
_OS_PATH_FUNCTIONS = (
    "join dirname basename exists isdir isfile abspath normpath splitext split expanduser relpath getsize"
)


def _paths(prefix: str, names: str) -> set[str]:
    return {f"{prefix}.{name}" for name in names.split()}


CALLS = frozenset(
    _paths("torch", _TORCH_FUNCTIONS)
    | _paths("torch.cuda", _CUDA_FUNCTIONS)
    | _paths("torch.nn", _NN_MODULES)
    | _paths("torch.nn.functional", _FUNCTIONAL)
    | _paths("torch.nn.utils", "clip_grad_norm_ clip_grad_value_")
    | _paths("torch.utils.data", "DataLoader TensorDataset Subset BatchSampler RandomSampler SequentialSampler")
    | _paths("math", _MATH_FUNCTIONS)
    | _paths("os.path", _OS_PATH_FUNCTIONS)
    | _paths("os", "makedirs fspath listdir getcwd")
    | _paths("time", "sleep time perf_counter monotonic")
    | _paths("numpy", "asarray array isfinite isnan nan_to_num mean zeros ones")
    | _paths("torch.distributions", "Categorical Normal Bernoulli")
    | {"torch.Generator", "difflib.get_close_matches", "pathlib.Path", "pathlib.PurePath"}
)
"""Functions and classes reached through a module that compute, allocate (bounded), or touch nothing but
the process: tensor math, layer constructors, data loaders, pure path functions, `os.makedirs`, and
`time.sleep` with a literal bound. Deliberately absent: everything that reads or writes files
(`torch.load`, `torch.save`, `open`, `numpy.load`), runs code or processes, or opens connections."""

VALUES = frozenset(
    _paths(
        "torch",
        "float float32 float64 double half float16 bfloat16 long int64 int int32 int16 int8 uint8 bool "
        "complex64 Tensor",
    )
    | _paths("torch.nn", "Module Parameter")
    | _paths("torch.utils.data", "Dataset DataLoader BatchSampler RandomSampler SequentialSampler")
    | _paths("math", "pi e tau inf nan")
    | _paths("numpy", "float32 float64 int64 ndarray nan inf")
    | {"os.sep"}
)
"""Module attributes that may be read as values: dtypes, classes for `isinstance`, constants."""

CONTEXT_MANAGERS = frozenset(
    {"torch.no_grad", "torch.enable_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.autocast"}
)

METHODS = frozenset(
    (
        "float double half bfloat16 long int short bool byte to cpu cuda type_as view view_as reshape reshape_as "
        "flatten unflatten unsqueeze squeeze permute transpose t contiguous detach detach_ requires_grad_ item "
        "numpy tolist clone size dim numel nelement expand expand_as repeat narrow chunk sum mean std var max "
        "min amax amin argmax argmin abs exp log sqrt pow clamp clamp_ clip nan_to_num nan_to_num_ isfinite isnan "
        "isinf any all softmax log_softmax sigmoid relu masked_fill masked_fill_ fill_ zero_ index_select gather "
        "topk sort argsort norm add sub mul div matmul eq ne lt gt le ge round floor ceil astype copy_ "
        "eval train zero_grad parameters named_parameters buffers modules children state_dict add_param_group "
        "manual_seed sample rsample log_prob entropy mkdir "
        "get keys values items index count strip lstrip rstrip lower upper startswith endswith join splitlines "
        "partition rpartition removeprefix removesuffix zfill isdigit split"
    ).split()
)
"""Methods allowed on any receiver: tensor and array conversions and math, model/optimizer bookkeeping,
random generators and distributions, `mkdir` (what `os.makedirs` may do), and reading containers and
strings. None is the name of a function with effects in `os`, `shutil`, `subprocess`, `socket`, `pickle`
or `builtins` (a test holds this); `eval` is allowed only without arguments (`model.eval()`)."""

CONTAINER_METHODS = frozenset(
    "append extend insert pop remove clear update setdefault add discard sort reverse copy".split()
)
"""Methods that change a container; allowed only on a name known to hold a list, dict or set, since on
another receiver the same names delete files (`os.remove`) or copy them (`shutil.copy`)."""

STRING_METHODS = frozenset({"replace"})
"""Methods allowed only on a name known to hold a `str` (`Path.replace` renames a file): a local holding
one when the crash happened and not rebound by the code, or a name every binding of which in the code
is certainly a `str`."""
_STRING_RESULTS = frozenset("replace strip lstrip rstrip lower upper removeprefix removesuffix zfill join".split())

_EFFECT_ATTRIBUTES = frozenset(
    "system popen remove unlink rmdir rmtree rename replace write write_text write_bytes tofile dump dumps save "
    "load loads open exec eval kill terminate send sendall connect spawn fork format format_map".split()
)
"""Attributes refused even as plain values (`f = x.numpy().tofile`): a callable handed to user code
that then calls it would escape the call rules. Defence in depth behind the call allowlist."""

_DANGEROUS_MODULES = frozenset(
    "os posix nt posixpath ntpath subprocess shutil socket _socket ssl pickle marshal shelve dbm ctypes importlib "
    "builtins sys io pathlib tempfile code codeop runpy operator asyncio multiprocessing threading signal pty "
    "urllib http requests httpx aiohttp ftplib smtplib telnetlib xmlrpc webbrowser gc inspect types "
    "torch.serialization torch.hub torch.jit torch.package torch.utils.cpp_extension numpy.lib.npyio".split()
)
"""Modules whose callables are never admitted as "already called by the function" (`from os import system`)."""

_MODULE_ALIASES = {"posixpath": "os.path", "ntpath": "os.path", "posix": "os", "nt": "os"}
_BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})
_CONTAINER_TYPES = (list, dict, set)
_CONTAINER_BUILDERS = frozenset({"list", "dict", "set", "sorted"})


@dataclasses.dataclass(frozen=True)
class Context:
    """What the checked code may rely on, read from the crashed frame by `context_for`.

    source: the running source of the function (a surgery is compared with it).
    names: every local and global name visible there (they shadow builtins).
    modules: those names bound to modules, with the module's name (`F` -> `torch.nn.functional`).
    paths: those names bound to an allowlisted callable, with its path in `CALLS` (`sleep` -> `time.sleep`).
    callables: callees the function's own code calls (`model`, `optimizer.zero_grad`) whose live value
        is not from a dangerous module.
    containers, strings: names holding a list/dict/set, or a str.
    callees: for each user function on the crash's stack below the vaccinated one, the target a
        `patch_function` names it by (`sys.modules['m'].f`) and its own context.
    """

    source: str = ""
    names: frozenset[str] = frozenset()
    modules: Mapping[str, str] = dataclasses.field(default_factory=dict)
    paths: Mapping[str, str] = dataclasses.field(default_factory=dict)
    callables: frozenset[str] = frozenset()
    containers: frozenset[str] = frozenset()
    strings: frozenset[str] = frozenset()
    callees: Mapping[str, Context] = dataclasses.field(default_factory=dict)


class SuggestionLike(Protocol):
    """What the check needs of a bot suggestion (`repairbot.protocol.Suggestion` has it)."""

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def target(self) -> str | None: ...


def check_suggestion(suggestion: SuggestionLike, context: Context, code: str | None = None) -> Verdict:
    """Whether `suggestion` may be applied without a person; `code` overrides its code (a restored surgery)."""
    text = suggestion.code if code is None else code
    if suggestion.kind == "surgery":
        return check_surgery_safety(text, context)
    if suggestion.kind == "patch_function":
        return check_patch_safety(text, suggestion.target or "", context)
    if suggestion.kind == "action":
        return check_safety(text, context)
    return Verdict()


def check_safety(code: str, context: Context | None = None) -> Verdict:
    """Whether action `code` stays inside the allowlisted language (module docstring) in `context`."""
    tree = _parse(code, "the action")
    if isinstance(tree, str):
        return Verdict((tree,))
    return _verdict(tree.body, context or Context(), deletable=_stores(tree.body), parameters=frozenset())


def check_surgery_safety(source: str, context: Context) -> Verdict:
    """Whether a surgery's new `def` changes only body statements, and those stay inside the allowlist."""
    return _check_def(source, context.source, context, "the surgery")


def check_patch_safety(source: str, target: str, context: Context) -> Verdict:
    """Whether a `patch_function` reaches a user function on the stack and changes it as a surgery may."""
    callee = context.callees.get(target)
    if callee is None:
        return Verdict((f"its target {target!r} is not a user function on the crash's stack",))
    return _check_def(source, callee.source, callee, "the patch")


def _check_def(source: str, running: str, context: Context, what: str) -> Verdict:
    new = _one_def(source, what)
    if isinstance(new, str):
        return Verdict((new,))
    old = _one_def(running, "the running function") if running else None
    old_def = old if isinstance(old, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if old_def is not None and _header(old_def) != _header(new):
        return Verdict(
            (
                f"line {new.lineno}: {what} changes the def line (name, decorators, parameters, defaults or "
                "annotations); only its body may change without a person",
            )
        )
    if isinstance(new, ast.AsyncFunctionDef):
        return Verdict((f"line {new.lineno}: an async function cannot be changed without a person",))
    changed = list(changed_statements(old_def.body if old_def else [], new.body))
    parameters = frozenset(
        a.arg
        for d in ast.walk(new)
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))  # nested defs' too; lambdas' stay in them
        for a in ast.walk(d.args)
        if isinstance(a, ast.arg)
    )
    return _verdict(changed, context, deletable=_stores(new.body), parameters=parameters)


def _one_def(source: str, what: str) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    tree = _parse(source, what)
    if isinstance(tree, str):
        return tree
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{what} must be exactly one function definition"
    return tree.body[0]


def _parse(code: str, what: str) -> ast.Module | str:
    if len(code) > MAX_CODE:
        return f"{what} is longer than {MAX_CODE} characters"
    try:
        return ast.parse(textwrap.dedent(code))
    except SyntaxError as error:
        return f"{what} does not parse: {error.msg} (line {error.lineno})"
    except (RecursionError, MemoryError, ValueError) as error:
        return f"{what} cannot be read: {type(error).__name__}"


def _header(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The def line as data: name, decorators, parameters with defaults and annotations, return annotation."""
    shallow = copy.copy(node)
    shallow.body = []
    return ast.dump(shallow)


def _stores(statements: list[ast.stmt]) -> frozenset[str]:
    """The names `statements` assign or import in their own scope: the names of its own the code may read
    before the frame has them, and the only names its `del` may remove. A lambda's parameters and a
    comprehension's variables stay inside it, as in Python, so they are left out."""
    found: set[str] = set()
    pending: list[ast.AST] = list(statements)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(a.asname or a.name.split(".")[0] for a in node.names)
        pending.extend(ast.iter_child_nodes(node))
    return frozenset(found)


def _verdict(
    statements: list[ast.stmt], context: Context, *, deletable: frozenset[str], parameters: frozenset[str]
) -> Verdict:
    checker = _Checker(context, statements, deletable, parameters)
    try:
        for statement in statements:
            checker.statement(statement)
    except RecursionError:
        checker.refuse(statements[0] if statements else None, "the code is nested too deeply to check")
    return Verdict(tuple(dict.fromkeys(checker.reasons)))


# -- which statements of a surgery changed -----------------------------------------------------------

_BODIES = ("body", "orelse", "finalbody")


def changed_statements(old: list[ast.stmt], new: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `new` that are not the same statements of `old` in the same place.

    A changed compound statement whose counterpart is found yields only its header (its bodies
    emptied) when the header changed, then the changed statements of its bodies.
    """
    matcher = difflib.SequenceMatcher(None, [ast.dump(s) for s in old], [ast.dump(s) for s in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        unmatched = list(old[i1:i2])
        for statement in new[j1:j2]:
            twin = next((o for o in unmatched if type(o) is type(statement) and _is_compound(o)), None)
            if twin is None:
                yield statement
                continue
            unmatched.remove(twin)
            yield from _changed_compound(twin, statement)


def _is_compound(node: ast.stmt) -> bool:
    return any(isinstance(getattr(node, name, None), list) and getattr(node, name) for name in ("body", "handlers"))


def _changed_compound(old: ast.stmt, new: ast.stmt) -> Iterator[ast.stmt]:
    if ast.dump(_header_only(old)) != ast.dump(_header_only(new)):
        yield _header_only(new)
    for name in _BODIES:
        yield from changed_statements(getattr(old, name, None) or [], getattr(new, name, None) or [])
    old_handlers, new_handlers = getattr(old, "handlers", []), getattr(new, "handlers", [])
    for index, handler in enumerate(new_handlers):
        before = old_handlers[index].body if index < len(old_handlers) else []
        yield from changed_statements(before, handler.body)


def _header_only(node: ast.stmt) -> ast.stmt:
    """`node` with every body emptied to `pass`: what is left is its header (and its handlers' types)."""
    shallow = copy.copy(node)
    for name in _BODIES:
        if getattr(shallow, name, None):
            setattr(shallow, name, [ast.Pass(lineno=node.lineno, col_offset=0)])
    if getattr(shallow, "handlers", None):
        shallow.handlers = [  # type: ignore[attr-defined]
            ast.ExceptHandler(type=h.type, name=h.name, body=[ast.Pass()], lineno=h.lineno, col_offset=0)
            for h in shallow.handlers  # type: ignore[attr-defined]
        ]
    return shallow


# -- the checker -----------------------------------------------------------------------------------


class _Checker:
    """Walks statements, appending a reason (with its line) for every construct outside the allowlist.

    `bound` holds every name the checked code binds (assignments, loop and comprehension targets,
    `with ... as`, `except ... as`, lambda parameters); `imports` maps the names its imports bind to
    the module or allowlisted path they stand for. `deletable` are the names the code (an action) or
    its function (a surgery) assigns; `known` adds the frame's names and the function's parameters.
    """

    def __init__(
        self, context: Context, statements: list[ast.stmt], deletable: frozenset[str], parameters: frozenset[str]
    ) -> None:
        self.context = context
        self.deletable = deletable
        self.known = context.names | deletable | parameters
        self.reasons: list[str] = []
        self.imports: dict[str, str] = {}
        self.bound: set[str] = set()
        self.made_containers: set[str] = set()
        self.made_strings: set[str] = set()
        self.scopes: list[set[str]] = []
        """The names bound by the lambdas and comprehensions around the expression being checked."""
        self._collect(statements)

    def refuse(self, node: ast.AST | None, what: str) -> None:
        line = getattr(node, "lineno", None)
        self.reasons.append(f"line {line}: {what}" if line else what)

    # -- names the code binds, found before checking so that order does not matter

    def _collect(self, statements: list[ast.stmt]) -> None:
        container_bindings: dict[str, list[bool]] = {}
        string_bindings: dict[str, list[bool]] = {}
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.bound.add(node.id)
                elif isinstance(node, ast.arg):
                    self.bound.add(node.arg)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.bound.add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    self._note_imports(node)
                for target, value in _bindings(node):
                    for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                        simple = isinstance(target, ast.Name) and value is not None
                        container_bindings.setdefault(name, []).append(simple and _builds_container(value))
                        string_bindings.setdefault(name, []).append(simple and self._makes_string(value))
        self.made_containers = {name for name, kinds in container_bindings.items() if all(kinds)}
        self.made_strings = {name for name, kinds in string_bindings.items() if all(kinds)}

    def _makes_string(self, value: ast.expr | None) -> bool:
        """Whether `value` is certainly a `str`: a literal, an f-string, `str(...)`, a known str's method."""
        if isinstance(value, ast.Constant):
            return isinstance(value.value, str)
        if isinstance(value, ast.JoinedStr):
            return True
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            return self._makes_string(value.left) or self._makes_string(value.right)
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        if isinstance(func, ast.Name):
            return func.id == "str" and func.id not in self.context.names
        return (
            isinstance(func, ast.Attribute)
            and func.attr in _STRING_RESULTS
            and isinstance(func.value, (ast.Name, ast.Constant))
            and (
                (isinstance(func.value, ast.Constant) and isinstance(func.value.value, str))
                or (isinstance(func.value, ast.Name) and func.value.id in self.context.strings)
            )
        )

    def _note_imports(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if isinstance(node, ast.Import):
                name, meaning = _import_meaning(alias)
                self.imports[name] = meaning
            elif node.module and node.level == 0 and alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    # -- statements

    def statement(self, node: ast.stmt) -> None:
        handler = getattr(self, f"_stmt_{type(node).__name__}", None)
        if handler is None:
            self.refuse(node, f"`{_construct(node)}` is not allowed without a person")
            return
        handler(node)

    def _stmts(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def _stmt_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)

    def _stmt_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.target(target, node.value)
        self.expr(node.value)

    def _stmt_AugAssign(self, node: ast.AugAssign) -> None:
        self.target(node.target, None)
        self.expr(node.value)

    def _stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.target(node.target, node.value)
        self.expr(node.annotation)  # evaluated when the code runs as an action
        if node.value is not None:
            self.expr(node.value)

    def _stmt_If(self, node: ast.If) -> None:
        self.expr(node.test)
        self._stmts(node.body + node.orelse)

    def _stmt_For(self, node: ast.For) -> None:
        self.target(node.target, None)
        self.expr(node.iter)
        self._stmts(node.body + node.orelse)

    def _stmt_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            path = self.module_path(call.func) if isinstance(call, ast.Call) else None
            if path not in CONTEXT_MANAGERS:
                self.refuse(item.context_expr, f"`with {_text(item.context_expr)}`: only {_listed(CONTEXT_MANAGERS)}")
            self.expr(call)
            if item.optional_vars is not None:
                self.target(item.optional_vars, None)
        self._stmts(node.body)

    def _stmt_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            self._handler(handler)
            self._stmts(handler.body)
        self._stmts(node.body + node.orelse + node.finalbody)

    def _handler(self, handler: ast.ExceptHandler) -> None:
        if handler.name and (handler.name in self.context.modules or handler.name in self.imports):
            self.refuse(handler, f"`except ... as {handler.name}` rebinds a module name")
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for kind in kinds:
            if kind is None or (isinstance(kind, ast.Name) and kind.id in _BROAD_EXCEPTIONS):
                self.refuse(handler, "an `except` that swallows every exception")
            elif kind is not None:
                self.expr(kind)

    def _stmt_Assert(self, node: ast.Assert) -> None:
        self.expr(node.test)
        if node.msg is not None:
            self.expr(node.msg)

    def _stmt_Raise(self, node: ast.Raise) -> None:
        for part in (node.exc, node.cause):
            if part is not None:
                self.expr(part)

    def _stmt_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.expr(node.value)

    def _stmt_Pass(self, node: ast.Pass) -> None:
        pass

    _stmt_Break = _stmt_Continue = _stmt_Pass

    def _stmt_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                if target.id not in self.deletable:
                    self.refuse(target, f"`del {target.id}`: the code may delete only names it binds itself")
            else:
                self.target(target, None)

    def _stmt_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in IMPORTS:
                self.refuse(node, f"`import {alias.name}`: only {_listed(IMPORTS)} may be imported")
            name, meaning = _import_meaning(alias)
            self._import_binding(node, name, meaning)

    def _stmt_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if alias.name == "*":
                self.refuse(node, f"`from {module} import *` binds names nobody can see")
            elif node.level or module not in IMPORTS or full not in CALLS | VALUES | IMPORTS:
                self.refuse(node, f"`from {'.' * node.level}{module} import {alias.name}` is not on the allowlist")
            else:
                self._import_binding(node, alias.asname or alias.name, full)

    def _import_binding(self, node: ast.stmt, name: str, meaning: str) -> None:
        known = self.context.modules.get(name)
        if (known is not None and known != meaning) or (known is None and name in self.context.names):
            self.refuse(node, f"the import rebinds `{name}`, which the function already uses for something else")

    # -- assignment targets

    def target(self, node: ast.expr, value: ast.expr | None) -> None:
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element, None)
        elif isinstance(node, ast.Starred):
            self.target(node.value, None)
        elif isinstance(node, ast.Name):
            self._name_target(node, value)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
            self._receiver_not_module(node.value, node)
            self.expr(node.value)
            self._rebinding_a_callee(node, _text(node), value)
        elif isinstance(node, ast.Subscript):
            self._receiver_not_module(node.value, node)
            self.expr(node.value)
            self.expr(node.slice)
        else:
            self.refuse(node, f"cannot assign to `{_text(node)}`")

    def _name_target(self, node: ast.Name, value: ast.expr | None) -> None:
        name = node.id
        if name.startswith("__"):
            self.refuse(node, f"assigns the dunder name `{name}`")
        elif name in self.context.modules or name in self.imports:
            self.refuse(node, f"assigns `{name}`, a module name")
        elif name in builtins.__dict__ and name not in self.context.names:
            self.refuse(node, f"assigns `{name}`, which shadows a builtin")
        else:
            self._rebinding_a_callee(node, name, value)

    def _rebinding_a_callee(self, node: ast.expr, text: str, value: ast.expr | None) -> None:
        """A name the function calls may only be given a freshly built value, never a callable picked up."""
        if text in self.context.callables and not isinstance(value, ast.Call):
            self.refuse(node, f"rebinds `{text}`, which the function calls, to something other than a call's result")

    def _receiver_not_module(self, receiver: ast.expr, node: ast.AST) -> None:
        root = _root_name(receiver)
        if root is not None and self.module_of(root) is not None:
            self.refuse(node, f"changes `{_text(receiver)}`, a part of module `{self.module_of(root)}`")

    # -- expressions

    def expr(self, node: ast.expr) -> None:
        handler = getattr(self, f"_expr_{type(node).__name__}", None)
        if handler is None:
            self.refuse(node, f"`{_construct(node)}` is not allowed without a person")
            return
        handler(node)

    def _exprs(self, nodes: list[ast.expr]) -> None:
        for node in nodes:
            self.expr(node)

    def _expr_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) > MAX_INT:
            self.refuse(node, f"the integer literal {_short(node.value)} is larger than {MAX_INT}")

    def _expr_Name(self, node: ast.Name) -> None:
        name = node.id
        if name.startswith("__"):
            self.refuse(node, f"uses the dunder name `{name}`")
        elif self.module_of(name) is not None:
            self.refuse(node, f"uses the module `{name}` as a value")
        elif name in self.imports and self.imports[name] not in CALLS | VALUES:
            self.refuse(node, f"uses `{name}` ({self.imports[name]}) as a value")
        elif self._is_builtin(name) and name not in BUILTINS and not _is_exception_class(name):
            self.refuse(node, f"uses the builtin `{name}`, which is not on the allowlist")
        elif not self._known(name):
            self.refuse(node, f"uses `{name}`, which is not defined where the code runs")

    def _known(self, name: str) -> bool:
        """Whether `name` is bound where it is read: in the frame, by the code or its function in their own
        scope, by the lambda or comprehension being checked, or as a builtin."""
        in_scope = any(name in scope for scope in self.scopes)
        return name in self.known or in_scope or name in self.imports or name in builtins.__dict__

    def _is_builtin(self, name: str) -> bool:
        return name in builtins.__dict__ and name not in self.context.names and name not in self.bound

    def _expr_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node)
        path = self.module_path(node)
        if path is not None:
            if path not in CALLS | VALUES:
                self.refuse(node, f"reads `{_text(node)}` ({path}), which is not on the allowlist")
            return
        if node.attr in _EFFECT_ATTRIBUTES:
            self.refuse(node, f"takes the method `.{node.attr}` as a value")
        self.expr(node.value)

    def _attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.refuse(node, f"reaches the private or dunder attribute `.{node.attr}`")

    def _expr_Subscript(self, node: ast.Subscript) -> None:
        self.expr(node.value)
        self.expr(node.slice)

    def _expr_Slice(self, node: ast.Slice) -> None:
        self._exprs([part for part in (node.lower, node.upper, node.step) if part is not None])

    def _expr_BinOp(self, node: ast.BinOp) -> None:
        folded = _fold(node)
        if folded is _TOO_BIG or (isinstance(folded, int) and abs(folded) > MAX_INT):
            self.refuse(node, f"the constant `{_text(node)}` is larger than {MAX_INT}")
            return
        if isinstance(node.op, ast.Mult):
            for side in (node.left, node.right):
                count = _fold(side)
                if isinstance(count, int) and count > MAX_ELEMENTS:
                    self.refuse(node, f"repeats a sequence {_short(count)} times (more than {MAX_ELEMENTS})")
        self.expr(node.left)
        self.expr(node.right)

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.expr(node.operand)

    def _expr_BoolOp(self, node: ast.BoolOp) -> None:
        self._exprs(node.values)

    def _expr_Compare(self, node: ast.Compare) -> None:
        self._exprs([node.left, *node.comparators])

    def _expr_IfExp(self, node: ast.IfExp) -> None:
        self._exprs([node.test, node.body, node.orelse])

    def _expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        self._exprs(node.elts)

    _expr_List = _expr_Set = _expr_Tuple

    def _expr_Dict(self, node: ast.Dict) -> None:
        self._exprs([k for k in node.keys if k is not None] + node.values)

    def _expr_Starred(self, node: ast.Starred) -> None:
        self.expr(node.value)

    def _expr_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._exprs(node.values)

    def _expr_FormattedValue(self, node: ast.FormattedValue) -> None:
        self.expr(node.value)
        if node.format_spec is not None:
            self.expr(node.format_spec)

    def _expr_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node.generators, [node.elt])

    _expr_SetComp = _expr_GeneratorExp = _expr_ListComp

    def _expr_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node.generators, [node.key, node.value])

    def _comprehension(self, generators: list[ast.comprehension], parts: list[ast.expr]) -> None:
        """The generators, then `parts` (element, key, value), with the comprehension's variables in scope."""
        self.scopes.append({n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)})
        for generator in generators:
            if generator.is_async:
                self.refuse(generator.iter, "an `async for` comprehension is not allowed without a person")
            self.target(generator.target, None)
            self.expr(generator.iter)
            self._exprs(generator.ifs)
        self._exprs(parts)
        self.scopes.pop()

    def _expr_Lambda(self, node: ast.Lambda) -> None:
        self.refuse(node, "a lambda that is not passed straight to a call")

    def _expr_Call(self, node: ast.Call) -> None:
        self._callee(node)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(argument, ast.Lambda):  # its parameters are in `bound`, so it cannot call them
                self._lambda_parameters(argument)
                self._exprs([d for d in [*argument.args.defaults, *argument.args.kw_defaults] if d is not None])
                self.scopes.append({a.arg for a in ast.walk(argument.args) if isinstance(a, ast.arg)})
                self.expr(argument.body)
                self.scopes.pop()
            else:
                self.expr(argument)
        self._sizes(node)

    def _lambda_parameters(self, node: ast.Lambda) -> None:
        for parameter in (a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)):
            if parameter in self.context.modules or parameter in self.imports or parameter.startswith("__"):
                self.refuse(node, f"a lambda parameter rebinds `{parameter}`")

    # -- calls

    def _callee(self, node: ast.Call) -> None:
        func = node.func
        text = _text(func)
        root = _root_name(func)
        if root is None:
            if isinstance(func, ast.Attribute):
                self._method(node, func)
            else:
                self.refuse(node, f"calls a computed callee `{text}`")
            return
        path = self.module_path(func)
        if path in CALLS:  # first, so that an allowlisted callee keeps its bounds (`time.sleep`)
            self._module_call(node, path, text)
        elif root not in self.bound and root not in self.imports and text in self.context.callables:
            if isinstance(func, ast.Attribute):  # the function's own call, on its own object or module
                self._attribute(func)
                if self.module_of(root) is None:
                    self.expr(func.value)
        elif path is not None:
            self._module_call(node, path, text)
        elif isinstance(func, ast.Name):
            self._name_call(node, func)
        else:
            self._method(node, func)  # type: ignore[arg-type]

    def _module_call(self, node: ast.Call, path: str, text: str) -> None:
        if path not in CALLS:
            self.refuse(node, f"calls `{text}` ({path}), which is not on the allowlist")
            return
        if path == "time.sleep":
            self._sleep(node)

    def _name_call(self, node: ast.Call, func: ast.Name) -> None:
        name = func.id
        if name in self.bound:
            self.refuse(node, f"calls `{name}`, a name the code binds itself")
        elif self._is_builtin(name):
            if name not in BUILTINS and not _is_exception_class(name):
                self.refuse(node, f"calls the builtin `{name}`, which is not on the allowlist")
            elif name == "iter" and len(node.args) != 1:
                self.refuse(node, "calls `iter` with a sentinel, an unbounded iterator")
            elif name == "range":
                self._range(node)
        else:
            self.refuse(node, f"calls `{name}`, which the function does not call itself")

    def _method(self, node: ast.Call, func: ast.Attribute) -> None:
        method = func.attr
        self._attribute(func)
        receiver = func.value
        if method in METHODS:
            if method == "eval" and (node.args or node.keywords):
                self.refuse(node, "calls `.eval(...)` with arguments")
        elif method in CONTAINER_METHODS:
            if not self._holds(receiver, self.context.containers, self.made_containers):
                self.refuse(
                    node, f"calls `.{method}()` on `{_text(receiver)}`, not a name known to hold a list, dict or set"
                )
        elif method in STRING_METHODS:
            if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)) and not self._holds(
                receiver, self.context.strings, self.made_strings
            ):
                self.refuse(node, f"calls `.{method}()` on `{_text(receiver)}`, not a name known to hold a str")
        else:
            self.refuse(node, f"calls the method `.{method}()`, which is not on the allowlist")
        self.expr(receiver)

    def _holds(self, receiver: ast.expr, known: frozenset[str], made: set[str]) -> bool:
        if not isinstance(receiver, ast.Name):
            return False
        return receiver.id in made or (receiver.id in known and receiver.id not in self.bound)

    def _sleep(self, node: ast.Call) -> None:
        seconds = _fold(node.args[0]) if len(node.args) == 1 and not node.keywords else None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_SLEEP_S:
            self.refuse(node, f"`time.sleep` needs one literal number of seconds, at most {MAX_SLEEP_S}")

    def _range(self, node: ast.Call) -> None:
        for argument in node.args:
            value = _fold(argument)
            if value is _TOO_BIG or (isinstance(value, int) and abs(value) > MAX_RANGE):
                self.refuse(node, f"`range` over the literal {_text(argument)} (more than {MAX_RANGE})")

    def _sizes(self, node: ast.Call) -> None:
        """The integer literals of one call (positional, in tuples and lists, `size=`) multiply to a bound."""
        literals = [_fold(a) for a in _size_arguments(node, self.module_path(node.func))]
        if any(v is _TOO_BIG for v in literals):
            self.refuse(node, f"`{_text(node.func)}` gets a literal beyond any bound")
            return
        product = 1
        for value in literals:
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                product *= value
        if product > MAX_ELEMENTS:
            self.refuse(
                node,
                f"`{_text(node.func)}` gets literal sizes of {_short(product)} elements (more than {MAX_ELEMENTS})",
            )

    # -- modules

    def module_of(self, name: str) -> str | None:
        """The module `name` stands for here, if it stands for one."""
        if name in self.imports:
            meaning = self.imports[name]
            return meaning if meaning in IMPORTS or meaning not in CALLS | VALUES else None
        return self.context.modules.get(name)  # a module name the code rebinds is refused where it does

    def module_path(self, node: ast.expr) -> str | None:
        """The dotted path of `node` when it is an attribute chain rooted at a module (`F.relu` -> ...)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if not parts and node.id in self.imports:
            return self.imports[node.id]
        if not parts and node.id in self.context.paths and node.id not in self.bound:
            return self.context.paths[node.id]  # `sleep`, from a user's `from time import sleep`
        module = self.module_of(node.id)
        if module is None:
            return None
        return ".".join([module, *reversed(parts)])


def _import_meaning(alias: ast.alias) -> tuple[str, str]:
    """The name `import a.b [as c]` binds, and the module it binds it to (`a.b` with `as`, else `a`)."""
    top = alias.name.split(".")[0]
    return (alias.asname, alias.name) if alias.asname else (top, top)


def _bindings(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None]]:
    """The (target, value) pairs a node binds; the value is `None` where it is not one expression."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign):
        return [(node.target, node.value)]
    if isinstance(node, (ast.AugAssign, ast.For, ast.comprehension)):
        return [(node.target, None)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, None)]
    return []


def _builds_container(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _CONTAINER_BUILDERS


_BOUNDS_NOT_SIZES = frozenset({"torch.randint"})
"""Calls whose plain integer arguments are value bounds; only their tuple (or `size=`) is a size."""


def _size_arguments(node: ast.Call, path: str | None) -> Iterator[ast.expr]:
    """The arguments of a call that may be sizes: integers, tuple and list elements, `size=`/`shape=`."""
    plain = path not in _BOUNDS_NOT_SIZES
    for argument in [*node.args, *(k.value for k in node.keywords if k.arg in ("size", "shape", None))]:
        if isinstance(argument, (ast.Tuple, ast.List)):
            yield from argument.elts
        elif plain:
            yield argument


class _TooBig:
    """A folded constant too large to compute (`10**10**10`)."""


_TOO_BIG = _TooBig()


def _fold(node: ast.expr) -> int | float | _TooBig | None:
    """The value of a constant arithmetic expression, computed only where it stays small."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _fold(node.operand)
        return -value if isinstance(node.op, ast.USub) and isinstance(value, (int, float)) else value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "round"):
        value = _fold(node.args[0]) if len(node.args) == 1 else None
        return int(value) if isinstance(value, float) and math.isfinite(value) else value
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _fold(node.left), _fold(node.right)
    if left is _TOO_BIG or right is _TOO_BIG:
        return _TOO_BIG
    if not isinstance(left, (int, float)) or not isinstance(right, (int, float)):
        return None
    return _apply(node.op, left, right)


_OPERATIONS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


def _apply(op: ast.operator, left: float, right: float) -> int | float | _TooBig | None:
    """`left op right`, or `_TOO_BIG` for a power or shift whose result would run to thousands of bits."""
    bits = abs(left).bit_length() if isinstance(left, int) else 64
    if (isinstance(op, ast.Pow) and abs(left) > 1 and right * bits > 4096) or (
        isinstance(op, ast.LShift) and right > 4096
    ):
        return _TOO_BIG
    operation = _OPERATIONS.get(type(op))
    try:
        return None if operation is None else operation(left, right)
    except (ArithmeticError, ValueError, TypeError):
        return None


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_exception_class(name: str) -> bool:
    value = builtins.__dict__.get(name)
    return isinstance(value, type) and issubclass(value, BaseException)


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):
        text = type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _construct(node: ast.AST) -> str:
    names = {
        "While": "while",
        "FunctionDef": "def",
        "AsyncFunctionDef": "async def",
        "ClassDef": "class",
        "Global": "global",
        "Nonlocal": "nonlocal",
        "AsyncFor": "async for",
        "AsyncWith": "async with",
        "Await": "await",
        "Yield": "yield",
        "YieldFrom": "yield from",
        "NamedExpr": ":=",
        "Match": "match",
        "TryStar": "try/except*",
    }
    return names.get(type(node).__name__, type(node).__name__)


def _listed(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"about 10**{len(text) - 1}"


# -- the context, from a live crash ----------------------------------------------------------------


def context_for(crash: Crash) -> Context:
    """The context of `crash`'s frame, and of every user function on the stack below it."""
    frame_globals = dict(crash.frame.f_globals) if crash.frame is not None else {}
    values = {**frame_globals, **crash.locals}
    context = build_context(crash.source, values, str(frame_globals.get("__name__", "")))
    callees = {}
    for frame in _callee_frames(crash):
        module = str(frame.f_globals.get("__name__"))
        target = f"sys.modules[{module!r}].{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
        try:
            source = "".join(inspect.getsourcelines(frame.f_code)[0])
        except (OSError, TypeError):
            continue
        callees[target] = build_context(source, {**frame.f_globals, **frame.f_locals}, module)
    return dataclasses.replace(context, callees=callees)


def _callee_frames(crash: Crash) -> Iterator[types.FrameType]:
    """User frames below the vaccinated function's, where a `patch_function` could apply."""
    entries = [frame for frame, _ in _walk(crash.exception.__traceback__)]
    own = [
        i
        for i, f in enumerate(entries)
        if (f.f_code.co_filename, f.f_code.co_name) == (crash.filename, crash.function_name)
    ]
    for frame in entries[own[-1] + 1 :] if own else []:
        qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if not _is_library(frame.f_code.co_filename) and "<locals>" not in qualname:
            yield frame


def _walk(tb: types.TracebackType | None) -> Iterator[tuple[types.FrameType, int]]:
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def build_context(source: str, values: Mapping[str, Any], module: str) -> Context:
    """The context of a function with this `source`, seeing `values` (its locals over its globals)."""
    modules = {name: _module_name(value) for name, value in values.items() if isinstance(value, types.ModuleType)}
    modules.update(_source_imports(source))
    allowlisted = _allowlisted_objects()
    callables = {text for text, value in _source_callees(source, values) if _admissible(value, module, allowlisted)}
    callables |= {name for name, value in values.items() if _named_callable(value, module, allowlisted)}
    paths = {name: allowlisted[id(v)] for name, v in values.items() if id(v) in allowlisted and callable(v)}
    return Context(
        source=source,
        paths=paths,
        names=frozenset(values),
        modules=modules,
        callables=frozenset(callables),
        containers=frozenset(n for n, v in values.items() if type(v) in _CONTAINER_TYPES),
        strings=frozenset(n for n, v in values.items() if type(v) is str),
    )


def _allowlisted_objects() -> dict[int, str]:
    """The live objects of `CALLS` in modules already imported, by identity: a user's
    `from torch.nn.functional import relu` binds the allowlisted function, whatever its name."""
    found = {}
    for path in CALLS:
        module, _, name = path.rpartition(".")
        owner = sys.modules.get(module)
        value = owner.__dict__.get(name) if owner is not None else None
        if value is not None:
            found[id(value)] = path
    return found


def _named_callable(value: Any, module: str, allowlisted: Mapping[int, str]) -> bool:
    """Whether a name the frame sees may be called even if the function does not call it yet: a function
    or class the function's own module defines (an allowlisted callable under any name is in `paths`)."""
    defined_here = isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == module
    return defined_here and _admissible(value, module, allowlisted)


def _module_name(module: types.ModuleType) -> str:
    name = module.__name__
    return _MODULE_ALIASES.get(name, name)


def _source_imports(source: str) -> dict[str, str]:
    """Modules the function imports itself (`import numpy as np` in its body), by the names they bind."""
    tree = _parse(source, "the function") if source else None
    found: dict[str, str] = {}
    if isinstance(tree, ast.Module):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(_import_meaning(alias) for alias in node.names)
    return found


_MISSING = object()


def _source_callees(source: str, values: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each callee the source calls by a name or a dotted path on a name, with its live value if known."""
    tree = _parse(source, "the function") if source else None
    if not isinstance(tree, ast.Module):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _root_name(node.func) is not None:
            text = _text(node.func)
            if not any(part.startswith("_") for part in text.split(".")[1:]):
                yield text, _resolve(text, values)


def _resolve(text: str, values: Mapping[str, Any]) -> Any:
    """The live value of a dotted callee, following attributes only through modules (no user code runs)."""
    root, *rest = text.split(".")
    value = values.get(root, builtins.__dict__.get(root, _MISSING))
    for part in rest:
        if not isinstance(value, types.ModuleType):
            return _METHOD_ON_VALUE if value is not _MISSING else _MISSING
        value = value.__dict__.get(part, _MISSING)
    return value


_METHOD_ON_VALUE = object()
"""A method called on a user's value (`optimizer.zero_grad`): admitted without looking it up."""


def _admissible(value: Any, module: str, allowlisted: Mapping[int, str]) -> bool:
    """Whether a callable the function calls may be called by bot code too (`Context.callables`)."""
    if value is _METHOD_ON_VALUE or value is _MISSING:
        return True  # a user's object's method, or a name the function binds before it calls it
    if id(value) in allowlisted:
        return True
    if isinstance(value, types.ModuleType):
        return False
    if isinstance(value, functools.partial):
        return _admissible(value.func, module, allowlisted)
    if isinstance(value, types.MethodType):
        return not isinstance(value.__self__, types.ModuleType) and _admissible(value.__func__, module, allowlisted)
    if isinstance(value, (types.FunctionType, type, types.BuiltinFunctionType)):
        return _admissible_definition(inspect.unwrap(value), module)  # `@torch.no_grad()` wraps it
    return _admissible_definition(type(value), module)  # a callable object: judged by its class


def _admissible_definition(value: Any, module: str) -> bool:
    owner = str(getattr(value, "__module__", None) or "")
    if owner == "builtins":
        return getattr(value, "__name__", "") in BUILTINS or _is_exception_class(getattr(value, "__name__", ""))
    if any(owner == m or owner.startswith(m + ".") for m in _DANGEROUS_MODULES):
        return False
    if owner == module or _is_torch_module_class(value):
        return True
    return not _is_library(_defined_in(value, owner))


_is_library = functools.lru_cache(maxsize=4096)(is_library)
"""`daifu.report.is_library`, remembered: it reads `sysconfig` on every call."""


def _defined_in(value: Any, owner: str) -> str:
    code = getattr(value, "__code__", None)
    if code is not None:
        return str(code.co_filename)
    return str(getattr(sys.modules.get(owner), "__file__", None) or "<unknown>")


def _is_torch_module_class(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, type) and issubclass(value, torch.nn.Module)
