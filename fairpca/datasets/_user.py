"""Loading a user's own CSV or Parquet file as a :class:`Dataset`."""

from __future__ import annotations

import contextlib
import difflib
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._csv import LabelSearch, detect_separator, read_csv, without_repeated_columns
from ._dataset import Dataset, as_names
from ._files import READ_BUDGET_ENV, DataTooLargeError
from ._screen import _is_number, screen_columns, warn_screened

__all__ = ["LabelValuesWarning", "detect_separator", "load_user_data"]

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
_PARQUET_SUFFIXES = (".parquet", ".pq")
# A sensitive column of numbers with more distinct values than this is a measurement (age,
# income), not groups: each group costs fair PCA a dimension and needs rows of its own.
MAX_NUMERIC_GROUPS = 20


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(
            f"Data path {path} is a directory, not a file; pass the CSV/Parquet file inside it "
            "(a folder of Parquet files is audited on Dask: fairpca audit --dask-address)."
        )
    if not path.exists():
        raise FileNotFoundError(f"Data file not found: {path}. Check the path (cwd: {Path.cwd()}).")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"Data file {path} is not readable; check its permissions.")
    if path.stat().st_size == 0:
        raise ValueError(
            f"Data file {path} is empty (0 bytes); pass a file with a header and rows."
        )


