"""Reading a user's CSV file (plain or compressed) within bounds.

In this order, so that a wrong file fails in seconds whatever its size:

1. **The first rows** (``HEAD_ROWS``, at most ``HEAD_BYTES`` of text) are read and parsed, and
   the caller checks them (the columns it needs, the positive label) before anything else.
2. **One streaming pass** over the whole file checks the reading bounds (size, line length;
   :func:`~fairpca.datasets._files.scan_text`), decides the encoding on every byte (UTF-8 if the
   whole file is valid UTF-8, else Latin-1 for the whole file with a warning naming the first
   byte that is not UTF-8; a file mixing valid UTF-8 characters with such bytes is refused, as
   either reading would split a label such as ``Français`` into two groups) and looks for the
   text of a positive label the first rows did not hold. If the text occurs, the label column
   alone is then streamed (:func:`find_in_column`) until a row's label equals it: the text in
   another column (``yes`` under ``married``) is no label.
3. **A memory bound**, twice. First an estimate: the table's size, projected from the first
   rows' parsed size per byte of text, times ``PARSE_FACTOR`` for the parser's working copies,
   must fit in the memory available (``MemAvailable``, or ``FAIRPCA_MEMORY_LIMIT``). The first
   rows may not be like the rest (long decimals first, single digits after parse to ten times
   more per byte), so the estimate only refuses early; the bound is the parse itself
   (:func:`read_table_bounded`): the file is parsed ``TABLE_CHUNK_ROWS`` rows at a time with
   a running total of the parsed size, and refused as soon as what the parse holds would not
   fit.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .._memory import (
    BLOCK_BYTES,
    LIMIT_VARIABLE,
    InsufficientMemoryError,
    available_bytes,
    format_bytes,
    require,
    size_setting,
)
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
# A chunked parse holds the chunks read so far and, at the end, their concatenation (twice the
# table), beside one chunk's parser working copies (PARSE_FACTOR times a chunk).
CONCAT_FACTOR = 2
TABLE_CHUNK_ROWS = 100_000
LABEL_CHUNK_ROWS = 200_000
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
            f"Data file {path} mixes two text encodings: it holds UTF-8 characters (the first "
            f"on line {line_number(path, utf8)}, byte offset {utf8}) and bytes that are not "
            f"UTF-8 (the first on line {line_number(path, other)}, byte offset {other}), so a "
            "label written both ways would become two groups. Re-save the whole file as UTF-8."
        )
    warnings.warn(
        f"Data file {path} is not UTF-8 (byte offset {scan.first_invalid}, on line "
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


@dataclass(frozen=True)
class LabelSearch:
    """A label value the first rows of a file lack, to be looked for in the rest.

    ``position`` is the label column's position, ``needles`` byte strings one of which a row
    holding ``value`` must contain (none: the column is streamed anyway), and ``not_found``
    raises the error for a file without it.
    """

    position: int
    value: Any
    needles: tuple[bytes, ...]
    not_found: Callable[[], None]


def find_in_column(path: Path, sep: str, encoding: str, search: LabelSearch) -> None:
    """Stream the label column alone, ``LABEL_CHUNK_ROWS`` rows at a time, until a row's label
    equals ``search.value``; call ``search.not_found()`` when none does. Memory is one chunk
    of one column, and the search stops at the first chunk that holds the value."""
    reader = pd.read_csv(
        path, sep=sep, encoding=encoding, usecols=[search.position],
        chunksize=LABEL_CHUNK_ROWS, low_memory=False,
    )  # fmt: skip
    with reader:
        for chunk in reader:
            if (chunk.iloc[:, 0] == search.value).any():
                return
    search.not_found()


def _memory_budget() -> int | None:
    """The memory a parse may use, taken once before it starts (what the system reports
    falls as the parse allocates); None when unknown."""
    budget = available_bytes()
    if budget is None or os.environ.get(LIMIT_VARIABLE):
        return budget
    return max(budget, BLOCK_BYTES)  # as fairpca._memory.fits: a block always fits


class TableTally:
    """What a table read chunk by chunk holds, counted against the memory available (module
    docstring, step 3); a CSV parse and a Parquet read (``fairpca.datasets._user``) share it.

    ``source`` says what the file is (``"1.0 MB of text"``), ``fix`` what to do instead.
    What the read holds is counted, not estimated: the in-memory size of the chunks so far
    (their concatenation doubles it, ``CONCAT_FACTOR``) plus the working copies of the
    current chunk (``PARSE_FACTOR``).
    """

    def __init__(self, path: Path, source: str, fix: str = "Give a smaller file"):
        self.path, self.source, self.fix = path, source, fix
        self.budget = _memory_budget()
        self.total = self.rows = 0

    def add(self, chunk: pd.DataFrame) -> None:
        """Count ``chunk``; :class:`InsufficientMemoryError` once the read would not fit."""
        size = int(chunk.memory_usage(deep=True, index=False).sum())
        self.total, self.rows = self.total + size, self.rows + len(chunk)
        need = CONCAT_FACTOR * self.total + PARSE_FACTOR * size
        if self.budget is not None and need > self.budget:
            raise InsufficientMemoryError(
                f"Not enough memory: the table of data file {self.path.name} ({self.source}) "
                f"needs more than {format_bytes(need)}: its first {self.rows} rows parse to "
                f"{format_bytes(self.total)}, held twice while the table is put together, but "
                f"only {format_bytes(self.budget)} are available (MemAvailable, or "
                f"{LIMIT_VARIABLE} when set). {self.fix}, free memory, or set "
                f"{LIMIT_VARIABLE} if more memory is available than the system reports."
            )


def read_table_bounded(path: Path, sep: str, encoding: str, n_bytes: int) -> pd.DataFrame:
    """Parse the whole file ``TABLE_CHUNK_ROWS`` rows at a time, refusing it as soon as the
    parse would hold more than the memory available (:class:`TableTally`; module docstring,
    step 3). A column whose type differs between chunks (numbers in one, text in another) is
    read again whole, so that its type is the one a single parse of the file gives.
    """
    fix = "Give a smaller file or a Parquet file"
    tally, chunks = TableTally(path, f"{format_bytes(n_bytes)} of text", fix), []
    reader = pd.read_csv(
        path, sep=sep, encoding=encoding, chunksize=TABLE_CHUNK_ROWS, low_memory=False
    )
    with reader:
        for chunk in reader:
            tally.add(chunk)
            chunks.append(chunk)
    if len(chunks) == 1:
        return chunks[0]
    mixed = [
        position
        for position in range(chunks[0].shape[1])
        if len({c.dtypes.iloc[position] for c in chunks}) > 1
        and not all(c.dtypes.iloc[position].kind in "iuf" for c in chunks)  # ints, floats
    ]
    frame = pd.concat(chunks, ignore_index=True)
    del chunks
    for position in mixed:
        whole = pd.read_csv(path, sep=sep, encoding=encoding, usecols=[position], low_memory=False)
        frame.isetitem(position, whole.iloc[:, 0])
    return frame


def read_csv(
    path: Path, sep: str | None, check_head: Callable[[pd.DataFrame, bool], LabelSearch | None]
) -> pd.DataFrame:
    """Read a CSV file in the three steps of the module docstring.

    ``check_head(first_rows, whole)`` raises for what the first rows already show is wrong,
    and returns the :class:`LabelSearch` of a label value they lack (None if none).
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
        search = check_head(first_rows, whole)
        scan = scan_text(path, search.needles if search else ())
        if search and search.needles and not scan.found:
            search.not_found()
        encoding = decided_encoding(path, scan)
        require_table_memory(path, head, first_rows, scan.n_bytes)
        if search:
            find_in_column(path, sep, encoding, search)
        header = pd.read_csv(path, sep=sep, encoding=encoding, header=None, nrows=1)
        frame = read_table_bounded(path, sep, encoding, scan.n_bytes)
        return without_repeated_columns(frame, header, path)
    except pd.errors.EmptyDataError as error:
        raise ValueError(f"Data file {path} is empty: it has no header or rows.") from error
    except pd.errors.ParserError as error:
        raise ValueError(
            f"Data file {path} could not be parsed as CSV with separator {sep!r}: "
            f"{str(error).strip()}. Mend that line (a value holding the separator must be in "
            f"quotes), or pass the file's separator if it is not {sep!r} (sep=..., CLI --sep)."
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
