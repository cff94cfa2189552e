"""Fair PCA on Dask collections: statistics in one blockwise pass, reduced on the cluster.

Every row block (a ``dask.array`` block or a ``dask.dataframe`` partition) becomes the
sufficient statistics of :mod:`fairpca._streaming`; they are merged by a tree reduction on
the workers, so only the final d x d and group-sized statistics reach the client. Dask runs
on whatever scheduler is active: a ``distributed.Client`` (local or
``Client("tcp://scheduler:8786")``) when one exists, otherwise Dask's local threads.

Dask is an optional dependency (``pip install fairpca[dask]``); this module imports it only
when a Dask collection is actually given.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_array

from . import _streaming
from ._validation import check_magnitude

MERGE_FAN_IN = 8


def is_dask_collection(obj) -> bool:
    """Whether ``obj`` is a Dask collection, without importing Dask."""
    return obj is not None and callable(getattr(type(obj), "__dask_graph__", None))


def is_dask_frame(obj) -> bool:
    return is_dask_collection(obj) and hasattr(obj, "npartitions") and hasattr(obj, "columns")


def _is_dask_frame_like(obj) -> bool:
    """A Dask DataFrame or Series (row partitions, no ``chunks``)."""
    return is_dask_collection(obj) and hasattr(obj, "npartitions") and not hasattr(obj, "chunks")


def feature_meta(X, sensitive_columns: list):
    """An empty frame/array with the feature columns and dtypes of ``X`` (for validation)."""
    if is_dask_frame(X):
        meta = X._meta
        missing = [c for c in sensitive_columns if c not in meta.columns]
        if missing:
            raise ValueError(
                f"sensitive_columns {missing} are not columns of X; available columns: "
                f"{[str(c) for c in meta.columns]}."
            )
        return meta.drop(columns=sensitive_columns)
    if sensitive_columns:
        raise TypeError(
            "sensitive_columns names columns of a DataFrame, but X is a "
            f"{type(X).__name__}; pass a dask DataFrame, or pass the attributes as "
            "fit(X, sensitive_features=...) and leave sensitive_columns=None."
        )
    if len(X.shape) != 2:
        raise ValueError(f"Expected a 2D dask array, got an array of shape {X.shape}.")
    return np.empty((0, X.shape[1]), dtype=X.dtype)


def _row_chunks(X) -> tuple[int, ...]:
    """Rows per block of ``X`` (computed when Dask does not know them)."""
    if _is_dask_frame_like(X):
        return tuple(int(n) for n in X.map_partitions(len).compute())
    chunks = X.chunks[0]
    if any(np.isnan(c) for c in chunks):
        chunks = X.compute_chunk_sizes().chunks[0]
    return tuple(int(c) for c in chunks)


def _blocks_like(values, X, row_chunks):
    """Split ``values`` (None, in-memory or Dask) into one piece per row block of ``X``."""
    n_blocks = len(row_chunks)
    if values is None:
        return [None] * n_blocks
    if is_dask_collection(values):
        frames = _is_dask_frame_like(values) and _is_dask_frame_like(X)
        if frames and values.npartitions == X.npartitions:
            return list(values.to_delayed())
        if _is_dask_frame_like(values):  # align by position, as for in-memory labels
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Dask currently has limited support for conv")
                values = values.to_dask_array(lengths=True)
        if values.shape[0] != sum(row_chunks):
            raise ValueError(
                f"sensitive_features/y have {values.shape[0]} rows but X has "
                f"{sum(row_chunks)}; pass one entry per row of X."
            )
        chunks = (row_chunks, *((s,) for s in values.shape[1:]))
        return list(values.rechunk(chunks).to_delayed().ravel())
    if len(values) != sum(row_chunks):
        raise ValueError(
            f"sensitive_features/y have {len(values)} rows but X has {sum(row_chunks)}; pass "
            "one entry per row of X."
        )
    bounds = np.concatenate([[0], np.cumsum(row_chunks)])
    take = (
        (lambda a, b: values.iloc[a:b])
        if isinstance(values, pd.Series | pd.DataFrame)
        else (lambda a, b: np.asarray(values)[a:b])
    )
    return [take(a, b) for a, b in itertools.pairwise(bounds)]


def block_statistics(spec, X, sensitive, y, sensitive_columns):
    """Statistics of one row block (runs on a worker); validates the block first."""
    if sensitive_columns:
        sensitive = X[sensitive_columns]
        X = X.drop(columns=sensitive_columns)
    if len(X) == 0:
        return _streaming.FairStatistics(spec)
    X = check_array(X, dtype=[np.float64, np.float32], ensure_min_samples=1)
    check_magnitude(X)
    if X.shape[1] != spec.n_features:
        raise ValueError(
            f"A block of X has {X.shape[1]} features but the collection has {spec.n_features}."
        )
    return _streaming.chunk_statistics(spec, X, sensitive, y)


def fit_statistics(spec, X, sensitive_features, y, sensitive_columns):
    """Sufficient statistics of a Dask collection, computed and reduced on the cluster."""
    import dask
    from dask import delayed

    if not _is_dask_frame_like(X) and len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})  # whole rows per block
    row_chunks = _row_chunks(X) if (sensitive_features is not None or y is not None) else None
    blocks = list(X.to_delayed()) if _is_dask_frame_like(X) else list(X.to_delayed().ravel())
    if row_chunks is None:
        row_chunks = (0,) * len(blocks)
    sensitive_blocks = _blocks_like(sensitive_features, X, row_chunks)
    y_blocks = _blocks_like(y, X, row_chunks)
    statistic = delayed(block_statistics, pure=True)
    parts = [
        statistic(spec, xb, sb, yb, sensitive_columns)
        for xb, sb, yb in zip(blocks, sensitive_blocks, y_blocks, strict=True)
    ]
    merge = delayed(_streaming.merge_all, pure=True)
    while len(parts) > 1:  # tree reduction on the workers, fan-in MERGE_FAN_IN
        parts = [merge(parts[i : i + MERGE_FAN_IN]) for i in range(0, len(parts), MERGE_FAN_IN)]
    (stats,) = dask.compute(parts[0])
    return stats


def transform(estimator, X):
    """``estimator.transform`` mapped over the row blocks of a Dask collection (lazy)."""
    names = estimator.get_feature_names_out()
    if is_dask_frame(X):
        meta = pd.DataFrame({name: pd.Series(dtype=estimator.components_.dtype) for name in names})
        return X.map_partitions(_transform_partition, estimator, names, meta=meta)
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    dtype = np.result_type(X.dtype, estimator.components_.dtype)
    return X.map_blocks(
        _transform_block, estimator, dtype=dtype, chunks=(X.chunks[0], (len(names),))
    )


def _transform_block(block, estimator):
    return np.asarray(estimator.transform(block))


def _transform_partition(partition, estimator, names):
    return pd.DataFrame(
        np.asarray(estimator.transform(partition)), index=partition.index, columns=names
    )
