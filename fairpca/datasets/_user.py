"""Loading a user's own CSV or Parquet file as a :class:`Dataset`."""

from __future__ import annotations

import csv
import difflib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._dataset import Dataset, as_names
from ._files import READ_BUDGET_ENV, DataTooLargeError, check_text_bounds
from ._screen import screen_columns, warn_screened

__all__ = ["detect_separator", "load_user_data"]

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_SEPARATORS = ",;\t|"


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(
            f"Data path {path} is a directory, not a file; pass the CSV/Parquet file inside it."
        )
    if not path.exists():
        raise FileNotFoundError(f"Data file not found: {path}. Check the path (cwd: {Path.cwd()}).")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"Data file {path} is not readable; check its permissions.")
    if path.stat().st_size == 0:
        raise ValueError(
            f"Data file {path} is empty (0 bytes); pass a file with a header and rows."
        )


def _text_head(path: Path) -> tuple[str, str]:
    """The first 64 KiB of a plain CSV as text, and the encoding that decodes it."""
    head = _first_bytes(path)
    if b"\x00" in head:
        raise ValueError(
            f"Data file {path} is binary (it contains NUL bytes), not a text CSV; export the "
            "table as CSV (UTF-8) or Parquet."
        )
    try:
        return head.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as error:
        if error.start >= len(head) - 4:  # a multi-byte character cut at the 64 KiB boundary
            return head[: error.start].decode("utf-8"), "utf-8"
        return head.decode("latin-1"), "latin-1"


def _first_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(65536)


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


def _read_csv(path: Path, sep: str | None) -> pd.DataFrame:
    plain = path.name.lower().endswith(".csv")
    encoding = "utf-8"
    if plain:
        text, encoding = _text_head(path)
        if encoding != "utf-8":
            warnings.warn(
                f"Data file {path} is not UTF-8; read it as Latin-1. Re-save it as UTF-8 if "
                "characters look wrong.",
                UserWarning,
                stacklevel=4,
            )
        sep = sep or detect_separator(text)
    check_text_bounds(path)
    try:
        header = pd.read_csv(path, sep=sep or ",", encoding=encoding, header=None, nrows=1)
        frame = pd.read_csv(path, sep=sep or ",", encoding=encoding, low_memory=False)
        return _without_repeated_columns(frame, header, path)
    except pd.errors.EmptyDataError as error:
        raise ValueError(f"Data file {path} is empty: it has no header or rows.") from error
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        raise ValueError(
            f"Data file {path} could not be parsed as CSV with separator {sep!r}: "
            f"{str(error).strip()}. Pass the separator explicitly (sep=..., CLI --sep)."
        ) from error


def _without_repeated_columns(frame: pd.DataFrame, header: pd.DataFrame, path: Path):
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


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    from .._memory import format_bytes, size_setting
    from ._files import DEFAULT_READ_BUDGET

    try:
        meta = pq.ParquetFile(path).metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        budget = size_setting(READ_BUDGET_ENV, DEFAULT_READ_BUDGET)
        if size > budget:
            raise DataTooLargeError(
                f"Data file {path} is refused before reading: it holds {format_bytes(size)} "
                f"uncompressed, more than {format_bytes(budget)}; raise {READ_BUDGET_ENV} "
                "if it is meant to be this large."
            )
        frame = pd.read_parquet(path)
    except DataTooLargeError:
        raise
    except Exception as error:
        raise ValueError(
            f"Data file {path} is not a readable Parquet file ({type(error).__name__}: {error})."
        ) from error
    return _without_repeated_columns(frame, pd.DataFrame([list(frame.columns)]), path)


def _read_frame(path: Path, sep: str | None = None) -> pd.DataFrame:
    name = path.name.lower()
    _check_file(path)
    if name.endswith(_CSV_SUFFIXES):
        frame = _read_csv(path, sep)
    elif name.endswith(_PARQUET_SUFFIXES):
        frame = _read_parquet(path)
    else:
        raise ValueError(
            f"Unsupported file type for {path}; use CSV ({', '.join(_CSV_SUFFIXES)}) or Parquet "
            f"({', '.join(_PARQUET_SUFFIXES)})."
        )
    if len(frame) == 0:
        raise ValueError(f"Data file {path} has a header but no data rows.")
    frame.columns = [str(column).strip() for column in frame.columns]
    return frame


