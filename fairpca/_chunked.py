"""Chunk sources for streaming fits: arrays and memmaps, ``.npy`` files, Parquet, iterators.

Every source is an iterable of ``(X, sensitive_features, y)`` row chunks and knows its total
number of rows when it can (for the progress bar). ``.npy`` files and memmaps are read
through a read-only memory map whose processed pages are released from the process, so
resident memory stays at about one chunk whatever the file size (the operating system's
page cache is not part of the process).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterable, Iterator
from numbers import Integral
from pathlib import Path

import numpy as np
import pandas as pd

from ._memory import rows_per_block


def _take_rows(values, start: int, stop: int):
    if values is None:
        return None
    if isinstance(values, pd.DataFrame | pd.Series):
        return values.iloc[start:stop]
    return values[start:stop]


def _load_labels(values):
    """Labels or targets: array-like, or the path of a ``.npy`` file (loaded, it is small)."""
    if isinstance(values, str | os.PathLike) and str(values).endswith(".npy"):
        return np.load(values, allow_pickle=False)
    return values


def _check_aligned(values, n_rows: int, what: str) -> None:
    if values is not None and len(values) != n_rows:
        raise ValueError(
            f"{what} has {len(values)} rows but the data source has {n_rows}; pass one entry "
            "per row of X."
        )


class ArrayChunks:
    """Row chunks of an in-memory array, a ``numpy.memmap`` or a ``.npy`` file.

    Parameters
    ----------
    X : ndarray, numpy.memmap, str or path-like
        The data; a path names a ``.npy`` file (C order), read sequentially chunk by chunk.
    sensitive_features : array-like, DataFrame, path of a ``.npy`` file, or None
        Group labels, one row per row of ``X`` (sliced alongside ``X``).
    y : array-like, path of a ``.npy`` file, or None
        Targets (equal opportunity), sliced alongside ``X``.
    chunk_rows : int or None, default=None
        Rows per chunk; ``None`` gives about 64 MiB of features per chunk (float32 data
        stay float32, other data are read as float64).
    """

    def __init__(self, X, sensitive_features=None, y=None, *, chunk_rows=None):
        self.path = Path(X) if isinstance(X, str | os.PathLike) else None
        if self.path is not None:
            self.X = _map_npy(self.path)
            self.shape, self.dtype = self.X.shape, self.X.dtype
        else:
            if not hasattr(X, "shape") or len(X.shape) != 2:
                raise ValueError(
                    "ArrayChunks needs a 2-D array, numpy.memmap or the path of a .npy file; "
                    f"got {type(X).__name__}."
                )
            self.X, self.shape, self.dtype = X, X.shape, X.dtype
        self.n_rows = int(self.shape[0])
        self.sensitive_features = _load_labels(sensitive_features)
        self.y = _load_labels(y)
        _check_aligned(self.sensitive_features, self.n_rows, "sensitive_features")
        _check_aligned(self.y, self.n_rows, "y")
        if chunk_rows is not None and (not isinstance(chunk_rows, Integral) or chunk_rows < 1):
            raise ValueError(f"chunk_rows must be a positive int; got {chunk_rows!r}.")
        itemsize = np.dtype(self.dtype).itemsize if np.dtype(self.dtype).kind == "f" else 8
        self.chunk_rows = chunk_rows or rows_per_block(self.shape[1], itemsize)

    def __iter__(self) -> Iterator[tuple]:
        for start in range(0, self.n_rows, self.chunk_rows):
            stop = min(start + self.chunk_rows, self.n_rows)
            block = np.asarray(self.X[start:stop])
            yield (
                block,
                _take_rows(self.sensitive_features, start, stop),
                _take_rows(self.y, start, stop),
            )
            _release_pages(self.X, block)


def _release_pages(X, block: np.ndarray) -> None:
    """Drop the pages of a processed block of a read-only memmap from this process.

    The pages stay in the operating system's page cache; without this, every page of the file
    that was read would count towards the resident memory of the process.
    """
    mapping = getattr(X, "_mmap", None)
    if not isinstance(X, np.memmap) or X.mode != "r" or mapping is None or block.size == 0:
        return
    base = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    page = mmap.PAGESIZE
    start = (block.ctypes.data - base) // page * page
    stop = block.ctypes.data - base + block.nbytes
    try:
        mapping.madvise(mmap.MADV_DONTNEED, start, stop - start)
    except (AttributeError, OSError, ValueError):  # platform without madvise
        return


def _map_npy(path: Path) -> np.memmap:
    """Read-only memory map of a ``.npy`` file, checked and advised for a sequential pass.

    Blocks are read straight from the page cache (no copy into process buffers); each
    processed block's pages are released from the process (:func:`_release_pages`), so
    resident memory stays at about one chunk whatever the file size.
    """
    shape, dtype, offset = _npy_layout(path)
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if path.stat().st_size < expected:
        raise ValueError(
            f"{path} ended early: the file is truncated ({path.stat().st_size} bytes, the "
            f"header announces {expected})."
        )
    if 0 in shape:
        return np.zeros(shape, dtype)
    X = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    with contextlib.suppress(AttributeError, OSError, ValueError):  # platform without madvise
        X._mmap.madvise(mmap.MADV_SEQUENTIAL)
    return X


def _npy_layout(path: Path) -> tuple[tuple, np.dtype, int]:
    """Shape, dtype and data offset of a C-ordered ``.npy`` file (header only)."""
    if not path.exists():
        raise FileNotFoundError(f"No .npy file at {path}.")
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
        offset = handle.tell()
    if len(shape) != 2 or fortran_order or dtype.hasobject:
        raise ValueError(
            f"{path} holds a {len(shape)}-D{' Fortran-ordered' if fortran_order else ''} array "
            f"of {dtype}; streaming needs a 2-D C-ordered numeric array (save it with "
            "np.save(path, np.ascontiguousarray(X)))."
        )
    return shape, dtype, offset


class ParquetChunks:
    """Record batches of a Parquet file or dataset directory, read with ``pyarrow.dataset``.

    Parameters
    ----------
    path : str or path-like
        A Parquet file or a directory of Parquet files.
    sensitive_columns : str or list of str
        Columns holding the sensitive attributes.
    label_column : str or None, default=None
        Column holding ``y`` (equal opportunity).
    feature_columns : list of str or None, default=None
        The feature columns; ``None`` takes every other column.
    chunk_rows : int or None, default=None
        Rows per batch; ``None`` gives about 64 MiB of float64 features per batch.
    """

    def __init__(
        self,
        path,
        *,
        sensitive_columns,
        label_column=None,
        feature_columns=None,
        chunk_rows=None,
    ):
        import pyarrow.dataset as ds

        self.dataset = ds.dataset(str(path), format="parquet")
        names = list(self.dataset.schema.names)
        self.sensitive_columns = (
            [sensitive_columns] if isinstance(sensitive_columns, str) else list(sensitive_columns)
        )
        self.label_column = label_column
        others = set(self.sensitive_columns) | ({label_column} if label_column else set())
        self.feature_columns = (
            [c for c in names if c not in others]
            if feature_columns is None
            else list(feature_columns)
        )
        wanted = self.feature_columns + sorted(others)
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ValueError(
                f"Column(s) {missing} are not in the Parquet data at {path}; available: {names}."
            )
        for fragment in self.dataset.get_fragments():  # each file's own columns (its footer)
            lacking = [c for c in wanted if c not in fragment.physical_schema.names]
            if lacking:
                raise ValueError(
                    f"The Parquet file {fragment.path} lacks column(s) {lacking} that other "
                    f"files of {path} have; write every file with the same columns, or pass "
                    "feature_columns= the columns they share."
                )
        self.n_rows = self.dataset.count_rows()
        self.chunk_rows = chunk_rows or rows_per_block(len(self.feature_columns))

    def __iter__(self) -> Iterator[tuple]:
        columns = self.feature_columns + self.sensitive_columns
        if self.label_column:
            columns.append(self.label_column)
        for batch in self.dataset.to_batches(columns=columns, batch_size=self.chunk_rows):
            if batch.num_rows == 0:
                continue
            frame = batch.to_pandas()
            y = frame[self.label_column].to_numpy() if self.label_column else None
            yield frame[self.feature_columns], frame[self.sensitive_columns], y


class IterableChunks:
    """An iterable of ``(X, sensitive_features)`` or ``(X, sensitive_features, y)`` tuples."""

    def __init__(self, chunks: Iterable, n_rows: int | None = None):
        self.chunks = chunks
        self.n_rows = n_rows

    def __iter__(self) -> Iterator[tuple]:
        for i, chunk in enumerate(self.chunks):
            if not isinstance(chunk, tuple | list) or len(chunk) not in (2, 3):
                raise TypeError(
                    f"Chunk {i} is a {type(chunk).__name__}; every chunk must be a tuple "
                    "(X, sensitive_features) or (X, sensitive_features, y)."
                )
            X, sensitive = chunk[0], chunk[1]
            yield X, sensitive, chunk[2] if len(chunk) == 3 else None


SOURCES = (ArrayChunks, ParquetChunks, IterableChunks)


def as_chunk_source(
    source, sensitive_features=None, y=None, *, chunk_rows=None, sensitive_columns=None
):
    """Wrap what the user gave as a chunk source.

    ``source`` may be one of the source classes, an array / ``numpy.memmap``, the path of a
    ``.npy`` file, a Parquet file or directory (sensitive attributes from
    ``sensitive_columns``, ``y`` the name of the label column), or an iterable of chunk tuples.
    """
    if isinstance(source, SOURCES):
        if sensitive_features is not None or y is not None:
            raise ValueError(
                "sensitive_features and y belong to the chunk source itself; pass them when "
                "building the source, not again to the fit."
            )
        return source
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.suffix == ".npy":
            return ArrayChunks(path, sensitive_features, y, chunk_rows=chunk_rows)
        if path.is_dir() or path.suffix in (".parquet", ".pq"):
            if sensitive_features is not None:
                raise ValueError(
                    "For Parquet data the sensitive attributes are columns: set "
                    "FairPCA(sensitive_columns=[...]) instead of sensitive_features."
                )
            if not sensitive_columns:
                raise ValueError(
                    "Fitting on Parquet data needs FairPCA(sensitive_columns=[...]) naming the "
                    "columns that hold the sensitive attributes."
                )
            if y is not None and not isinstance(y, str):
                raise TypeError("For Parquet data, y must be the name of the label column.")
            return ParquetChunks(
                path, sensitive_columns=sensitive_columns, label_column=y, chunk_rows=chunk_rows
            )
        raise ValueError(
            f"Cannot stream {path}: give a .npy file, a Parquet file (.parquet) or a directory "
            "of Parquet files."
        )
    if hasattr(source, "shape") and hasattr(source, "dtype"):
        return ArrayChunks(source, sensitive_features, y, chunk_rows=chunk_rows)
    if isinstance(source, Iterable):
        if sensitive_features is not None or y is not None:
            raise ValueError(
                "An iterable of chunks carries its own sensitive features (and y): yield "
                "(X, sensitive_features[, y]) tuples instead of passing them to the fit."
            )
        return IterableChunks(source)
    raise TypeError(
        f"Cannot stream a {type(source).__name__}: give an array or numpy.memmap, the path of "
        "a .npy or Parquet file, or an iterable of (X, sensitive_features[, y]) tuples."
    )


def progress(chunks: Iterable[tuple], total_rows: int | None, enabled: bool, description: str):
    """Yield ``chunks`` while showing rows processed (rich if installed, else tqdm, else none)."""
    if not enabled:
        yield from chunks
        return
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        yield from _tqdm_progress(chunks, total_rows, description)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total_rows)
        for chunk in chunks:
            yield chunk
            bar.advance(task, len(chunk[0]))


def _tqdm_progress(chunks, total_rows, description):
    try:
        from tqdm import tqdm
    except ImportError:
        yield from chunks
        return
    with tqdm(total=total_rows, desc=description, unit="rows") as bar:
        for chunk in chunks:
            yield chunk
            bar.update(len(chunk[0]))
