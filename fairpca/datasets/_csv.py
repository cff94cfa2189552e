"""Reading a user's CSV file (plain or compressed) within bounds.

In this order, so that a wrong file fails in seconds whatever its size:

1. **The first rows** (``HEAD_ROWS``, at most ``HEAD_BYTES`` of text) are read and parsed, and
   the caller checks them (the columns it needs, the positive label) before anything else.
2. **One streaming pass** over the whole file checks the reading bounds (size, line length;
   :func:`~fairpca.datasets._files.scan_text`), decides the encoding on every byte (UTF-8 if the
   whole file is valid UTF-8, else Latin-1 for the whole file with a warning naming the first
   byte that is not UTF-8; a file mixing valid UTF-8 characters with such bytes is refused, as
   either reading would split a label such as ``Français`` into two groups) and looks for the
   text of a positive label the first rows did not hold.
3. **A memory bound**: the table's size, projected from the first rows' parsed size per byte of
   text, times ``PARSE_FACTOR`` for the parser's working copies, must fit in the memory available
   (``MemAvailable``, or ``FAIRPCA_MEMORY_LIMIT``); only then is the whole file parsed.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from .._memory import format_bytes, require, size_setting
from ._files import (
    DEFAULT_LINE_LIMIT,
    LINE_LIMIT_ENV,
    _open_decompressed,
    _too_large,
    line_number,
    scan_text,
)

HEAD_ROWS = 5000
HEAD_BYTES = 8 * 2**20
# A parse holds the tokenizer's buffers and each column's conversion beside the table: its
# peak was 2.45 times the table's size on 150 MB of Adult-like text (pandas 2, C parser).
PARSE_FACTOR = 3
_SEPARATORS = ",;\t|"
_HEAD_CHUNK = 1 << 16


def detect_separator(header: str) -> str:
    """The delimiter of a CSV header line: ``csv.Sniffer`` first, then the most frequent
    of ``, ; TAB |`` in the header (UCI Bank Marketing, for one, uses ``;``)."""
    first = header.splitlines()[0] if header.strip() else ""
    sample = "\n".join(header.splitlines()[:20])
    try:
        return csv.Sniffer().sniff(sample, delimiters=_SEPARATORS).delimiter
    except csv.Error:
        counts = {sep: first.count(sep) for sep in _SEPARATORS}
        best = max(counts, key=counts.get)
        return best if counts[best] else ","


def read_head(path: Path) -> tuple[bytes, bool]:
    """The first ``HEAD_ROWS`` lines after the header (at most ``HEAD_BYTES``, but always the
    header and one row), cut after a newline; and whether that is the whole file."""
    line_limit = size_setting(LINE_LIMIT_ENV, DEFAULT_LINE_LIMIT)
    parts, size, lines, run = [], 0, 0, 0  # run: bytes since the last newline
    stream, raw = _open_decompressed(path)
    with raw, stream:
        while chunk := stream.read(_HEAD_CHUNK):
            parts.append(chunk)
            size, lines = size + len(chunk), lines + chunk.count(b"\n")
            last = chunk.rfind(b"\n")
            run = run + len(chunk) if last < 0 else len(chunk) - last - 1
            if lines > HEAD_ROWS or (size >= HEAD_BYTES and lines >= 2):
                head = b"".join(parts)
                return head[: _nth_newline(head, HEAD_ROWS + 1) + 1], False
            if run > line_limit:  # the line check of scan_text, before holding the line
                raise _too_large(path, f"a line is longer than {format_bytes(line_limit)}", (
                    "check the separator and the line endings, or raise "
                    f"{LINE_LIMIT_ENV} if the lines are meant to be this long"))  # fmt: skip
    return b"".join(parts), True


def _nth_newline(data: bytes, n: int) -> int:
    """Position of the ``n``-th newline of ``data``, or of its last one if it has fewer."""
    position = -1
    for _ in range(n):
        found = data.find(b"\n", position + 1)
        if found < 0:
            break
        position = found
    return position


def head_text(head: bytes) -> tuple[str, str]:
    """The first rows as text, and the encoding that decodes them (a multi-byte character cut
    at the end does not count)."""
    try:
        return head.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as error:
        if error.start >= len(head) - 4 and error.reason == "unexpected end of data":
            return head[: error.start].decode("utf-8"), "utf-8"
        return head.decode("latin-1"), "latin-1"


def parse_head(head: bytes, whole: bool, sep: str, encoding: str) -> pd.DataFrame:
    """Parse the first rows. A quoted field may span lines, so when the cut falls inside one,
    fewer rows are parsed (halving) until they end before it."""
    rows = max(head.count(b"\n") - 1, 1)
    while True:
        try:
            return pd.read_csv(
                io.BytesIO(head), sep=sep, encoding=encoding, low_memory=False,
                nrows=None if whole else rows,
            )  # fmt: skip
        except pd.errors.ParserError:
            if whole or rows <= 1:
                raise
            rows //= 2


def decided_encoding(path: Path, scan) -> str:
    """The whole file's encoding from its scan (module docstring, step 2)."""
    if scan.first_invalid is None:
        return "utf-8"
    if scan.first_multibyte is not None:
        utf8, other = scan.first_multibyte, scan.first_invalid
        raise ValueError(
            f"Data file {path} mixes two text encodings: it holds UTF-8 characters (the first on "
            f"line {line_number(path, utf8)}, byte {utf8}) and bytes that are not UTF-8 (the "
            f"first on line {line_number(path, other)}, byte {other}), so a label written both "
            "ways would become two groups. Re-save the whole file as UTF-8."
        )
    warnings.warn(
        f"Data file {path} is not UTF-8 (byte {scan.first_invalid}, on line "
        f"{line_number(path, scan.first_invalid)}, is not valid UTF-8); the whole file is read as "
        "Latin-1. Re-save it as UTF-8 if characters look wrong.",
        UserWarning,
        stacklevel=5,
    )
    return "latin-1"