def _read_parquet(path: Path, check_head: Callable) -> pd.DataFrame:
    """A Parquet file: its columns checked from the schema, then read in record batches of a
    bounded number of rows (one large row group too) with a running count of what they hold:
    their decoded size against the reading budget, their size as a table against the memory
    available (:class:`~fairpca.datasets._csv.TableTally`, as for CSV). The sizes the file's
    metadata declares can only refuse it early: a file of few bytes can decode to gigabytes
    whatever its metadata says."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .._memory import format_bytes, require, rows_per_block, size_setting
    from ._csv import TABLE_CHUNK_ROWS, TableTally
    from ._files import DEFAULT_READ_BUDGET

    def unreadable(error: Exception) -> ValueError:
        return ValueError(
            f"Data file {path} is not a readable Parquet file ({type(error).__name__}: {error})."
        )

    try:
        parquet = pq.ParquetFile(path)
        meta, names = parquet.metadata, [str(n).strip() for n in parquet.schema_arrow.names]
    except Exception as error:
        raise unreadable(error) from error
    check_head(pd.DataFrame(columns=names), True)
    declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    budget = size_setting(READ_BUDGET_ENV, DEFAULT_READ_BUDGET)
    raise_budget = f"raise {READ_BUDGET_ENV} if it is meant to be this large"
    if declared > budget:
        raise DataTooLargeError(
            f"Data file {path} is refused before reading: it holds {format_bytes(declared)} "
            f"uncompressed, more than {format_bytes(budget)}; {raise_budget}."
        )
    require(2 * declared, f"the table of data file {path.name} ({format_bytes(declared)}) "
            "and a copy", "Give a smaller file, free memory, or set FAIRPCA_MEMORY_LIMIT if "
            "more memory is available than the system reports.")  # fmt: skip
    tally = TableTally(path, f"{format_bytes(path.stat().st_size)} of Parquet")
    rows = rows_per_block(len(names), most=TABLE_CHUNK_ROWS)
    batches, decoded = [], 0
    try:
        for batch in parquet.iter_batches(batch_size=rows, use_pandas_metadata=True):
            decoded += batch.nbytes
            if decoded > budget:
                raise DataTooLargeError(
                    f"Data file {path} is refused while reading: its first "
                    f"{tally.rows + batch.num_rows} rows decode to {format_bytes(decoded)}, "
                    f"more than {format_bytes(budget)}; {raise_budget}."
                )
            tally.add(batch.to_pandas())  # its size as a table, counted as for CSV
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=None if batches else parquet.schema_arrow)
        del batches
        frame = table.to_pandas()  # as pandas.read_parquet converts (pandas metadata too)
    except (DataTooLargeError, MemoryError):
        raise
    except Exception as error:
        raise unreadable(error) from error
    return without_repeated_columns(frame, pd.DataFrame([list(frame.columns)]), path)


def _read_frame(path: Path, sep: str | None, check_head: Callable) -> pd.DataFrame:
    """The file as a table; ``check_head`` (see :func:`fairpca.datasets._csv.read_csv`) checks
    its first rows (a Parquet file's columns) before the rest is read."""
    name = path.name.lower()
    _check_file(path)
    if name.endswith(_CSV_SUFFIXES):
        frame = read_csv(path, sep, check_head)
    elif name.endswith(_PARQUET_SUFFIXES):
        frame = _read_parquet(path, check_head)
    else:
        raise ValueError(
            f"Unsupported file type for {path}; use CSV ({', '.join(_CSV_SUFFIXES)}) or Parquet "
            f"({', '.join(_PARQUET_SUFFIXES)})."
        )
    if len(frame) == 0:
        raise ValueError(f"Data file {path} has a header but no data rows.")
    frame.columns = [str(column).strip() for column in frame.columns]
    return frame


def _first_rows_check(path: Path, needed: list[str], label: str, positive_label: Any):
    """The check of a file's first rows (see :func:`fairpca.datasets._csv.read_csv`): every
    needed column is there and, unless the first rows are the whole file (the full checks then
    decide), ``positive_label`` occurs in the label column.

    When the first rows hold two or more label values but not ``positive_label``, the file is
    refused there: the label would need a further class that only starts after them. When they
    hold one value (a file sorted by label), the label column of the rest of the file is
    searched for it (:class:`~fairpca.datasets._csv.LabelSearch`), and the file refused if no
    row's label equals it.
    """

    def check(first_rows: pd.DataFrame, whole: bool) -> LabelSearch | None:
        _missing_columns(first_rows, needed, path)
        if positive_label is None or whole:
            return None
        values = first_rows[label]
        if (values == positive_label).any():
            return None
        seen = sorted(map(str, pd.unique(values.dropna())))
        where = f"the first {len(first_rows)} rows of label column {label!r}"
        if len(seen) != 1:
            raise ValueError(
                f"positive_label={positive_label!r} does not occur in {where}, which hold the "
                f"values {seen[:10]}; the rest of {path.name} was not read. Pass the label "
                "value of the positive class as it is written in the file."
            )

        def not_found():
            raise ValueError(
                f"positive_label={positive_label!r} does not occur in label column {label!r}: "
                f"{where} hold only {seen}, and no later row of {path.name} has it as its "
                "label. Pass the label value of the positive class as it is written in the "
                "file."
            )

        position = list(first_rows.columns).index(label)
        return LabelSearch(position, positive_label, _label_bytes(positive_label), not_found)

    return check


def _label_bytes(positive_label: Any) -> tuple[bytes, ...]:
    """Bytes one of which a row whose label reads as ``positive_label`` must hold: the text of
    a string label in UTF-8 or Latin-1; none for other labels (``1`` also reads ``1.0`` and
    ``True``) or a label with a quote (written doubled inside quotes)."""
    if not isinstance(positive_label, str) or not positive_label or '"' in positive_label:
        return ()
    forms = {positive_label.encode("utf-8")}
    with contextlib.suppress(UnicodeEncodeError):
        forms.add(positive_label.encode("latin-1"))
    return tuple(sorted(forms))


def _missing_columns(frame: pd.DataFrame, needed: list[str], path: Path) -> None:
    missing = [column for column in dict.fromkeys(needed) if column not in frame.columns]
    if not missing:
        return
    hints = []
    for column in missing:
        parts = [part.strip() for part in column.split(",")]
        if len(parts) > 1 and all(part in frame.columns for part in parts):
            hints.append(
                f"{column!r} names {len(parts)} columns: list them one by one (CLI: repeat "
                f"the option, e.g. --sensitive {parts[0]} --sensitive {parts[1]})."
            )
            continue
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


class LabelValuesWarning(UserWarning):
    """The label column holds more than two values: with ``positive_label`` every value but it
    is a negative (one versus the rest), which a stray value (a ``2`` among ``0`` / ``1``)
    would make silently."""


def _warn_other_labels(label: pd.Series, positive: pd.Series, positive_label: Any) -> None:
    """Say which label values count as negatives, with their rows, over every row."""
    counts = label[~positive].astype(str).value_counts()
    shown = ", ".join(f"{value!r} ({rows} rows)" for value, rows in counts.iloc[:10].items())
    more = f" and {len(counts) - 10} more" if len(counts) > 10 else ""
    warnings.warn(
        f"Label column {label.name!r} holds {len(counts) + 1} distinct values; with "
        f"positive_label={positive_label!r} each of the others counts as negative (y = 0): "
        f"{shown}{more}. If the label has two classes, correct or drop the rows with a "
        "value that is not one of them before loading.",
        LabelValuesWarning,
        stacklevel=4,
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
        if len(values) > 2:
            _warn_other_labels(label, y, positive_label)
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
        Label value coded ``y = 1`` (all others 0, with a :class:`LabelValuesWarning` naming
        them and their rows when there are more than one). Needed unless the label already is
        0/1 or boolean.
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
        naming a column twice; ``inf`` in a used numeric column; a CSV file mixing UTF-8
        with another encoding; :class:`~fairpca.datasets.DataTooLargeError` for a file over
        the reading budget or with an over-long line (``$FAIRPCA_MAX_READ_BYTES``,
        ``$FAIRPCA_MAX_LINE_BYTES``).
    fairpca.InsufficientMemoryError
        The table would not fit in the memory available (``$FAIRPCA_MEMORY_LIMIT``).

    Notes
    -----
    A CSV file's first rows are read and checked first (the columns named here, and
    ``positive_label``), so a wrong file fails before the rest is read, whatever its size; the
    encoding is decided on the whole file (UTF-8, else Latin-1 throughout with a warning); see
    :mod:`fairpca.datasets._csv`.
    """
    path = Path(path).expanduser()
    groups = as_names(sensitive, "sensitive")
    if not isinstance(label, str):
        raise TypeError(f"label must be a column name (str); got {label!r}.")
    chosen = None if features is None else as_names(features, "features")
    keep = as_names(keep, "keep") if keep else ()
    drop = as_names(drop, "drop") if drop else ()
    needed = [label, *groups, *(chosen or ()), *keep, *drop]
    frame = _read_frame(path, sep, _first_rows_check(path, needed, label, positive_label))
    _missing_columns(frame, needed, path)
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
        n_groups = values.nunique()
        if n_groups < 2:
            raise ValueError(
                f"Sensitive column {column!r} has a single value in all {len(values)} rows; "
                "fair PCA needs at least two groups. Pick a column that varies across rows."
            )
        if _is_number(values) and n_groups > MAX_NUMERIC_GROUPS:
            raise ValueError(
                f"Sensitive column {column!r} holds numbers with {n_groups} distinct values; "
                "a sensitive attribute is a few groups (fair PCA constrains each group's "
                "mean). Bin it into a column of groups (e.g. age under 25, 25-60, over 60) "
                "and pass that column."
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
    X = frame[kept]
    numeric = X.select_dtypes(include="number").dtypes  # bool is not "number"
    to_float = numeric.index[numeric != np.float64]
    X = X.astype(dict.fromkeys(to_float, np.float64)) if len(to_float) else X
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
