"""Checks the command line runs before any Prefect server starts.

A bad input must end within seconds with one message that names the problem, the value and
the fix: the data source loads (file, encoding, separator, columns, label, groups), the
target dimension fits the screened and encoded data, the split leaves every part rows and
every sensitive attribute two comparable groups in the validation and test parts, one-hot
names are unique, the chosen variants fit in time and memory (two run at once), and the
output directory is writable with no audit or link of the same name in it. Nothing here
starts a Prefect server or touches MLflow. The split made here (loaded, split and screened
as the audit does) is the one the flow audits: the command reads its data once.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from fairpca.tasks.data import Split


class PreflightError(ValueError):
    """An input that would make the audit fail; the message says what, which value, the fix."""


def encoded_width(encoder, X) -> int:
    """The width of ``encoder`` fitted on ``X``, each of its transformers fitted alone on its
    columns: ``ColumnTransformer.fit`` is its ``fit_transform``, whose dense one-hot output of
    every row is the largest allocation of the check on a large table (850 MB at 1,000,000
    rows of 106 columns); a transformer's ``fit`` encodes nothing."""
    from sklearn.base import clone

    width = 0
    for _, transformer, columns in encoder.transformers:
        if len(columns):
            width += len(clone(transformer).fit(X[columns]).get_feature_names_out())
    return width


def _check_k(config, split) -> str | None:
    """The k every variant will be fitted with, decided exactly as the audit decides it (the
    same split, the same screening on the training rows, the same encoder; Algorithm 1/2 and
    Sec. 3.5 give ``k <= d - r``): a clear error when it cannot fit, else the note saying
    which k."""
    from fairpca.tasks.represent import make_preprocessor, resolve_k

    encoder = make_preprocessor(split.X_train, config.representation.min_category_count)
    width = encoded_width(encoder, split.X_train)
    # columns worth keeping: those screened for their many categories (not identifiers,
    # dates, free text, empty or leaking ones)
    wide = [
        entry["column"]
        for entry in split.screening
        if entry["action"] == "excluded" and "distinct categories" in entry["rule"]
    ]
    more = f" or keep screened columns (--keep; screened: {wide})" if wide else ""
    try:
        k = resolve_k(
            config.representation.k, width, split.s_train, list(config.representation.variants)
        )
    except ValueError as error:
        raise PreflightError(f"{str(error).rstrip('.')}{more}.") from None
    return k["note"] if k["requested"] is None else None


MAX_FIT_SECONDS_ENV = "FAIRPCA_MAX_FIT_SECONDS"
DEFAULT_MAX_FIT_SECONDS = 600.0
# Exact Fair PCA-S (Sec. 3.6, always the covariance route): its d x d eigendecompositions and
# products take about 3e-9 * d**3 seconds on one core of a 2-core reference machine
# (d = 800: 1.6 s; d = 10,000: about 50 minutes). The other linear variants take the
# randomized route on wide data (k much smaller than d), which is linear in d.
SECONDS_PER_CUBED_WIDTH = 3e-9


def _undefined_difference(y: np.ndarray, groups: np.ndarray, min_size: int) -> str | None:
    """Why the DP or EO difference of one attribute would be undefined on these rows."""
    labels, codes, sizes = np.unique(groups.astype(str), return_inverse=True, return_counts=True)
    large = sizes >= min_size
    if large.sum() < 2:
        return (
            f"only {int(large.sum())} of its {len(labels)} groups have at least "
            f"--min-group-size {min_size} rows, so its DP and EO differences are undefined"
        )
    positives = np.bincount(codes, weights=y == 1, minlength=len(labels))
    if (large & (positives > 0)).sum() < 2:
        return (
            "fewer than two of its groups large enough to report have rows of label 1, so "
            "its EO difference (difference of true positive rates) is undefined"
        )
    return None


def _check_groups(config, split) -> None:
    """Each sensitive attribute keeps two reportable groups in the validation and test parts."""
    parts = ("train", "validation", "test")
    y = np.concatenate([getattr(split, f"y_{part}") for part in parts])
    groups = pd.concat([getattr(split, f"s_{part}") for part in parts])
    min_size = config.evaluation.min_group_size
    for name in parts[1:]:
        y_part, s_part = getattr(split, f"y_{name}"), getattr(split, f"s_{name}")
        for column in s_part.columns:
            why = _undefined_difference(y_part, s_part[column].to_numpy(), min_size)
            if why is None:
                continue
            present = s_part[column].unique()
            if len(present) < 2:  # no --min-group-size can help
                raise PreflightError(
                    f"in the {name} part ({len(y_part)} rows) sensitive column {column!r} holds "
                    f"one group only ({str(present[0])!r}): its other groups have too few rows "
                    "to reach every part. Merge or drop the rows of its smallest groups, or "
                    "pass another --sensitive column."
                )
            labels = pd.Series(y == 1).groupby(groups[column].astype(str).to_numpy())
            if labels.nunique().eq(1).all():  # each group holds rows of one label value
                raise PreflightError(
                    f"sensitive column {column!r} determines the label: each of its groups "
                    f"holds rows of one label value only, so in the {name} part {why}. "
                    "Pass a --sensitive column that is not a copy of the label."
                )
            raise PreflightError(
                f"in the {name} part ({len(y_part)} rows) sensitive column {column!r}: {why}. "
                "Pass more rows (more data, --n-validation, --n-test), a smaller "
                "--min-group-size, or another --sensitive column."
            )