def require_table_memory(path: Path, head: bytes, frame: pd.DataFrame, n_bytes: int) -> None:
    """Refuse a file whose table would not fit in memory (module docstring, step 3)."""
    per_byte = frame.memory_usage(deep=True).sum() / max(len(head), 1)
    table = per_byte * n_bytes
    require(
        PARSE_FACTOR * table,
        f"the table of data file {path.name} ({format_bytes(n_bytes)} of text, about "
        f"{format_bytes(table)} as a table, estimated from its first {len(frame)} rows) and "
        "the parser's working copies",
        "Give a smaller file or a Parquet file, free memory, or set FAIRPCA_MEMORY_LIMIT "
        "if more memory is available than the system reports.",
    )


def read_csv(
    path: Path, sep: str | None, check_head: Callable[[pd.DataFrame, bool], tuple]
) -> pd.DataFrame:
    """Read a CSV file in the three steps of the module docstring.

    ``check_head(first_rows, whole)`` raises for what the first rows already show is wrong,
    and returns the byte strings to look for in the rest of the file with a function called
    (with no argument) when none of them occurs.
    """
    head, whole = read_head(path)
    if b"\x00" in head:
        raise ValueError(
            f"Data file {path} is binary (it contains NUL bytes), not a text CSV; export the "
            "table as CSV (UTF-8) or Parquet."
        )
    text, encoding = head_text(head)
    sep = sep or detect_separator(text)
    try:
        first_rows = parse_head(head, whole, sep, encoding)
        first_rows.columns = [str(column).strip() for column in first_rows.columns]
        needles, not_found = check_head(first_rows, whole)
        scan = scan_text(path, needles)
        if needles and not scan.found:
            not_found()
        encoding = decided_encoding(path, scan)
        require_table_memory(path, head, first_rows, scan.n_bytes)
        header = pd.read_csv(path, sep=sep, encoding=encoding, header=None, nrows=1)
        frame = pd.read_csv(path, sep=sep, encoding=encoding, low_memory=False)
        return without_repeated_columns(frame, header, path)
    except pd.errors.EmptyDataError as error:
        raise ValueError(f"Data file {path} is empty: it has no header or rows.") from error
    except pd.errors.ParserError as error:
        raise ValueError(
            f"Data file {path} could not be parsed as CSV with separator {sep!r}: "
            f"{str(error).strip()}. Pass the separator explicitly (sep=..., CLI --sep)."
        ) from error


def without_repeated_columns(frame: pd.DataFrame, header: pd.DataFrame, path: Path):
    """``frame`` with each column the header names more than once kept once.

    pandas renames a repeated name's copies (``name.1``), which would keep a copy of, say, the
    sensitive column as a feature. Copies with the same values as the first (COMPAS repeats
    ``decile_score`` and ``priors_count``) are dropped with a warning; copies that differ are
    refused, since no name says which one is meant.
    """
    names = [str(name).strip() for name in header.iloc[0]] if len(header) else []
    positions: dict[str, list[int]] = {}
    for position, name in enumerate(names):
        positions.setdefault(name, []).append(position)
    repeated = {name: where for name, where in positions.items() if len(where) > 1}
    if not repeated or len(names) != frame.shape[1]:
        return frame
    differing = sorted(
        name
        for name, (first, *copies) in repeated.items()
        if not all(frame.iloc[:, first].equals(frame.iloc[:, copy]) for copy in copies)
    )
    if differing:
        raise ValueError(
            f"The header of {path.name} names column(s) {differing} more than once (after "
            "trimming spaces) with different values; every column needs its own name: rename "
            "or remove the copies in the file."
        )
    warnings.warn(
        f"Data file {path.name} repeats column(s) {sorted(repeated)} with identical values; "
        "each is kept once.",
        UserWarning,
        stacklevel=5,
    )
    dropped = [copy for where in repeated.values() for copy in where[1:]]
    return frame.iloc[:, [i for i in range(frame.shape[1]) if i not in set(dropped)]]
