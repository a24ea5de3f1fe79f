"""Code in a few words: each top-level statement of an action or a patch, a definition by its header.

The terminal and the record say what a repair ran on one line. An action that defines a function
(to replace a method, say) is named by what it defines, `def forward(self, x)`, not by the first
statement of that function's body, which would hide the `def`.
"""

from __future__ import annotations

import ast


def statements(code: str) -> list[str]:
    """The top-level statements of `code`, each on one line: a `def` or `class` by its header (no body),
    any other statement as written, with its whitespace folded. Code that does not parse: its non-blank,
    non-comment lines."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return [line.strip() for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [_header(node) or " ".join((ast.get_source_segment(code, node) or ast.unparse(node)).split())
            for node in tree.body]


def body(code: str) -> list[str]:
    """The statements of the body of the `def` that `code` is (a surgery's or a patch's new source), as
    `statements` gives them; `statements(code)` itself when `code` is not one `def`."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return statements(code)
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return statements(code)
    return [_header(node) or " ".join((ast.get_source_segment(code, node) or ast.unparse(node)).split())
            for node in tree.body[0].body]


def _header(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        return f"{prefix} {node.name}({ast.unparse(node.args)})"
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(base) for base in [*node.bases, *node.keywords])
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    return None