def _missing_columns(frame: pd.DataFrame, needed: list[str], path: Path) -> None:
    missing = [column for column in dict.fromkeys(needed) if column not in frame.columns]
    if not missing:
        return
    hints = []
    for column in missing:
        close = difflib.get_close_matches(column, list(frame.columns), n=3, cutoff=0.6)
        if close:
            hints.append(f"{column!r} -> did you mean {close}?")
    raise ValueError(
        f"Column(s) {missing} not found in {path}. "
        + (" ".join(hints) + " " if hints else "")
        + f"Available columns: {list(frame.columns)}."
    )


def _refuse_infinite(frame: pd.DataFrame) -> None:
    """Refuse ``inf`` / ``-inf`` in the numeric columns used (no scaler or fit handles them)."""
    numeric = frame.select_dtypes(include="number")
    counts = np.isinf(numeric.to_numpy(dtype=np.float64)).sum(axis=0) if numeric.size else []
    infinite = {name: int(n) for name, n in zip(numeric.columns, counts, strict=True) if n}
    if infinite:
        raise ValueError(
            f"Column(s) hold infinite values (inf or -inf; count per column): {infinite}. "
            "Replace them by numbers or leave those cells empty (missing values are imputed), "
            "or exclude the column with drop=[...] (CLI --drop NAME)."
        )


def _binarize(label: pd.Series, positive_label: Any) -> pd.Series:
    name = label.name
    values = pd.unique(label)
    if positive_label is not None:
        if not (label == positive_label).any():
            raise ValueError(
                f"positive_label={positive_label!r} does not occur in label column {name!r}; "
                f"its values include {sorted(map(str, values))[:10]}."
            )
        y = label == positive_label
        if y.all():
            raise ValueError(
                f"Every row of label column {name!r} equals positive_label={positive_label!r}; "
                "a binary task needs rows of both classes."
            )
        return y.astype("int64")
    if len(values) != 2:
        raise ValueError(
            f"Label column {name!r} has {len(values)} distinct value(s); a binary label with "
            "exactly 2 classes is needed. Pass positive_label=<value> to binarize it as "
            "(label == value) -> 1, everything else -> 0."
        )
    if set(values) <= {0, 1}:  # also covers booleans and 0.0/1.0
        return label.astype("int64")
    raise ValueError(
        f"Label column {name!r} has the classes {sorted(map(str, values))}, not 0/1; pass "
        "positive_label=<one of them> to say which class is coded 1."
    )


