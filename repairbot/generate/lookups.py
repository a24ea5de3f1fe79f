"""Lookups that failed on a live object: what the object holds says what the statement meant.

The report's `lookups` (`daifu.report.lookups`) name the object a failed lookup looked in and what it
holds instead, with the kind of value under each name. From them:

- the nearest existing key, attribute or name: close in spelling (or the same words in another order:
  `val_acc` for `acc_val`; a word shortened, `val_acc` for `val_accuracy`), holding the kind of value the place needs (a number where it is added or
  formatted with `:.3f`, something callable where it is called, a list where `.append` is called on
  it, the kind its siblings in the statement hold), and the only one that close: two equally near
  candidates, or names that differ only in a number (`fc1`, `fc2`: two different layers), are a guess,
  not a typo. In a subscript, a `str.format` field (`{val_acc:.3f}`) or a `%(val_acc)s` field;
- for a mapping that only keeps the run's accounts (numbers, text, lists of numbers: a metrics dict, a
  history; never one holding tensors or modules, the model's state): `setdefault` where the statement
  adds to or appends under the missing key, `.get(key, default)` where the value is only reported
  (printed, logged, formatted); what is computed never reads a made-up default;
- an index one past the end of a list of plain values (a schedule, a list of settings), clamped to its
  last item: `schedule[min(epoch, len(schedule) - 1)]`;
- a quotient by zero that is only reported (a metric: an accuracy over no samples), guarded:
  `correct / total if total else 0.0`.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator

from repairbot.generate import edits, make, usage
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View
from repairbot.names import bound_names
from repairbot.protocol import Lookup

FAMILY = "lookups"
CLOSE = 0.6
"""How near in spelling a name must be to the wanted one to be taken for it (as `difflib.get_close_matches`)."""
_PLAIN_ITEMS = frozenset({usage.NUMBER, usage.TEXT})
_BOOKKEEPING = frozenset({usage.NUMBER, usage.TEXT})
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_SAME_WORD = 0.7
"""How near two words must be to be one word mistyped (`group`, `groups`; `wieght`, `weight`)."""
_ABBREVIATION = 3
"""The fewest letters a word's shortening keeps (`acc`): one or two letters name too many words."""
_SUMS = (ast.Add, ast.Sub, ast.Mult)
"""Operators of a divisor evaluated a second time in its guard: on numbers, they do nothing else."""


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    for lookup in view.report.lookups:
        if lookup.function != view.site.qualname or lookup.lineno != view.site.lineno:
            continue
        if lookup.kind == "key":
            yield from _keys(view, lookup)
        elif lookup.kind in ("attribute", "name"):
            yield from _renamed(view, lookup)
        elif lookup.kind == "index":
            yield from _clamped(view, lookup)
        elif lookup.kind == "divisor":
            yield from _guarded(view, lookup)


# -- the nearest name ---------------------------------------------------------------------------------------


def nearness(a: str, b: str) -> float:
    """How alike two names are as a typo of one another: 0.95 for the same words in another order; else
    `difflib`'s ratio when each word of either has a near counterpart in the other (`param_group` and
    `param_groups`), and 0 when a word has none (`val_loss` and `train_loss` name two different things)."""
    words_a, words_b = _words(a), _words(b)
    if a != b and sorted(words_a) == sorted(words_b):
        return 0.95
    if not (_matched(words_a, words_b) and _matched(words_b, words_a)):
        return 0.0
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(name)]


def _matched(words: list[str], others: list[str]) -> bool:
    return all(any(_same_word(w, o) for o in others) for w in words)


def _same_word(a: str, b: str) -> bool:
    """Whether two words are one word, mistyped (`group`, `groups`) or shortened to at least
    `_ABBREVIATION` letters (`acc` for `accuracy`, `val` for `validation`, `opt` for `optimizer`)."""
    short, long = sorted((a, b), key=len)
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= _SAME_WORD or \
        (len(short) >= _ABBREVIATION and long.startswith(short))


