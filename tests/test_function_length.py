"""No function of tasks/ or flows/ is over 60 code lines (tokenize: docstrings, comments and
blank lines excluded)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CODE_LINES = 60
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        first = node.body[0] if isinstance(node, kinds) and node.body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            lines |= set(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str, tree: ast.AST) -> set[int]:
    """The lines holding a token of code (not of a docstring or a comment)."""
    docstrings, lines = docstring_lines(tree), set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in SKIPPED and token.type != tokenize.ENDMARKER:
            lines |= set(range(token.start[0], token.end[0] + 1)) - docstrings
    return lines


def long_functions() -> dict[str, int]:
    """``<file>:<function>`` -> code lines, of every function over the limit."""
    found = {}
    for path in sorted([*ROOT.glob("tasks/*.py"), *ROOT.glob("flows/*.py")]):
        source = path.read_text()
        tree = ast.parse(source)
        lines = code_lines(source, tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = sum(node.lineno <= line <= node.end_lineno for line in lines)
                if count > MAX_CODE_LINES:
                    found[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = count
    return found


def test_code_lines_skip_docstrings_comments_and_blank_lines():
    source = 'def f():\n    """Doc\n    string."""\n    # why\n\n    return (1 +\n        2)\n'
    assert code_lines(source, ast.parse(source)) == {1, 6, 7}


def test_no_function_is_over_60_code_lines():
    assert long_functions() == {}