def load_user_data(
    path: str | os.PathLike[str],
    *,
    label: str,
    sensitive: str | Sequence[str],
    positive_label: Any = None,
    features: Sequence[str] | None = None,
    keep: Sequence[str] = (),
    drop: Sequence[str] = (),
    sep: str | None = None,
    screen: bool = True,
    leakage: bool = True,
) -> Dataset:
    """Load a CSV or Parquet file with a binary label and sensitive column(s).

    Parameters
    ----------
    path : str or path-like
        ``.csv`` (optionally compressed: ``.csv.gz``, ``.csv.bz2``, ``.csv.xz``,
        ``.csv.zip``), ``.parquet`` or ``.pq`` file with a header row.
    label : str
        Name of the label column.
    sensitive : str or sequence of str
        Name(s) of the sensitive attribute column(s); their values are the group labels. Each
        needs at least two distinct values and no missing values. They are removed from
        ``X``.
    positive_label : object, default=None
        Label value coded ``y = 1`` (all others 0). Needed unless the label already is 0/1
        or boolean.
    features : sequence of str or None, default=None
        Feature columns; ``None`` means every column except the label and the sensitive ones.
    keep, drop : sequence of str, default=()
        Columns to keep whatever the screening says, and columns to exclude.
    sep : str or None, default=None
        CSV separator; ``None`` detects it from the header (``, ; TAB |``).
    screen : bool, default=True
        Exclude identifier-like columns, free text, dates, categoricals with more than 100
        values and columns that alone predict the label (balanced accuracy >= 0.8), with one
        :class:`~fairpca.datasets.ScreeningWarning` naming each column and why (see
        :func:`~fairpca.datasets.screen_columns`). The reasons are kept in
        ``dataset.screened``.
    leakage : bool, default=True
        Apply the target-leakage rule of the screening here, on all rows. An audit passes
        ``False`` and applies :func:`~fairpca.datasets.leaking_columns` to its training rows
        only, so that no held-out label decides which features exist.

    Returns
    -------
    dataset : Dataset
        Numeric features as ``float64`` (missing values kept as NaN; the preprocessor of
        :func:`fairpca.datasets.make_preprocessor` imputes them), all others as they were read.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    IsADirectoryError
        The path is a directory.
    ValueError
        Empty, binary or unparsable file, unsupported file type, missing columns (close
        matches are named), a sensitive column with one value or missing values, missing
        label values, a label that is not binary, or no feature column left; a header
        naming a column twice; ``inf`` in a used numeric column;
        :class:`~fairpca.datasets.DataTooLargeError` for a file over the reading budget or
        with an over-long line (``$FAIRPCA_MAX_READ_BYTES``, ``$FAIRPCA_MAX_LINE_BYTES``).
    """
    path = Path(path).expanduser()
    frame = _read_frame(path, sep)
    groups = as_names(sensitive, "sensitive")
    if not isinstance(label, str):
        raise TypeError(f"label must be a column name (str); got {label!r}.")
    chosen = None if features is None else as_names(features, "features")
    keep = as_names(keep, "keep") if keep else ()
    drop = as_names(drop, "drop") if drop else ()
    _missing_columns(frame, [label, *groups, *(chosen or ()), *keep, *drop], path)
    overlap = [column for column in (chosen or ()) if column == label or column in groups]
    if label in groups or overlap:
        raise ValueError(
            "The label, sensitive and feature columns must be distinct; "
            f"label={label!r}, sensitive={list(groups)}, overlapping features={overlap}."
        )
    n_missing = int(frame[label].isna().sum())
    if n_missing:
        raise ValueError(
            f"Label column {label!r} has {n_missing} missing value(s) (NaN/empty); drop or fill "
            "those rows before loading."
        )
    y = _binarize(frame[label], positive_label)
    for column in groups:
        values = frame[column]
        if values.isna().any():
            raise ValueError(
                f"Sensitive column {column!r} has {int(values.isna().sum())} missing value(s); "
                "drop those rows or fill them with an explicit group such as 'unknown'."
            )
        if values.nunique() < 2:
            raise ValueError(
                f"Sensitive column {column!r} has a single value in all {len(values)} rows; "
                "fair PCA needs at least two groups. Pick a column that varies across rows."
            )
    kept = list(chosen) if chosen else [c for c in frame.columns if c != label and c not in groups]
    _refuse_infinite(frame[[*(c for c in kept if c not in drop), label]])
    screened: dict[str, str] = {}
    if screen:
        bad = [name for name in (*keep, *drop) if name not in kept]
        if bad:
            raise ValueError(
                f"keep/drop name {bad}, which are the label, a sensitive column or not among "
                "the chosen features."
            )
        labels = y.to_numpy() if leakage else None
        screening = screen_columns(frame[kept], labels, keep=keep, drop=drop)
        warn_screened(screening)
        kept, screened = screening.kept, screening.excluded
    if not kept:
        raise ValueError(
            f"{path} has no feature columns besides the label and sensitive ones"
            + (f" after screening ({screened})" if screened else "")
            + "; keep one with keep=[...] (CLI --keep NAME)."
        )
    numeric = frame[kept].select_dtypes(include="number").columns  # bool is not "number"
    X = frame[kept].astype(dict.fromkeys(numeric, np.float64))
    return Dataset(
        X=X.reset_index(drop=True),
        y=y.reset_index(drop=True).rename(label),
        sensitive=frame[list(groups)].reset_index(drop=True),
        name=path.name.split(".")[0],
        description=f"User data from {path.name}: {len(frame)} rows, label {label!r}.",
        positive_label=f"{label} == {positive_label!r}" if positive_label is not None else label,
        sensitive_encoding={column: f"raw values of column {column!r}" for column in groups},
        screened=screened,
    )