def _encoded_width(config, X) -> int:
    """Estimated encoded width without fitting: one column per numeric feature, and per
    categorical its values of at least ``min_category_count`` rows plus a pooled one, at most
    the one-hot cap. One-hot names ``<column>_<value>`` must not collide across columns
    (``a_b`` = ``c`` and ``a`` = ``b_c`` are both ``a_b_c``)."""
    from fairpca.datasets import split_feature_kinds
    from fairpca.datasets._preprocess import MAX_CATEGORIES

    categorical, numeric = split_feature_kinds(X)
    width, owner = len(numeric), {}
    for column in categorical:
        counts = X[column].astype(str).value_counts()
        frequent = counts.index[counts >= config.representation.min_category_count]
        width += min(len(frequent) + int(len(frequent) < len(counts)), MAX_CATEGORIES)
        for value in frequent:
            name = f"{column}_{value}"
            first = owner.setdefault(name, (column, value))
            if first[0] != column:
                raise PreflightError(
                    f"column {first[0]!r} = {first[1]!r} and column {column!r} = {value!r} "
                    f"would both be encoded as the feature {name!r}; rename one of the two "
                    f"columns in the file, or exclude one with --drop {column}."
                )
    return width


def _check_cost(config, dataset, width: int) -> None:
    """The loaded table, its parts and its ``width`` encoded columns must fit in memory (the
    audit reads every row by default; else a clear error naming the Dask route), and the
    chosen variants must fit in time (Fair PCA-S is cubic in the width) and in memory,
    counting the fits that run at once."""
    from fairpca import _memory
    from fairpca.tasks.data import part_sizes, split_options
    from fairpca.tasks.represent import DEFAULT_MAX_K

    table = sum(frame.memory_usage(deep=True).sum() for frame in (dataset.X, dataset.sensitive))
    need = 2 * table + ENCODED_COPIES * _memory.FLOAT_BYTES * dataset.n_samples * width
    what = (
        f"the audit of {dataset.n_samples} rows ({_memory.format_bytes(table)} as loaded, "
        f"{width} encoded columns)"
    )
    _memory.require(need, what, DASK_FIX)
    try:
        limit = float(os.environ.get(MAX_FIT_SECONDS_ENV) or DEFAULT_MAX_FIT_SECONDS)
    except ValueError as error:
        raise PreflightError(
            f"{MAX_FIT_SECONDS_ENV}={os.environ[MAX_FIT_SECONDS_ENV]!r} is not a number of "
            "seconds; set it to e.g. 600, or unset it."
        ) from error
    fewer_columns = "fewer columns (--drop NAME, or drop them from the file)"
    fix = (
        "pass --variants without fair_pca_s (pca, fair_pca and fair_pca_eo take a randomized "
        f"route on wide data), or {fewer_columns}"
    )
    seconds = SECONDS_PER_CUBED_WIDTH * width**3
    if "fair_pca_s" in config.representation.variants and seconds > limit:
        raise PreflightError(
            f"the data encode to {width} feature columns; Fair PCA-S solves exact "
            f"{width} x {width} eigenproblems, estimated at {seconds / 60:.0f} minutes, over "
            f"the limit of {limit:g} s ({MAX_FIT_SECONDS_ENV}): {fix}."
        )
    n_train = part_sizes(dataset.n_samples, **split_options(config.split))[0]  # >= 2 rows each
    n_groups = int(dataset.sensitive.nunique().sum())
    k = config.representation.k or DEFAULT_MAX_K  # the default k is at most this
    size = k + n_groups + 10  # the randomized route's range (10 oversamples)
    sizes = {
        v: _memory.randomized_bytes(n_train, width, size) for v in config.representation.variants
    }
    if "fair_pca_s" in sizes:
        sizes["fair_pca_s"] = _memory.covariance_bytes(width, n_groups)
    _memory.require_parallel(sizes, f"Pass fewer --variants, or {fewer_columns}. {DASK_FIX}")


