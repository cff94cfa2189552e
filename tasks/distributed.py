"""The audit's Dask route: a table larger than one machine, kept in partitions on a
``dask.distributed`` cluster.

``fairpca audit --data FOLDER_OR_GLOB --dask-address tcp://host:8786`` reads a folder of
Parquet files (or a glob of CSV parts), one partition per file, and never gathers its rows:
every task reads its own file (only the columns it needs), so a worker holds one partition
at a time and the client only counts, statistics and models.

- the split: stratified by label x group as in memory, through a seeded hash of each row's
  values (uniform in [0, 1)) within its stratum: one pass counts each stratum's hashes in
  :data:`SPLIT_BINS` bins, and the stratum's cut points are placed where its parts get the
  sizes the shares give it (50 / 25 / 25 by default), so every part keeps the table's
  proportions; the part does not depend on the partitioning, and identical rows share it;
- the encoder (one-hot, standardisation) is fitted on a seeded sample of at most
  ``ENCODER_SAMPLE_ROWS`` training rows drawn from every partition;
- fair PCA is fitted from partition statistics (:meth:`fairpca.FairPCA.fit` on a Dask
  DataFrame of the encoded training rows: the library's Dask route), once per k of the grid;
- the classifiers, ``SGDClassifier(loss="log_loss")`` for each (k, C), learn by
  ``partial_fit`` on the training rows of one partition after the other (partitions in
  order, rows in a seeded random order, ``EPOCHS`` passes);
- every metric and interval is computed from confusion-cell counts per intersection group
  summed over the partitions, by the library's code (:func:`counts_metrics`): the same
  numbers :func:`fairpca.tasks.evaluate.metrics_with_intervals` gives on the rows.

The record, report and MLflow run are the in-memory audit's, without what needs every row in
memory (the lambda sweep, the cross-validated choice, the reference mitigations, the
representation diagnostics, column screening): those are listed in the record's ``skipped``
with the reason. Dask is imported only here, when this route runs (extra ``fairpca[dask]``).
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import hashlib
import math
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

PART_CODES = {"train": 0, "validation": 1, "test": 2}
CONNECT_TIMEOUT_S = 3
WORKERS_TIMEOUT_S = 60
ENCODER_SAMPLE_ROWS = 20_000
EPOCHS = 2
CLASSIFIER = "sgd_logreg"
CELLS = ("TN", "FP", "FN", "TP")  # the cell of a row is 2 * y + prediction
GLOB_CHARACTERS = "*?["
SPLIT_BINS = 1 << 16  # bins of the rows' hash per stratum that place the stratified cuts
SKIPPED = {
    "lambda_sweep": "the Dask route fits fair PCA without the PCA trade-off block (lambda)",
    "references": "the reference mitigations (fairlearn) need every row in memory",
    "cross_validation": "the choice is made on the validation partitions",
    "diagnostics": "MMD^2 and linear inseparability need the projected rows in memory",
    "screening": "column screening (leakage, proxies) needs the training rows in memory; the "
    "columns are used as given (--drop excludes)",
    "pca_baseline": "unconstrained PCA is not fitted on the Dask route: the majority class is "
    "the only baseline",
}


# ---- the source and the cluster -------------------------------------------------------------


def on_partitions(source) -> bool:
    """Whether an audit's ``source`` is a partitioned table (a folder of Parquet files, or a
    glob of files), which the Dask route reads."""
    data = getattr(source, "data", None)
    if data is None or Path(data).is_file():  # a file named export[2024].csv is one file
        return False
    if Path(data).is_dir():  # a folder without Parquet files is a wrong --data, said so later
        return next(Path(data).rglob("*.parquet"), None) is not None
    return any(c in str(data) for c in GLOB_CHARACTERS)


def partition_files(data: str | Path) -> list[Path]:
    """The files of a partitioned table, sorted: a folder's ``*.parquet`` files (also in
    sub-folders, as Hive partitioning writes them), or the files a glob matches.

    Raises
    ------
    ValueError
        Nothing matches, or the files are neither all Parquet nor all CSV.
    """
    path = Path(data).resolve()  # the workers may run in another folder
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        what = f"the folder {path} holds no .parquet file"
    else:
        files = sorted(Path(p).resolve() for p in glob.glob(str(data)) if Path(p).is_file())
        what = f"the pattern {data} matches no file"
    if not files:
        raise ValueError(f"{what}; give a folder of Parquet files or a glob of CSV parts.")
    kinds = {_kind(file) for file in files}
    if len(kinds) != 1 or None in kinds:
        raise ValueError(
            f"{data} must name Parquet files only or CSV files only; it matches "
            f"{', '.join(sorted({f.suffix or f.name for f in files}))}."
        )
    return files


def _kind(file: Path) -> str | None:
    name = file.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    return "csv" if name.endswith((".csv", ".csv.gz")) else None


def connect(address: str, timeout: float = CONNECT_TIMEOUT_S):
    """A ``distributed.Client`` of the scheduler at ``address`` (``"local"``: a temporary
    LocalCluster of two single-threaded workers) with at least one worker, or a
    :class:`ValueError` within ``timeout`` seconds when the scheduler cannot be reached
    (within :data:`WORKERS_TIMEOUT_S` when it has no worker)."""
    try:
        from distributed import Client
    except ImportError as error:  # pragma: no cover - the dask extra is part of dev
        raise ValueError(
            "a partitioned table is audited on Dask: pip install 'fairpca[dask]'."
        ) from error
    if address == "local":
        return Client(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError) as error:
        raise ValueError(
            f"no Dask scheduler answered at {address} within {timeout:g} s ({error}); start "
            "one (`dask scheduler`, then `dask worker tcp://host:8786` on each machine) and "
            "pass the address it prints, or --dask-address local for a temporary local cluster."
        ) from None
    try:  # without a worker every computation would wait forever
        client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
    except (OSError, TimeoutError):
        client.close()
        raise ValueError(
            f"the Dask scheduler at {address} has no worker after {WORKERS_TIMEOUT_S} s; start "
            f"one on each machine that reads the table: `dask worker {address}`."
        ) from None
    return client


def check_partitioned_source(config) -> list[Path]:
    """The checks before any work: a scheduler address, files that match, the columns
    named in their schema (the pre-flight check also reaches the scheduler). Returns the
    files.

    Raises
    ------
    ValueError
        Naming the problem and the fix.
    """
    source = config.source
    if config.dask_address is None:
        raise ValueError(
            f"{source.data} is a partitioned table, audited on a Dask cluster: pass "
            "--dask-address tcp://host:8786 (or 'local' for a temporary local cluster)."
        )
    _refuse_unfitted_choices(config)
    files = partition_files(source.data)
    columns = _columns_of(files[0], source.sep)
    missing = [c for c in [source.label, *source.sensitive, *source.drop] if c not in columns]
    if missing:
        raise ValueError(
            f"{files[0]} has no column(s) {missing}; its columns are {sorted(columns)[:20]}."
        )
    if source.positive_label is None:
        values = _read_partition(files[0], RowSpec(source.label, None, (), (), 0, source.sep,
                                                   (1.0, 0.0, 0.0)))[source.label]  # fmt: skip
        classes = sorted(map(str, values.dropna().unique()))
        if not set(classes) <= {"0", "1"}:
            raise ValueError(
                f"label column {source.label!r} of {files[0]} has the classes {classes[:5]}, "
                "not 0/1; pass --positive-label <value> (e.g. the first of them)."
            )
    return files


def _refuse_unfitted_choices(config) -> None:
    """The route fits fair_pca (no lambda) with :data:`CLASSIFIER`: other variants,
    classifiers or lambdas than the defaults are refused, never silently replaced."""
    asked = [
        f"--{name} {getattr(getattr(config, section), name)}"
        for section, name in (
            ("representation", "variants"), ("representation", "lambdas"),
            ("evaluation", "classifiers"),
        )
        if getattr(getattr(config, section), name)
        != type(getattr(config, section)).model_fields[name].get_default(call_default_factory=True)
    ]  # fmt: skip
    if asked:
        raise ValueError(
            f"the Dask route fits fair_pca with {CLASSIFIER} only (no PCA trade-off lambda), "
            f"so {'; '.join(asked)} cannot be honoured there: leave them out, or audit the "
            "table (or a sample of it) in memory as one file."
        )


def _csv_options(sep: str | None) -> dict:
    # sep=None: the separator is sniffed from the file (python engine), as for a single file
    return {"sep": sep} if sep else {"sep": None, "engine": "python"}


def _columns_of(file: Path, sep: str | None) -> list[str]:
    if _kind(file) == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(file).names)
    return list(pd.read_csv(file, nrows=0, **_csv_options(sep)).columns)


# ---- what runs on the workers, one partition at a time ---------------------------------------


@dataclass(frozen=True)
class RowSpec:
    """How a partition file's rows become features, label, groups and part (sent to
    workers)."""

    label: str
    positive_label: Any
    sensitive: tuple[str, ...]
    features: tuple[str, ...]
    seed: int
    sep: str | None
    shares: tuple[float, float, float]  # train, validation, test (the config's split section)
    cuts: dict | None = None  # stratum -> its parts' cut points (stratum_cuts)
    excluded: tuple[str, ...] = ()  # features the screening excluded (still read: hashed)

    @property
    def columns(self) -> list[str]:
        """What is read and hashed (the same before and after the screening)."""
        return [self.label, *self.sensitive, *self.features]

    @property
    def kept(self) -> list[str]:
        """The features the audit uses."""
        return [c for c in self.features if c not in self.excluded]


def _read_partition(file: Path, spec: RowSpec) -> pd.DataFrame:
    """One partition: the file's rows, only the columns the audit uses, in ``spec`` order."""
    if _kind(file) == "parquet":
        frame = pd.read_parquet(file, columns=spec.columns)
    else:
        frame = pd.read_csv(file, usecols=spec.columns, **_csv_options(spec.sep))
    return frame[spec.columns]


