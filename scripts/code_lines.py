"""Code lines of the app (``tasks/`` and ``flows/``) per module and in all, as issue 50
counts them: lines holding a token of code (tokenize), docstrings, comments and blank lines
excluded.

Run from the repository root: ``python scripts/code_lines.py`` (``--total`` prints the sum
only).
"""

from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENDMARKER}  # fmt: skip
STATEMENT_END = {tokenize.NEWLINE, tokenize.ENDMARKER}
STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def _is_docstring(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether the string at ``index`` is a statement of its own (a docstring)."""
    before = index - 1
    while before >= 0 and tokens[before].type in (tokenize.NL, tokenize.COMMENT):
        before -= 1
    after = index + 1
    while after < len(tokens) and tokens[after].type == tokenize.STRING:
        after += 1  # implicitly joined strings
    starts = before < 0 or tokens[before].type in STATEMENT_START
    return starts and tokens[after].type in STATEMENT_END


def code_lines(source: str) -> int:
    """The number of lines of ``source`` that hold code."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines: set[int] = set()
    for index, token in enumerate(tokens):
        if token.type in SKIPPED:
            continue
        if token.type == tokenize.STRING and _is_docstring(tokens, index):
            continue
        lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines)


def main() -> None:
    counts = {
        path.as_posix(): code_lines(path.read_text())
        for folder in ("tasks", "flows")
        for path in sorted(Path(folder).rglob("*.py"))
    }
    if "--total" not in sys.argv:
        for name, count in sorted(counts.items(), key=lambda item: -item[1]):
            print(f"{count:6d} {name}")
    print(f"{sum(counts.values()):6d} total")


if __name__ == "__main__":
    main()