# The audit's working set: the table and its three parts (a copy), the encoded training and
# validation rows, and one transform of a part at a time during the refits and the reference
# mitigations: measured at 1,000,000 Adult-like rows (105 encoded columns, 840 MB per copy of
# every row) as 2.0 GB peak RSS (about 1.8 copies above the interpreter and its libraries);
# 3 copies keep a margin.
ENCODED_COPIES = 3
DASK_FIX = (
    "Audit it on a Dask cluster, where the table stays in partitions: --dask-address "
    "tcp://HOST:8786 with a Parquet folder or CSV parts as --data; or cap the rows with "
    "--n-train, --n-validation and --n-test."
)


def _check_output_dir(base: Path, run_name: str | None) -> None:
    try:
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as error:
        raise PreflightError(
            f"output directory {str(base)!r} is not writable ({error.strerror or error}); "
            "pass --output-dir with a directory you can write to."
        ) from error
    if run_name is not None:
        if (base / run_name).is_symlink():
            raise PreflightError(
                f"{base / run_name} is a symbolic link (run_name {run_name!r}); an audit "
                "writes only into a new directory of its own: choose another run_name."
            )
        # RUN_NAME_PATTERN (config) allows no path separator and no leading dot, and the
        # link is refused above: the run's directory lies inside the output directory
        target = base.resolve() / run_name
        if target.exists():
            raise PreflightError(
                f"{target} already exists (run_name {run_name!r}); nothing is overwritten: "
                "choose another run_name or leave it unset."
            )


def _check_signing_key(output_dir: Path) -> None:
    """The key that will seal the output directory can be read (or created) outside it."""
    from fairpca.tasks.trust import SealError, key_path, signing_key

    try:
        signing_key(create=True)
    except (SealError, OSError) as error:
        raise PreflightError(f"the audit cannot sign its output directory: {error}") from error
    if key_path().resolve().is_relative_to(Path(output_dir).resolve()):
        raise PreflightError(
            f"the signing key {key_path()} lies inside --output-dir {output_dir}; set "
            "XDG_CONFIG_HOME (or FAIRPCA_SIGNING_KEY) so the key is kept elsewhere."
        )


def _check_table(config) -> tuple[list[str], Split]:
    """Load, check, split and screen an in-memory table: the warnings and the split."""
    from fairpca import _memory
    from fairpca.datasets import ScreeningWarning
    from fairpca.tasks.data import load_source, split_data

    data = config.source.data
    if data is not None and data.is_file():
        # refused before it is read when its text alone would not fit twice in memory
        # (parsed, a table takes at least the size of its text)
        size = data.stat().st_size
        _memory.require(2 * size, f"reading {data} ({_memory.format_bytes(size)})", DASK_FIX)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = load_source(config.source)
        except (TypeError, LookupError) as error:
            raise PreflightError(str(error)) from error
    width = _encoded_width(config, dataset.X)
    _check_cost(config, dataset, width)
    with warnings.catch_warnings():  # the flow reports the training rows' screening
        warnings.simplefilter("ignore", ScreeningWarning)
        split = split_data.fn(
            dataset, config.split, config.source,
            seed=config.seed, min_group_size=config.evaluation.min_group_size,
        )  # fmt: skip
    del dataset  # the split holds the rows the audit reads
    _check_groups(config, split)
    k_note = _check_k(config, split)
    # The flow takes this split; the load's screening was reported here already.
    warnings.filterwarnings("ignore", category=ScreeningWarning)
    found = [str(item.message) for item in caught if issubclass(item.category, UserWarning)]
    return found + ([k_note] if k_note else []), split


def check_before_run(config) -> tuple[list[str], Split | None]:
    """Load the data source, split and screen it as the audit does, and check k and the
    output directory; return the warnings and the split (None for a partitioned table),
    which the flow takes (:func:`fairpca.tasks.data.handed_over`) instead of reading the data
    again.

    Raises
    ------
    PreflightError
        For any input that would make the audit fail.
    """
    from fairpca.tasks.distributed import check_partitioned_source, connect, on_partitions

    from .runtime import map_large_blocks

    map_large_blocks()  # before the table is read (the audit's own process)
    try:
        if on_partitions(config.source):  # read on the Dask cluster, never here
            check_partitioned_source(config)
            if config.dask_address != "local":  # reachable (the audit starts ``local``)
                connect(config.dask_address).close()
            notes, split = [], None
        else:
            notes, split = _check_table(config)
    except PreflightError:
        raise
    except (ValueError, OSError) as error:  # the loader's, the split's, the memory budget's
        raise PreflightError(str(error)) from error
    _check_output_dir(config.output.output_dir, config.output.run_name)
    _check_signing_key(config.output.output_dir)
    return notes, split
