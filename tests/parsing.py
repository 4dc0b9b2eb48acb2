"""``ast.parse`` for the project's tests: parsed again when a garbage collection interrupted it
(CPython 3.11's "AST constructor recursion depth mismatch", conformance.plugin.ast_guard). The
project's own test session is not a suite session, so its ``ast.parse`` is not guarded: a test
that parses the tree met the garbage a whole-suite test left behind and failed."""

from __future__ import annotations

import ast
from typing import Any

from conformance.plugin.ast_guard import uninterrupted

_parse = uninterrupted(ast.parse)


def parse(source: str) -> ast.Module:
    tree: Any = _parse(source)
    assert isinstance(tree, ast.Module)
    return tree
