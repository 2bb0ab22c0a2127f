"""Which names a Python source file binds at its top level, read without running it (agent side).

The preflight asks whether a `module:function` target's function is there; only the module's own
code could say for sure, and the preflight never runs a user's code. So the source is parsed, and
anything that binds names the parser cannot see (`from x import *`, a module `__getattr__`,
`globals()`, `locals()`, `setattr`, `exec`, `eval`, `sys.modules`) makes the answer "cannot tell" (None). Standard
library only.
"""

from __future__ import annotations

_DYNAMIC = ("globals(", "locals(", "setattr(", "exec(", "eval(", "sys.modules", "vars(", "__dict__", "builtins")
MAX_SOURCE_BYTES = 4 << 20


def top_level_names(path: str) -> set[str] | None:
    """The names module source `path` binds at its top level; None when that cannot be told."""
    import ast

    try:
        with open(path, "rb") as source:
            data = source.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_SOURCE_BYTES or any(word.encode() in data for word in _DYNAMIC):
        return None
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError):  # python will say so itself when it imports the module
        return None
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            # a function may bind a module name through `global`; its body is read for that only
            names.update(n for inner in ast.walk(node) if isinstance(inner, ast.Global) for n in inner.names)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        if not isinstance(node, ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))
    if "__getattr__" in names:
        return None
    return names