def nearest(wanted: str, kinds: dict[str, str], needed: set[str] | None, python: str | None = None) -> str | None:
    """The one name of `kinds` close to `wanted` whose kind fits `needed` (any kind, when `None`): Python's
    own suggestion when it fits, else the nearest, if no other is as near."""
    def fits(name: str) -> bool:
        return needed is None or usage.category(kinds[name]) in needed

    if python is not None and python in kinds and fits(python):
        return python
    scored = sorted(((nearness(wanted, name), name) for name in kinds
                     if name != wanted and fits(name) and not _numbered_apart(wanted, name)
                     and (wanted.startswith("_") or not name.startswith("_"))), reverse=True)
    scored = [(score, name) for score, name in scored if score >= CLOSE]
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


def unqualified(wanted: str, kinds: dict[str, str], needed: set[str] | None) -> str | None:
    """The one key whose words are those of `wanted` less the words no key of the mapping has: a mapping
    whose keys say no split (`loss`, `accuracy`, an evaluation's own metrics) asked `val_acc` holds its
    `accuracy`. The words that remain must all match, both ways (never `train_acc` for `val_acc`: `train`
    is matched by nothing; never `loss`)."""
    words = _words(wanted)
    own = [w for w in words if any(_same_word(w, o) for name in kinds for o in _words(name))]
    if len(own) == len(words) or not any(len(w) >= _ABBREVIATION for w in own):
        return None
    found = [name for name in kinds if (needed is None or usage.category(kinds[name]) in needed)
             and not name.startswith("_") and _matched(own, _words(name)) and _matched(_words(name), own)]
    return found[0] if len(found) == 1 else None


def _numbered_apart(a: str, b: str) -> bool:
    """Whether two names differ only in their numbers (`fc1`, `fc2`): two things, not a typo of one."""
    return re.sub(r"\d+", "#", a) == re.sub(r"\d+", "#", b)


def _renamed(view: View, lookup: Lookup) -> Iterator[GeneratedRepair | None]:
    """An attribute or a name replaced by the nearest one the object or the scope holds."""
    attributes = [n for n in view.walk() if isinstance(n, ast.Attribute) and n.attr == lookup.wanted
                  and edits.text(view, n.value) == lookup.expression] if lookup.kind == "attribute" else []
    names = view.name_nodes(lookup.wanted) if lookup.kind == "name" else []
    nodes: list[ast.expr] = [*attributes, *names]
    needs = [usage.expected(view, node) for node in nodes]
    needed = None if not needs or any(n is None for n in needs) else set.intersection(*(n for n in needs if n))
    new = nearest(lookup.wanted, lookup.kinds, needed, lookup.suggestion)
    if not nodes or new is None:
        return
    changes: list[tuple[ast.AST, str]] = [(n, f"{edits.text(view, n.value)}.{new}") for n in attributes]
    changes += [(n, new) for n in names]
    if attributes:
        said = f"`{lookup.expression}` ({lookup.type}) has no attribute `{lookup.wanted}`; it has `{new}`"
    else:
        said = f"No name `{lookup.wanted}` is defined here; `{new}` is"
    kind = lookup.kinds.get(new, "")
    yield make.changed(view, edits.replace(view, changes),
                       f"{said} ({kind}){', as Python itself suggests' if new == lookup.suggestion else ''}.",
                       FAMILY, 2 if needed is not None or new == lookup.suggestion else 1)


# -- keys ------------------------------------------------------------------------------------------------


def _keys(view: View, lookup: Lookup) -> Iterator[GeneratedRepair | None]:
    wanted = _literal(lookup.wanted)
    if wanted is None:
        return
    for node in view.walk():
        if isinstance(node, ast.Subscript) and edits.text(view, node.value) == lookup.expression and _is(node.slice,
                                                                                                       wanted):
            yield from _subscript(view, lookup, node, wanted)
        elif isinstance(wanted, str):
            field = _format_field(view, node, lookup)
            if field is not None:
                yield from _format(view, lookup, wanted, *field)


