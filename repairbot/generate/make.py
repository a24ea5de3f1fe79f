"""Turning an edit at a view into a candidate of the right kind, and the edits every family uses."""

from __future__ import annotations

import ast

from repairbot.generate import edits
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View


def changed(view: View, source: str | None, explanation: str, family: str, evidence: int = 1,
            gives_up: str = "") -> GeneratedRepair | None:
    """The candidate carrying a new source of the view's function: a surgery of the vaccinated
    function, or a `patch_function` of a callee; `None` when there is no new source."""
    if source is None:
        return None
    if view.outermost:
        return GeneratedRepair("surgery", explanation, family, evidence, code=source, gives_up=gives_up)
    return GeneratedRepair("patch_function", f"{explanation} (in {view.site.qualname})", family, evidence,
                           code=source, target=view.site.target, gives_up=gives_up)


def action(view: View, code: str, explanation: str, family: str, evidence: int = 1,
           gives_up: str = "") -> GeneratedRepair | None:
    """An action, which runs in the vaccinated function's frame: none from a callee's view."""
    if not view.outermost:
        return None
    return GeneratedRepair("action", explanation, family, evidence, code=code, gives_up=gives_up)


def wrap_reads(view: View, name: str, template: str) -> str | None:
    """The source with each read of `name` in the faulty statement written as `template.format(name)`."""
    nodes = view.name_nodes(name)
    return edits.replace(view, [(node, template.format(node.id)) for node in nodes]) if nodes else None


def wrap_node(view: View, node: ast.AST, template: str) -> str | None:
    """The source with `node` written as `template.format(<node's text>)`; `{a}` in the template
    gets the node's text in parentheses when a method is called on it (`{a}.float()`)."""
    return edits.replace(view, [(node, template.format(edits.text(view, node), a=edits.atom(view, node)))])


def name_of(node: ast.AST) -> str | None:
    """The name a call's callee ends with: `randint` for `torch.randint`, `model` for `model`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def calls(view: View) -> list[ast.Call]:
    """The calls the faulty statement makes, outermost first."""
    return [n for n in view.walk() if isinstance(n, ast.Call)]


def module_calls(view: View) -> list[ast.Call]:
    """The faulty statement's calls of a live `torch.nn.Module` (`model(x)`, `self.net(x)` when `self.net` is
    one of the report's modules is not known: only names)."""
    return [c for c in calls(view) if isinstance(c.func, ast.Name) and view.is_module(c.func.id)]