def row_uniforms(frame: pd.DataFrame, seed: int) -> np.ndarray:
    """A seeded 64-bit hash of each row's values (as text), its top 53 bits read as a
    uniform number in [0, 1): the row's place in its stratum, whatever the partitioning
    (identical rows share it)."""
    hash_key = hashlib.sha256(f"fairpca-split-{seed}".encode()).hexdigest()[:16]
    hashed = pd.util.hash_pandas_object(frame.astype(str), index=False, hash_key=hash_key)
    return (hashed.to_numpy() >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def strata_of(y: np.ndarray, groups: pd.DataFrame) -> np.ndarray:
    """Each row's stratum, ``label|group|...`` (the in-memory split's label x group
    strata), as text: the same key on every partition."""
    keys = pd.Series(np.asarray(y).astype(str))
    for column in groups.columns:
        keys = keys + "|" + groups[column].astype(str).to_numpy()
    return keys.to_numpy()


def part_of_rows(frame: pd.DataFrame, seed: int, shares: tuple[float, ...], strata=None,
                 cuts: dict | None = None) -> np.ndarray:  # fmt: skip
    """Each row's part (0 train, 1 validation, 2 test; 3: beyond the shares' sum, left out
    as in the in-memory split): its :func:`row_uniforms` value against its stratum's
    ``cuts`` (:func:`stratum_cuts`; the shares' cumulative sums for a stratum without)."""
    uniform = row_uniforms(frame, seed)
    default = np.cumsum(shares)
    if strata is None or not cuts:
        return np.searchsorted(default, uniform, side="right").astype(np.int8)
    part = np.empty(len(uniform), dtype=np.int8)
    for key in pd.unique(strata):
        rows = strata == key
        edges = np.asarray(cuts.get(key, default))
        part[rows] = np.searchsorted(edges, uniform[rows], side="right")
    return part


def _uniform_histogram(file: Path, spec: RowSpec) -> pd.DataFrame:
    """Rows per (stratum, bin of :data:`SPLIT_BINS` of their uniform) of a partition (the
    non-empty bins only)."""
    frame, y, groups = _labelled(file, spec)
    uniform = row_uniforms(frame, spec.seed)
    bins = np.minimum((uniform * SPLIT_BINS).astype(np.int64), SPLIT_BINS - 1)
    table = pd.DataFrame({"stratum": strata_of(y, groups), "bin": bins})
    return table.value_counts(sort=False).rename("rows").reset_index()


def stratum_cuts(histogram: pd.DataFrame, shares: tuple[float, ...]) -> dict[str, tuple]:
    """Each stratum's three cut points in [0, 1]: at the bin edges where its rows' running
    count comes nearest the parts' sizes, which the in-memory split gives the stratum
    (:func:`fairpca.tasks.data.part_sizes` of its rows, by the shares). So every part holds
    each label x group stratum in the table's proportion, to a bin's rows
    (``1 / SPLIT_BINS`` of the stratum)."""
    from fairpca.tasks.data import _allocate

    cuts = {}
    weights = np.round(np.asarray(shares, dtype=float) * 1e6).astype(np.int64)
    for key, rows in histogram.groupby("stratum", sort=True):
        counts = np.zeros(SPLIT_BINS, dtype=np.int64)
        np.add.at(counts, rows["bin"].to_numpy(), rows["rows"].to_numpy())
        total = int(counts.sum())
        wanted = _allocate(int(np.floor(total * sum(shares) + 1e-9)), weights)
        running = np.concatenate([[0], np.cumsum(counts)])  # rows below each bin edge
        edges = [int(np.abs(running - target).argmin()) for target in np.cumsum(wanted)]
        cuts[str(key)] = tuple(edge / SPLIT_BINS for edge in edges)
    return cuts


def _labelled(file: Path, spec: RowSpec):
    """A partition's rows, binary label and groups (as text)."""
    frame = _read_partition(file, spec).reset_index(drop=True)
    label = frame[spec.label]
    if spec.positive_label is not None:
        y = (label == spec.positive_label).to_numpy(dtype=np.int64)
    else:
        y = pd.to_numeric(label, errors="coerce").to_numpy()  # text: NaN, refused below
        if not np.isin(y, (0, 1)).all():
            raise ValueError(
                f"label column {spec.label!r} of {file} is not 0/1; pass --positive-label."
            )
        y = y.astype(np.int64)
    return frame, y, frame[list(spec.sensitive)].astype(str)


def _rows(file: Path, spec: RowSpec):
    """Features, binary label, groups (as text) and part of a partition's rows."""
    frame, y, groups = _labelled(file, spec)
    part = part_of_rows(frame, spec.seed, spec.shares, strata_of(y, groups), spec.cuts)
    return frame[spec.kept], y, groups, part


def _first_facts(file: Path, spec: RowSpec, index: int, per_partition: int):
    """One pass: rows per (groups, part, label), the training rows' digest and a seeded
    sample of at most ``per_partition`` training rows (for the encoder)."""
    X, y, groups, part = _rows(file, spec)
    sizes = groups.assign(part=part, y=y).value_counts(sort=False).rename("rows").reset_index()
    train = np.flatnonzero(part == PART_CODES["train"])
    rng = np.random.default_rng([spec.seed, index])
    sample = np.sort(rng.choice(train, size=min(per_partition, train.size), replace=False))
    digest = hashlib.sha256()
    for piece in (X.iloc[train], pd.DataFrame({"y": y[train]}), groups.iloc[train]):
        digest.update(pd.util.hash_pandas_object(piece, index=False).to_numpy().tobytes())
    return sizes, digest.hexdigest(), X.iloc[sample], groups.iloc[sample]


def _encoded_training_rows(file: Path, spec: RowSpec, preprocessor, names: list[str]):
    """A partition's training rows encoded, with the group columns (fair PCA's
    ``sensitive_columns``)."""
    X, _, groups, part = _rows(file, spec)
    train = part == PART_CODES["train"]
    out = preprocessor.transform(X[train]).astype(np.float64).reset_index(drop=True)[names]
    for column in spec.sensitive:
        out[f"group:{column}"] = groups[column].to_numpy()[train]
    return out


def _train_step(models: dict, file: Path, spec: RowSpec, preprocessor, projections: dict,
                step: tuple[int, int]) -> dict:  # fmt: skip
    """``partial_fit`` of every (k, C) classifier on one partition's training rows, in a
    seeded random order (``step``: epoch and partition index). Works on copies: a task
    never changes its inputs."""
    X, y, _, part = _rows(file, spec)
    train = np.flatnonzero(part == PART_CODES["train"])
    if train.size == 0:
        return models
    order = np.random.default_rng([spec.seed, *step]).permutation(train)
    encoded = preprocessor.transform(X.iloc[order])
    models = copy.deepcopy(models)
    for k, projection in projections.items():
        projected = projection.transform(encoded)
        for C in (C for model_k, C in models if model_k == k):
            models[k, C].partial_fit(projected, y[order], classes=np.array([0, 1]))
    return models


def _cell_counts(keys: pd.DataFrame, y: np.ndarray, predicted: np.ndarray) -> pd.DataFrame:
    """Rows per confusion cell (columns :data:`CELLS`) for each distinct row of ``keys``."""
    onehot = pd.DataFrame(np.eye(4, dtype=np.int64)[2 * y + predicted], columns=list(CELLS))
    table = pd.concat([keys.reset_index(drop=True), onehot], axis=1)
    return table.groupby(list(keys.columns), sort=False).sum().reset_index()


def _count_cells(file: Path, spec: RowSpec, preprocessor, projections: dict, models: dict):
    """Confusion-cell counts per (candidate, part, groups) of the validation and test rows;
    candidate ``majority`` predicts 0 (flipped on the client when the majority class is 1)."""
    X, y, groups, part = _rows(file, spec)
    rows = np.flatnonzero(part != PART_CODES["train"])
    encoded = preprocessor.transform(X.iloc[rows])
    keys = groups.iloc[rows].assign(part=part[rows])
    predictions = {"majority": np.zeros(rows.size, dtype=np.int64)}
    for (k, C), model in models.items():
        projected = projections[k].transform(encoded)
        predictions[_candidate(k, C)] = model.predict(projected).astype(np.int64)
    tables = [
        _cell_counts(keys, y[rows], predicted).assign(candidate=candidate)
        for candidate, predicted in predictions.items()
    ]
    return pd.concat(tables, ignore_index=True)


def _champion_cells(file: Path, spec: RowSpec, pipeline) -> pd.DataFrame:
    """Confusion-cell counts per group of a pipeline's predictions on the test rows."""
    X, y, groups, part = _rows(file, spec)
    test = part == PART_CODES["test"]
    predicted = np.asarray(pipeline.predict(X[test]), dtype=np.int64)
    return _cell_counts(groups[test], y[test], predicted)


def _candidate(k: int, C: float) -> str:
    return f"{k}:{C!r}"


# ---- metrics from counts ---------------------------------------------------------------------


def released_problem(counts: pd.DataFrame, sensitive: list[str], min_group_size: int,
                     allow_small_groups: bool = False):  # fmt: skip
    """The library's fairness problem of the rows whose confusion-cell counts per
    intersection group are ``counts`` (columns ``sensitive`` and :data:`CELLS`), released as
    :func:`fairpca.metrics.group_fairness` releases rows (small groups withheld), and its
    report: the same problem and numbers as from the rows themselves."""
    from fairpca.metrics import _counts, _fairness

    counts = counts[counts[list(CELLS)].sum(axis=1) > 0].reset_index(drop=True)
    # One stand-in row per intersection group gives the groupings, labels and names exactly
    # as the rows would; its cell counts are then replaced by the summed ones.
    stand_in = np.zeros(len(counts), dtype=np.int64)
    problem = _counts.fairness_problem(
        stand_in, stand_in, counts[sensitive], 1, min_group_size,
        allow_small_groups=allow_small_groups,
    )  # fmt: skip
    summed = np.zeros_like(problem.counts)
    np.add.at(summed, problem.cell, counts[list(CELLS)].to_numpy(dtype=summed.dtype))
    problem = dataclasses.replace(problem, counts=summed)
    released = _fairness._released(problem)
    return released[0], _fairness._report(*released)


def counts_metrics(counts: pd.DataFrame, sensitive: list[str], *, min_group_size: int,
                   n_resamples: int, seed: int,
                   allow_small_groups: bool = False) -> dict[str, float]:  # fmt: skip
    """:func:`fairpca.tasks.evaluate.metrics_with_intervals` of the rows whose confusion-cell
    counts per intersection group are ``counts``: every metric and 95% interval, computed
    from the counts alone by the library's code.

    Every interval of :func:`fairpca.metrics.bootstrap_intervals` is a function of the cell
    counts: Clopper-Pearson intervals of the rates (and their Bonferroni combinations for
    differences and ratios), and the balanced accuracy's bootstrap, which draws each
    intersection group's cells from a multinomial of its observed counts. So the numbers
    equal those on the rows (same ``seed``), without the rows. ROC AUC needs the scores and
    is not reported.
    """
    from fairpca.metrics import _fairness, _intervals, ci_metrics

    problem, report = released_problem(counts, sensitive, min_group_size, allow_small_groups)
    confidence = 0.95
    intervals = _intervals.overall_intervals(problem, 1 - confidence)
    intervals["balanced_accuracy"] = _intervals.balanced_accuracy_interval(
        problem, n_resamples, confidence, seed
    )
    measures, groups = _fairness._measure_intervals(problem, 1 - confidence)
    intervals |= measures | _fairness._group_intervals(problem, report, groups)
    metrics = report.as_metrics()
    bounds = ci_metrics(intervals, confidence=confidence)
    metrics.update({k: v for k, v in bounds.items() if k.rsplit(".", 1)[0] in metrics})
    return metrics


# ---- the passes over the partitions (on the cluster) -----------------------------------------


@dataclass
class Passes:
    """What the passes over the partitions found; only counts, statistics, a bounded sample
    and fitted models, never the rows."""

    files: list[Path]
    spec: RowSpec
    sizes: pd.DataFrame  # rows per (groups, part, y)
    digest: str  # SHA-256 of the training rows, partition by partition
    sample_X: pd.DataFrame  # the encoder's sample of training rows
    preprocessor: Any
    k_record: dict
    representations: dict  # k -> FittedRepresentation
    models: dict  # (k, C) -> SGDClassifier
    cells: pd.DataFrame  # confusion-cell counts per (candidate, part, groups)
    clock: dict[str, float]

    def rows_of(self, part: str) -> int:
        return int(self.sizes.loc[self.sizes["part"] == PART_CODES[part], "rows"].sum())

    @property
    def majority(self) -> int:
        """The majority class of the training rows."""
        train = self.sizes[self.sizes["part"] == PART_CODES["train"]]
        return int(train.loc[train["y"] == 1, "rows"].sum() * 2 > train["rows"].sum())

    def counts(self, candidate: str, part: str) -> pd.DataFrame:
        """Cell counts per group of a candidate (or ``majority``) on a part."""
        table = self.cells.xs((candidate, PART_CODES[part]), level=("candidate", "part"))
        table = table.reset_index()
        if candidate == "majority" and self.majority == 1:  # every row predicted 1
            table = table.assign(FP=table["TN"], TP=table["FN"], TN=0, FN=0)
        return table

    def pipeline(self, k: int, C: float):
        from sklearn.pipeline import Pipeline

        return Pipeline([
            ("preprocess", self.preprocessor),
            ("represent", self.representations[k].estimator),
            ("classify", self.models[k, C]),
        ])  # fmt: skip


def _spec(config, files: list[Path]) -> RowSpec:
    from fairpca.tasks.data import _typed_label

    source = config.source
    taken = {source.label, *source.sensitive, *source.drop}
    features = tuple(c for c in _columns_of(files[0], source.sep) if c not in taken)
    if not features:
        raise ValueError(f"{source.data} has no feature column besides label and sensitive.")
    label = _typed_label(source)
    split = config.split
    shares = (split.train_share, split.validation_share, split.test_share)
    return RowSpec(
        source.label, label, tuple(source.sensitive), features, config.seed, source.sep, shares
    )


def _check_parts(sizes: pd.DataFrame, data) -> None:
    """Every part needs rows of both labels (to train, to choose and to test)."""
    found = sizes.groupby(["part", "y"])["rows"].sum()
    for part, code in PART_CODES.items():
        rows = [int(found.get((code, label), 0)) for label in (0, 1)]
        if min(rows) == 0:
            raise ValueError(
                f"the {part} rows of {data} hold {rows[0]} negative and {rows[1]} positive "
                "labels; the Dask route needs both in each part: a larger table, or the "
                "in-memory audit (a single file)."
            )


def _per_file(function, files: list[Path], *args) -> list:
    """``function(file, *args)`` for every file, on the cluster."""
    import dask

    task = dask.delayed(function, pure=True)
    return list(dask.compute(*[task(file, *args) for file in files]))


def _first_pass(files: list[Path], spec: RowSpec):
    """Rows per (groups, part, label), the training digest, the encoder's sample."""
    import dask

    per_partition = max(1, math.ceil(ENCODER_SAMPLE_ROWS / len(files)))
    task = dask.delayed(_first_facts, pure=True)
    facts = dask.compute(*[task(f, spec, i, per_partition) for i, f in enumerate(files)])
    keys = [*spec.sensitive, "part", "y"]
    sizes = pd.concat([f[0] for f in facts]).groupby(keys, sort=False)["rows"].sum()
    digest = hashlib.sha256("".join(f[1] for f in facts).encode()).hexdigest()
    sample_X = pd.concat([f[2] for f in facts], ignore_index=True)
    sample_groups = pd.concat([f[3] for f in facts], ignore_index=True)
    return sizes.reset_index(), digest, sample_X, sample_groups


def _fit_representations(files, spec: RowSpec, preprocessor, grid: list[int]) -> dict:
    """Fair PCA for each k, each fitted on the cluster from partition statistics of the
    encoded training rows (a Dask DataFrame, one partition per file, read by the task)."""
    import dask.dataframe as dd

    from fairpca import FairPCA
    from fairpca.tasks.represent import FittedRepresentation

    columns = list(preprocessor.get_feature_names_out())
    group_columns = [f"group:{c}" for c in spec.sensitive]
    meta = pd.DataFrame({c: pd.Series(dtype=np.float64) for c in columns})
    for column in group_columns:
        meta[column] = pd.Series(dtype=object)
    encoded = dd.from_map(
        _encoded_training_rows, files, args=[spec, preprocessor, columns], meta=meta,
        enforce_metadata=False,
    )  # fmt: skip
    fitted = {}
    for k in grid:
        start = time.perf_counter()
        estimator = FairPCA(
            n_components=k, sensitive_columns=group_columns, random_state=spec.seed
        ).fit(encoded)
        estimator.set_params(sensitive_columns=None)  # the pipeline passes features only
        facts = {"k": float(k), "mean_gap_fit": estimator.mean_gap_}
        fitted[k] = FittedRepresentation("fair_pca", estimator, time.perf_counter() - start, facts)
    return fitted


def _train(files, spec: RowSpec, preprocessor, projections: dict, C_grid, n_train: int):
    """Every (k, C) classifier, trained by ``partial_fit`` over the partitions in order.

    ``SGDClassifier`` minimises ``mean(log loss) + alpha / 2 * ||w||^2``; logistic
    regression's ``C * sum(log loss) + 1 / 2 * ||w||^2`` divided by ``C * n`` is that with
    ``alpha = 1 / (C * n)``, so C means what it means in the in-memory audit.
    """
    import dask
    from sklearn.linear_model import SGDClassifier

    state = {
        (k, C): SGDClassifier(loss="log_loss", alpha=1.0 / (C * n_train), random_state=spec.seed)
        for k in projections
        for C in C_grid
    }
    step = dask.delayed(_train_step, pure=True)
    for epoch in range(EPOCHS):  # a chain of tasks: each one's models feed the next
        for index, file in enumerate(files):
            state = step(state, file, spec, preprocessor, projections, (epoch, index))
    (trained,) = dask.compute(state)
    return trained


def _passes(files: list[Path], config) -> Passes:
    """Every pass over the partitions: sizes and sample, encoder, fair PCA per k, the
    classifiers, the confusion-cell counts."""
    from fairpca.tasks.represent import make_preprocessor, resolve_k

    clock: dict[str, float] = {}
    tick = time.perf_counter()
    spec = _spec(config, files)
    histogram = pd.concat(_per_file(_uniform_histogram, files, spec), ignore_index=True)
    spec = dataclasses.replace(spec, cuts=stratum_cuts(histogram, spec.shares))
    sizes, digest, sample_X, sample_groups = _first_pass(files, spec)
    _check_parts(sizes, config.source.data)
    clock["time_load_data_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    min_count = config.representation.min_category_count
    preprocessor = make_preprocessor(sample_X, min_count).set_output(transform="pandas")
    preprocessor.fit(sample_X)  # pandas output: fair PCA keeps the encoded columns' names
    width = len(preprocessor.get_feature_names_out())
    k_record = resolve_k(
        config.representation.k, width, sample_groups, ["fair_pca"], config.representation.k_grid
    )
    representations = _fit_representations(files, spec, preprocessor, k_record["grid"])
    clock["time_represent_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    n_train = int(sizes.loc[sizes["part"] == PART_CODES["train"], "rows"].sum())
    # the in-memory audit's default grid: the paper's C = 1 / (2 n 0.01), and 1
    C_grid = config.evaluation.logreg_C or [1.0 / (2 * n_train * 0.01), 1.0]
    projections = {k: rep.estimator for k, rep in representations.items()}
    models = _train(files, spec, preprocessor, projections, C_grid, n_train)
    clock["time_train_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    parts = _per_file(_count_cells, files, spec, preprocessor, projections, models)
    keys = ["candidate", "part", *spec.sensitive]
    cells = pd.concat(parts, ignore_index=True).groupby(keys, sort=False)[list(CELLS)].sum()
    clock["time_evaluate_s"] = time.perf_counter() - tick
    return Passes(files, spec, sizes, digest, sample_X, preprocessor, k_record,
                  representations, models, cells, clock)  # fmt: skip


# ---- the choice and the record (on the client, from counts) ----------------------------------


@dataclass
class PartitionAudit:
    """What the Dask route returns to the flow: the record, the candidates' table, the
    chosen pipeline and ``score(pipeline)``, a champion's metrics on the test partitions
    (while the client is open)."""

    record: Any
    table: pd.DataFrame
    pipeline: Any
    score: Any


def _measured(counts: pd.DataFrame, spec: RowSpec, config) -> dict[str, float]:
    from fairpca.tasks.evaluate import metric_options

    options = metric_options(config.evaluation, config.seed)
    return counts_metrics(counts, list(spec.sensitive), **options)


def _candidates(passes: Passes, config) -> pd.DataFrame:
    """The validation table: one row per (k, C), with the columns the in-memory sweep
    writes."""
    rows = []
    for k, C in passes.models:
        values = _measured(passes.counts(_candidate(k, C), "validation"), passes.spec, config)
        rows.append({"variant": "fair_pca", "k": k, "lambda": math.nan, "lambda_index": 0,
                     "classifier": CLASSIFIER, "C": C, **values})  # fmt: skip
    return pd.DataFrame(rows)


def _choose(passes: Passes, config, table: pd.DataFrame):
    """The in-memory audit's choice (eligibility, gate, certification) on the validation
    partitions' metrics."""
    from fairpca.tasks.select import choose

    # choose() reads of the labels only the majority-class accuracy: the training majority
    # and the validation labels (kept compact: one byte per row, sorted).
    sizes = passes.sizes[passes.sizes["part"] == PART_CODES["validation"]]
    per_label = sizes.groupby("y")["rows"].sum()
    y_validation = np.repeat(per_label.index.to_numpy(np.int8), per_label.to_numpy())
    chosen_by = f"the {y_validation.size} validation rows (Dask partitions)"
    return choose(table, np.array([passes.majority]), y_validation, config.selection,
                  chosen_by=chosen_by)  # fmt: skip


def audit_partitions(config, out_dir: Path, *, kind: str, started_at: datetime,
                     tags: dict[str, str]) -> PartitionAudit:  # fmt: skip
    """The Dask route of the audit, from the partitioned table to the written model and the
    record (see the module docstring), on the current ``distributed.Client``
    (:func:`connect`). The flow writes, seals and logs it as any audit."""
    from fairpca.tasks.evaluate import _finite, _validation_metrics
    from fairpca.tasks.record import unjudged_groups
    from fairpca.tasks.select import judged_everywhere

    passes = _passes(check_partitioned_source(config), config)
    table = _candidates(passes, config)
    choice = _choose(passes, config, table)
    k, C = int(choice.chosen["k"]), float(choice.chosen["C"])
    chosen_test = _measured(passes.counts(_candidate(k, C), "test"), passes.spec, config)
    majority_test = _measured(passes.counts("majority", "test"), passes.spec, config)
    reported = {
        "chosen": {"validation": _validation_metrics(choice.chosen), "test": _finite(chosen_test)},
        "majority": {"class": passes.majority, "test": _finite(majority_test),
                     "validation": {"accuracy": choice.majority_accuracy}},
    }  # fmt: skip
    split = {f"n_{part}": passes.rows_of(part) for part in PART_CODES}
    unjudged = unjudged_groups(_group_sizes(passes, config.evaluation), reported["chosen"][
        "validation"], split, config.evaluation.min_group_size)  # fmt: skip
    choice = judged_everywhere(choice, unjudged)
    pipeline = passes.pipeline(k, C)
    record = _record(config, out_dir, passes, choice, reported, pipeline, table,
                     run={"kind": kind, "started_at": started_at, "tags": tags})  # fmt: skip

    def score(champion) -> dict[str, float]:
        """A champion's metrics on this audit's test partitions (counts summed on the cluster)."""
        parts = _per_file(_champion_cells, passes.files, passes.spec, champion)
        keys = list(passes.spec.sensitive)
        counts = pd.concat(parts).groupby(keys, sort=False)[list(CELLS)].sum().reset_index()
        return _measured(counts, passes.spec, config)

    return PartitionAudit(record, table, pipeline, score)


def _group_sizes(passes: Passes, evaluation, parts=None) -> dict:
    """Published rows per group (the library's release rule, applied to the counts)."""
    from fairpca.tasks.record import with_withheld

    sizes = passes.sizes if parts is None else passes.sizes[passes.sizes["part"].isin(parts)]
    sensitive = list(passes.spec.sensitive)
    cells = sizes.groupby(sensitive, sort=False)["rows"].sum().reset_index()
    cells = cells.assign(TN=cells["rows"], FP=0, FN=0, TP=0)  # sizes are all that counts
    _, report = released_problem(
        cells, sensitive, evaluation.min_group_size, evaluation.allow_small_groups
    )
    published = {attribute: report.attributes[attribute].group_size for attribute in sensitive}
    withheld = {
        attribute: cells[attribute].nunique() - len(published[attribute]) for attribute in sensitive
    }
    return with_withheld(published, withheld, evaluation.min_group_size)


def _data_source(config, files: list[Path]) -> dict:
    """The files' SHA-256s, named relative to their common folder."""
    from fairpca.tasks.trust import sha256_file

    root = Path(os.path.commonpath([f.parent for f in files]))
    return {
        "kind": "file",
        "name": Path(config.source.data).name,
        "sha256": {str(f.relative_to(root)): sha256_file(f) for f in files},
    }


def _row_facts(config, passes: Passes):
    """The record's facts of the rows (:class:`fairpca.tasks.record.RowFacts`), from the
    counts."""
    from fairpca.tasks.record import RowFacts

    test = [PART_CODES["test"]]
    return RowFacts(
        rows={part: passes.rows_of(part) for part in PART_CODES},
        group_sizes=_group_sizes(passes, config.evaluation),
        test_group_sizes=_group_sizes(passes, config.evaluation, test),
        sensitive=list(passes.spec.sensitive),
        screening=None,
        training_data_sha256=passes.digest,
        data_source=_data_source(config, passes.files),
    )


def _record(config, out_dir: Path, passes: Passes, choice, reported, pipeline, table, *,
            run: dict):  # fmt: skip
    """The :class:`fairpca.tasks.record.AuditRecord` of the Dask route, by the in-memory
    route's :func:`fairpca.tasks.record.build_record`; the chosen pipeline saved under
    ``out_dir/model`` and the projection matrices beside it (``run``: kind, started_at and
    the flow's tags)."""
    from fairpca.tasks.evaluate import pip_requirements
    from fairpca.tasks.mlflow_logging import as_model_input, input_example, save_model_locally
    from fairpca.tasks.record import build_record
    from fairpca.tasks.report import write_matrices
    from fairpca.tasks.trust import model_digest, sha256_file

    min_count = config.representation.min_category_count
    example = input_example(as_model_input(passes.sample_X), min_count)
    model_dir = save_model_locally(
        pipeline, out_dir, input_example=example, pip_requirements=pip_requirements()
    )
    chosen = {"fair_pca": passes.representations[int(choice.chosen["k"])]}
    return build_record(
        config, kind=run["kind"], run_name=Path(out_dir).name, started_at=run["started_at"],
        split=_row_facts(config, passes), choice=choice, reported=reported, references=[],
        diagnostics={}, representations=chosen, table=table, skipped=dict(SKIPPED),
        k_record=passes.k_record, timings=passes.clock, hashes=write_matrices(out_dir, chosen),
        model_sha256=sha256_file(next(model_dir.glob("*.skops"))),
        model_digest=model_digest(pipeline, passes.digest),
        tags={"fairpca.route": "dask", **run["tags"]},
        params={"route": "dask", "epochs": str(EPOCHS)},
    )  # fmt: skip