def _subscript(view: View, lookup: Lookup, node: ast.Subscript, wanted: object) -> Iterator[GeneratedRepair | None]:
    kinds = _str_keys(lookup)
    needed = usage.expected(view, node) or _siblings(view, lookup, kinds)
    asked = _asked_alike(view, node)
    if isinstance(wanted, str) and asked:
        new = nearest(wanted, kinds, needed) or unqualified(wanted, kinds, needed)
        if new is not None:
            yield make.changed(view, edits.replace(view, [(place, repr(new)) for place in asked]),
                               f"`{lookup.expression}` has no key {lookup.wanted}{_computed(view, node)}; it has "
                               f"{new!r} ({kinds[new]}){_elsewhere(asked)}.", FAMILY, 2 if needed is not None else 1)
            if isinstance(node.slice, ast.Name) and view.variable(node.slice.id) is None:
                constant = node.slice.id
                yield make.action(view, f"{constant} = {new!r}",
                                  f"`{lookup.expression}` has no key {lookup.wanted}, the value of the module's "
                                  f"`{constant}`; it has {new!r} ({kinds[new]}): set `{constant}` to it. This "
                                  f"changes module state: every reader of `{constant}` in the module sees {new!r} "
                                  "from now on.", FAMILY, 1)
    if not _bookkeeping(lookup):
        return
    container, key = edits.text(view, node.value), edits.text(view, node.slice)
    parent, statement = view.parent(node), view.statement
    if isinstance(parent, ast.AugAssign) and parent.target is node and parent is statement:
        start = "[]" if _all_lists(lookup) else "0"
        yield make.changed(view, edits.insert_before(view, statement, f"{container}.setdefault({key}, {start})"),
                           f"`{lookup.expression}` keeps the run's accounts and has no entry {lookup.wanted} yet: "
                           f"start it at {start} before adding to it.", FAMILY, 2)
    elif isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in ("append", "extend"):
        yield make.changed(view, edits.replace(view, [(node, f"{edits.atom(view, node.value)}.setdefault({key}, [])")]),
                           f"`{lookup.expression}` keeps the run's accounts and has no list under {lookup.wanted} "
                           "yet: start one.", FAMILY, 2)
    elif isinstance(node.ctx, ast.Load) and usage.reported(view, node):
        default = _default(view, node, lookup)
        yield make.changed(view, edits.replace(view, [(node, f"{edits.atom(view, node.value)}.get({key}, {default})")]),
                           f"{lookup.wanted} is not in `{lookup.expression}` (yet); the value is only reported: "
                           f"report {default} for it.", FAMILY, 1)


def _asked_alike(view: View, node: ast.Subscript) -> list[ast.expr]:
    """The keys to write as the key the mapping holds: a constant key at the faulty statement; a key computed
    from module names the function never binds (a module constant, a module setting's attribute, an f-string
    of them), which is the same key wherever and whenever the function asks it, at each subscript of the same
    mapping by the same expression. None for a key that may vary: from a local (a loop variable's f-string)
    or a parameter (another call asks another key)."""
    if isinstance(node.slice, ast.Constant):
        return [node.slice]
    fdef = view.fdef
    if fdef is None or not _steady(node.slice) or {n.id for n in ast.walk(node.slice)
                                                   if isinstance(n, ast.Name)} & _rebound(fdef):
        return []
    container, key = edits.text(view, node.value), edits.text(view, node.slice)
    return [n.slice for n in ast.walk(fdef) if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load)
            and edits.text(view, n.value) == container and edits.text(view, n.slice) == key]


def _steady(node: ast.expr) -> bool:
    """Whether a key expression only reads: names, attributes, constants and f-strings of them."""
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, ast.Attribute):
        return _steady(node.value)
    if isinstance(node, ast.JoinedStr):
        return all(_steady(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values)
    return False


def _rebound(fdef: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names the function binds, declares global or takes as parameters: a key read from one of them may
    change within a call or from one call to the next."""
    declared = {name for n in ast.walk(fdef) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    parameters = {a.arg for a in ast.walk(fdef.args) if isinstance(a, ast.arg)}
    return bound_names(fdef, nested=True) | declared | parameters


def _computed(view: View, node: ast.Subscript) -> str:
    return "" if isinstance(node.slice, ast.Constant) else \
        f" (the value of `{edits.text(view, node.slice)}`, which is left as it is)"


def _elsewhere(asked: list[ast.expr]) -> str:
    return f": read it at the {len(asked)} places that ask it" if len(asked) > 1 else ""


def _format_field(view: View, node: ast.AST, lookup: Lookup) -> tuple[ast.Constant, str] | None:
    """The format string of `'...'.format(**m)`, `'...'.format_map(m)` or `'...' % m` where `m` is the lookup's
    mapping, and the way a field is written in it (`{` or `%(`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        looked = ([k.value for k in node.keywords if k.arg is None] if node.func.attr == "format"
                  else node.args[:1] if node.func.attr == "format_map" else [])
        template = node.func.value
        if any(edits.text(view, m) == lookup.expression for m in looked) and _is_text(template):
            return template, "{"  # type: ignore[return-value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_text(node.left) and \
            edits.text(view, node.right) == lookup.expression:
        return node.left, "%("  # type: ignore[return-value]
    return None


def _format(view: View, lookup: Lookup, wanted: str, template: ast.Constant,
            opening: str) -> Iterator[GeneratedRepair | None]:
    written = edits.text(view, template)
    field = re.compile(re.escape(opening + wanted) + (r"(?=[}:!.\[])" if opening == "{" else r"(?=\))"))
    if len(field.findall(written)) == 0:
        return
    kinds = _str_keys(lookup)
    specs = re.findall(re.escape(opening + wanted) + r"(?:![rsa])?:([^{}]*)\}", written) if opening == "{" else []
    needed = {usage.NUMBER, usage.TENSOR} if any(usage.numeric_format(s) for s in specs) else None
    needed = needed or _field_siblings(written, opening, kinds)
    new = nearest(wanted, kinds, needed)
    if new is None or not new.isidentifier():
        return
    yield make.changed(view, edits.replace(view, [(template, field.sub(opening + new, written))]),
                       f"The format asks `{lookup.expression}` for {lookup.wanted}, which it does not hold; it holds "
                       f"{new!r} ({kinds[new]}).", FAMILY, 2 if needed is not None else 1)


def _field_siblings(written: str, opening: str, kinds: dict[str, str]) -> set[str] | None:
    """The categories the format's other fields of the same mapping hold, when they agree."""
    fields = re.findall(r"\{(\w+)" if opening == "{" else r"%\((\w+)\)", written)
    found = {usage.category(kinds[f]) for f in fields if f in kinds}
    return found if len(found) == 1 else None


def _siblings(view: View, lookup: Lookup, kinds: dict[str, str]) -> set[str] | None:
    """The categories the statement's other constant keys of the same mapping hold, when they agree."""
    found = {usage.category(kinds[n.slice.value]) for n in view.walk()
             if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in kinds
             and edits.text(view, n.value) == lookup.expression}
    return found if len(found) == 1 else None


def _str_keys(lookup: Lookup) -> dict[str, str]:
    """The mapping's string keys, with the kind of value under each."""
    found = {}
    for written, kind in lookup.kinds.items():
        key = _literal(written)
        if isinstance(key, str):
            found[key] = kind
    return found


def _bookkeeping(lookup: Lookup) -> bool:
    """Whether the mapping only keeps the run's accounts: every value seen, each a number, a text or a list of
    them (a metrics dict, a history), none a tensor, a module or anything else of the model's state."""
    if lookup.length is None or lookup.length != len(lookup.kinds):
        return False
    return all(usage.category(kind) in _BOOKKEEPING or _list_of_plain(kind) for kind in lookup.kinds.values())


def _list_of_plain(kind: str) -> bool:
    inner = kind.partition("[")[2].rstrip("]")
    return usage.category(kind) == usage.LIST and (not inner or usage.category(inner) in _BOOKKEEPING)


def _all_lists(lookup: Lookup) -> bool:
    return bool(lookup.kinds) and all(usage.category(k) == usage.LIST for k in lookup.kinds.values())


def _default(view: View, node: ast.AST, lookup: Lookup) -> str:
    """The default a missing reported value gets: 0.0 among numbers or where a number is formatted, else None."""
    categories = {usage.category(kind) for kind in lookup.kinds.values()}
    needed = usage.expected(view, node)
    if (needed and needed <= {usage.NUMBER, usage.TENSOR}) or (categories and categories <= {usage.NUMBER}):
        return "0.0"
    return "None"


def _literal(written: str) -> object:
    try:
        return ast.literal_eval(written)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _is(node: ast.expr, value: object) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value or (
        not isinstance(node, ast.Constant))


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


# -- an index one past the end ---------------------------------------------------------------------------------


def _clamped(view: View, lookup: Lookup) -> Iterator[GeneratedRepair | None]:
    index = _literal(lookup.wanted)
    if not isinstance(index, int) or lookup.length is None or lookup.length == 0 or index < lookup.length:
        return
    item = lookup.kinds.get("item", "")
    if usage.category(item) not in _PLAIN_ITEMS and not _list_of_plain(item):
        return  # clamping an index into data, models or tensors would repeat one silently
    for node in view.walk():
        if not (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and not isinstance(node.slice, ast.Slice) and edits.text(view, node.value) == lookup.expression):
            continue
        sequence = edits.text(view, node.value)
        yield make.changed(view, edits.replace(view, [(node.slice, f"min({edits.text(view, node.slice)}, "
                                                                   f"len({sequence}) - 1)")]),
                           f"Index {index} is past the end of `{sequence}` ({lookup.length} items of {item}); keep "
                           "to its last item from there on.", FAMILY, 2 if index == lookup.length else 1)


# -- a quotient by zero that only measures the run ------------------------------------------------------------


def _guarded(view: View, lookup: Lookup) -> Iterator[GeneratedRepair | None]:
    """0 for the quotient by zero where it only measures the run; the divisions of the measures computed from
    it guarded too (F1 from a precision guarded to 0 divides by `precision + recall`, 0 in turn)."""
    statement = view.statement
    for node in view.walk():
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))
                and edits.text(view, node.right) == lookup.expression and _pure(node.right)):
            continue
        target = statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
        later = [] if usage.reported(view, node) else (
            usage.measures(view, target.id, statement) if isinstance(target, ast.Name) and statement is not None
            else None)
        if later is None:
            continue
        divisions = [node] + [d for s in later for d in ast.walk(s) if isinstance(d, ast.BinOp)
                              and isinstance(d.op, (ast.Div, ast.FloorDiv)) and _pure(d.right)
                              and not _already_guarded(view, d)]
        divisor = edits.text(view, node.right)
        more = f" (and in the {len(divisions) - 1} measure(s) computed from it)" if len(divisions) > 1 else ""
        yield make.changed(view, edits.replace(view, [(d, _guard(view, d)) for d in divisions]),
                           f"`{divisor}` is 0 and the quotient only measures the run (a metric over nothing: it is "
                           "reported, compared or combined into other measures, never trained on): take 0 when "
                           f"there is nothing to divide by{more}, as metric libraries do.", FAMILY, 2)


def _already_guarded(view: View, division: ast.BinOp) -> bool:
    """Whether `division` is the value of `... if <its divisor> else ...` (a guard a repair put there before)."""
    parent = view.parent(division)
    return (isinstance(parent, ast.IfExp) and parent.body is division
            and ast.dump(parent.test) == ast.dump(division.right))


def _guard(view: View, division: ast.BinOp) -> str:
    """`division` written to give 0 when its divisor is 0, in parentheses unless it is a statement's whole value."""
    zero = "0.0" if isinstance(division.op, ast.Div) else "0"
    guarded = f"{edits.text(view, division)} if {edits.text(view, division.right)} else {zero}"
    parent = view.parent(division)
    return guarded if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is division else f"({guarded})"


def _pure(node: ast.expr) -> bool:
    """Whether evaluating `node` twice gives the same and does nothing: names, attributes, constant subscripts,
    `len` of one of them, sums and products of those (`tp + fp`: the divisor is a Python number, or no
    `ZeroDivisionError` was raised)."""
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, ast.Attribute):
        return _pure(node.value)
    if isinstance(node, ast.Subscript):
        return _pure(node.value) and _pure(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1:
        return _pure(node.args[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, _SUMS):
        return _pure(node.left) and _pure(node.right)
    return False
