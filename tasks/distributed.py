"""The audit's Dask route: a table larger than one machine, kept in partitions on a
``dask.distributed`` cluster; the same audit as in memory, the heavy steps distributed and the
rest done on samples it names.

``fairpca audit --data FOLDER_OR_GLOB --dask-address tcp://host:8786`` reads a folder of
Parquet files (or a glob of CSV parts), one partition per file, and never gathers the table:
every task reads its own file, so a worker holds one partition at a time and the client holds
counts, statistics, models and two bounded samples.

- the split: stratified by label x group as in memory, through a seeded hash of each row's
  values (uniform in [0, 1)) within its stratum: one pass counts each stratum's hashes in
  :data:`SPLIT_BINS` bins, and the stratum's cut points are placed where its parts get the
  sizes the shares give it (50 / 25 / 25 by default), so every part keeps the table's
  proportions; the part does not depend on the partitioning, and identical rows share it;
- the samples: seeded, stratified samples of :data:`SAMPLE_ROWS` training and validation rows
  pulled into memory (one pass, with the counts per group and the training rows' digest);
- the screening: the in-memory audit's (unusable columns such as identifiers, target
  leakage, proxies) on :data:`SCREEN_ROWS` of the training sample; an excluded column is
  never read as a feature from any partition;
- the search: the in-memory audit's wide search (k, C, every variant's lambda sweep,
  unconstrained PCA) on the samples, as the in-memory audit searches a sample of a large
  table; its :data:`SHORTLIST` best logistic-regression candidates and the best PCA are then
  refitted on every row:
- the representations from one pass of partition statistics
  (:func:`fairpca._fair_pca.fit_from_shared_statistics`: X^T X and the group sums; every k,
  Fair PCA-S and the PCA directions share them, equal opportunity takes one more pass; a
  lambda only reweights them);
- the classifiers: logistic regression exactly as scikit-learn fits it, by Newton's method on
  the partitions' summed gradients and Hessians (one pass per step, every candidate at
  once); ``logreg_tuned``'s threshold chosen for ``select_by`` on every validation row
  (:func:`fairpca.tasks.sweep.gated_threshold`);
- the reference mitigations: the in-memory audit's, fitted on the samples, measured on every
  validation and test row;
- every metric and interval from confusion-cell counts per intersection group summed over the
  partitions (:func:`counts_metrics`, :func:`rows_of_counts`): the numbers the in-memory
  functions give on the rows;
- the choice, the references' veto, dominance and the record: the in-memory audit's own
  functions (:func:`fairpca.tasks.select.choose`, :func:`fairpca.tasks.select.judge_chosen`,
  :func:`fairpca.tasks.record.build_record`).

Skipped (with the reason in the record): cross-validation, the representation diagnostics,
and classifiers other than logistic regression (searched on the samples only). Dask is
imported only here, when this route runs (extra ``fairpca[dask]``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import glob
import hashlib
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
# Rows of each of the training and validation parts pulled into memory (seeded, stratified by
# label x group): the wide search, the reference mitigations and the encoder run on them.
SAMPLE_ROWS = {"train": 100_000, "validation": 50_000}
SCREEN_ROWS = 50_000  # training rows the column screening reads (of the sample)
SHORTLIST = 5  # the wide search's best candidates refitted on every row (and the best PCA)
CLASSIFIERS = ("logreg", "logreg_tuned")  # what the route fits exactly on the partitions
NEWTON_MAX_ITER = 50
NEWTON_TOL = 1e-10  # the largest change of a weight, relative, at which Newton stops
LABEL_COLUMN = "__label__"  # the label beside the encoded training rows (equal opportunity)
CELLS = ("TN", "FP", "FN", "TP")  # the cell of a row is 2 * y + prediction
GLOB_CHARACTERS = "*?["
KINDS = {".parquet": "parquet", ".csv": "csv", ".csv.gz": "csv"}  # a partition file's ending
SPLIT_BINS = 1 << 16  # bins of the rows' hash per stratum that place the stratified cuts
SKIPPED = {
    "cross_validation": "the choice is made on every validation row of the partitions",
    "diagnostics": "MMD^2 and linear inseparability need the projected rows in memory",
}

# The messages of the refusals below (str.format templates; tests name them, not their words)
MIXED_FILES = "{data} must name Parquet files only or CSV files only; it matches {suffixes}."
MISSING_COLUMNS = "{file} has no column(s) {missing}; its columns are {columns}."
LABEL_CLASSES_NOT_BINARY = (
    "label column {label!r} of {file} has the classes {classes}, not 0/1; pass "
    "--positive-label <value> (e.g. the first of them)."
)
GROUP_COLUMN_ON_PARTITIONS = (
    "the Dask route splits a partitioned table row by row (a seeded hash of each row), so "
    "--group-column {column} (each entity's rows in one part) cannot be honoured there: audit "
    "the table (or a sample of whole entities) in memory as one file, or leave --group-column "
    "out."
)
UNFITTED_CHOICES = (
    "the Dask route refits pca, fair_pca, fair_pca_s and fair_pca_eo with {classifiers} on the "
    "partitions, so {asked} cannot be honoured there: leave them out (or add logreg_tuned), or "
    "audit the table (or a sample of it) in memory as one file."
)
ONE_LABEL_IN_A_PART = (
    "the {part} rows of {data} hold {negative} negative and {positive} positive labels; the "
    "Dask route needs both in each part: a larger table, or the in-memory audit (a single file)."
)


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
        suffixes = ", ".join(sorted({f.suffix or f.name for f in files}))
        raise ValueError(MIXED_FILES.format(data=data, suffixes=suffixes))
    return files


def _kind(file: Path) -> str | None:
    name = file.name.lower()
    return next((kind for end, kind in KINDS.items() if name.endswith(end)), None)


def _read(file: Path, sep: str | None, columns: list[str] | None = None) -> pd.DataFrame:
    """A partition file's ``columns``, in that order; without ``columns``, its header only
    (no row)."""
    if _kind(file) == "parquet":
        import pyarrow.parquet as pq

        if columns is None:
            return pd.DataFrame(columns=pq.read_schema(file).names)
        return pd.read_parquet(file, columns=columns)[columns]
    # sep=None: the separator is sniffed from the file (python engine), as for a single file
    options = {"sep": sep} if sep else {"sep": None, "engine": "python"}
    frame = pd.read_csv(file, usecols=columns, nrows=0 if columns is None else None, **options)
    return frame if columns is None else frame[columns]


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
    """The checks before any work: a scheduler address; what the route fits (fair PCA and
    its variants from statistics, with logistic regression: fair kernel PCA, or classifiers
    without logistic regression, are refused, never silently replaced; so is a
    ``group_column``, since the split assigns each row, not each entity, a part); files that
    match, the columns named in their schema (the pre-flight check also reaches the
    scheduler). Returns the files.

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
    if source.group_column is not None:
        raise ValueError(GROUP_COLUMN_ON_PARTITIONS.format(column=source.group_column))
    asked = []
    if "fair_kernel_pca" in config.representation.variants:
        asked.append("--variants fair_kernel_pca")
    if not set(config.evaluation.classifiers) & set(CLASSIFIERS):
        asked.append(f"--classifiers {config.evaluation.classifiers}")
    if asked:
        raise ValueError(
            UNFITTED_CHOICES.format(classifiers=" or ".join(CLASSIFIERS), asked="; ".join(asked))
        )
    files = partition_files(source.data)
    columns = list(_read(files[0], source.sep).columns)
    missing = [c for c in [source.label, *source.sensitive, *source.drop] if c not in columns]
    if missing:
        raise ValueError(
            MISSING_COLUMNS.format(file=files[0], missing=missing, columns=sorted(columns)[:20])
        )
    if source.positive_label is None:
        values = _read(files[0], source.sep, [source.label])[source.label]
        classes = sorted(map(str, values.dropna().unique()))
        if not set(classes) <= {"0", "1"}:
            raise ValueError(LABEL_CLASSES_NOT_BINARY.format(
                label=source.label, file=files[0], classes=classes[:5]
            ))  # fmt: skip
    return files


# ---- what runs on the workers, one partition at a time ---------------------------------------


@dataclass(frozen=True)
class RowSpec:
    """How a partition file's rows become features, label, groups and part (sent to
    workers): ``label``, ``sensitive`` and ``features`` are read and hashed (the same before
    and after the screening), ``kept`` are the features the audit uses."""

    label: str
    positive_label: Any
    sensitive: tuple[str, ...]
    features: tuple[str, ...]
    seed: int
    sep: str | None
    shares: tuple[float, float, float]  # train, validation, test (the config's split section)
    kept: tuple[str, ...]  # the features the screening kept
    cuts: dict | None = None  # stratum -> its parts' cut points (stratum_cuts)


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
    part = np.searchsorted(default, uniform, side="right").astype(np.int8)
    for key in pd.unique(strata) if strata is not None and cuts else ():
        rows = strata == key
        part[rows] = np.searchsorted(cuts.get(key, default), uniform[rows], side="right")
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
    from fairpca.tasks.data import allocate

    cuts = {}
    weights = np.round(np.asarray(shares, dtype=float) * 1e6).astype(np.int64)
    for key, rows in histogram.groupby("stratum", sort=True):
        counts = np.bincount(rows["bin"], weights=rows["rows"], minlength=SPLIT_BINS)
        wanted = allocate(int(np.floor(counts.sum() * sum(shares) + 1e-9)), weights)
        running = np.concatenate([[0], np.cumsum(counts)])  # rows below each bin edge
        edges = [int(np.abs(running - target).argmin()) for target in np.cumsum(wanted)]
        cuts[str(key)] = tuple(edge / SPLIT_BINS for edge in edges)
    return cuts


def _labelled(file: Path, spec: RowSpec):
    """A partition's rows, binary label and groups (as text)."""
    columns = [spec.label, *spec.sensitive, *spec.features]
    frame = _read(file, spec.sep, columns).reset_index(drop=True)
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
    return frame[list(spec.kept)], y, groups, part


def _first_facts(numbered: tuple[int, Path], spec: RowSpec, rates: dict[str, float]):
    """One pass over the ``(index, file)`` partition: rows per (groups, part, label), the
    training rows' digest, and a seeded draw of the training and validation rows (each row
    with its part's ``rates``) with their labels, groups and parts."""
    index, file = numbered
    X, y, groups, part = _rows(file, spec)
    sizes = groups.assign(part=part, y=y).value_counts(sort=False).rename("rows").reset_index()
    train = np.flatnonzero(part == PART_CODES["train"])
    digest = hashlib.sha256()
    for piece in (X.iloc[train], pd.DataFrame({"y": y[train]}), groups.iloc[train]):
        digest.update(pd.util.hash_pandas_object(piece, index=False).to_numpy().tobytes())
    rate = np.array([rates.get(name, 0.0) for name in PART_CODES] + [0.0])[part]
    drawn = np.flatnonzero(np.random.default_rng([spec.seed, index]).random(len(y)) < rate)
    return sizes, digest.hexdigest(), X.iloc[drawn], y[drawn], groups.iloc[drawn], part[drawn]


def _encoded(file: Path, spec: RowSpec, preprocessor, parts: tuple[str, ...]):
    """A partition's rows of ``parts``: encoded features (float64 frame), label, groups,
    part."""
    X, y, groups, part = _rows(file, spec)
    rows = np.flatnonzero(np.isin(part, [PART_CODES[p] for p in parts]))
    # the encoder's output is a frame of the encoded columns' names (_passes sets it)
    encoded = preprocessor.transform(X.iloc[rows]).astype(np.float64).reset_index(drop=True)
    return encoded, y[rows], groups.iloc[rows].reset_index(drop=True), part[rows]


def _encoded_training_rows(file: Path, spec: RowSpec, preprocessor) -> pd.DataFrame:
    """A partition's training rows encoded, with the group columns (fair PCA's
    ``sensitive_columns``) and the label (equal opportunity's rows)."""
    out, y, groups, _ = _encoded(file, spec, preprocessor, ("train",))
    groups = {f"group:{column}": groups[column].to_numpy() for column in spec.sensitive}
    return out.assign(**groups, **{LABEL_COLUMN: y})


def _newton_terms(file: Path, spec: RowSpec, preprocessor, models: list) -> list:
    """For each ``(representation, weights)`` of ``models``: the logistic loss, its gradient
    and Hessian summed over the partition's training rows (features: the representation's,
    then 1 for the intercept)."""
    from scipy.special import expit, log_expit

    encoded, y, _, _ = _encoded(file, spec, preprocessor, ("train",))
    out = []
    for representation, weights in models:
        Z = np.hstack([np.asarray(representation.transform(encoded)), np.ones((len(y), 1))])
        score = Z @ weights
        p = expit(score)
        loss = -np.sum(y * log_expit(score) + (1 - y) * log_expit(-score))
        out.append((loss, Z.T @ (p - y), (Z * (p * (1 - p))[:, None]).T @ Z))
    return out


def _validation_scores(file: Path, spec: RowSpec, preprocessor, pipelines: dict):
    """The positive-class probability of each pipeline on the partition's validation rows
    (float32), their labels and groups."""
    encoded, y, groups, _ = _encoded(file, spec, preprocessor, ("validation",))
    scores = {name: steps.predict_proba(encoded)[:, 1].astype(np.float32)
              for name, steps in pipelines.items()}  # fmt: skip
    return scores, y.astype(np.int8), groups


def _cell_counts(keys: pd.DataFrame, y: np.ndarray, predicted, candidate: str) -> pd.DataFrame:
    """Rows per confusion cell (columns :data:`CELLS`) of ``candidate``'s 0/1 predictions for
    each distinct row of ``keys``."""
    cell = 2 * y + np.asarray(predicted).astype(np.int64)
    onehot = pd.DataFrame(np.eye(4, dtype=np.int64)[cell], columns=list(CELLS))
    table = pd.concat([keys.reset_index(drop=True), onehot], axis=1)
    counts = table.groupby(list(keys.columns), sort=False).sum().reset_index()
    return counts.assign(candidate=candidate)


def _count_cells(file: Path, spec: RowSpec, preprocessor, pipelines: dict, references: dict,
                 majority: int):  # fmt: skip
    """Confusion-cell counts per (candidate, part, groups) of the validation and test rows:
    of each candidate's pipeline (representation and classifier over the encoded features),
    each reference mitigation's ``predict(encoded, groups) -> 0/1``, and ``majority``, which
    predicts the training rows' majority class."""
    encoded, y, groups, part = _encoded(file, spec, preprocessor, ("validation", "test"))
    predictions = {"majority": np.full(len(y), majority)}
    predictions |= {name: pipeline.predict(encoded) for name, pipeline in pipelines.items()}
    predictions |= {name: predict(encoded.to_numpy(), groups)
                    for name, predict in references.items()}  # fmt: skip
    keys = groups.assign(part=part)
    counts = [_cell_counts(keys, y, predicted, name) for name, predicted in predictions.items()]
    return pd.concat(counts, ignore_index=True)


def _champion_cells(file: Path, spec: RowSpec, pipeline) -> pd.DataFrame:
    """Confusion-cell counts per group of a pipeline's predictions on the test rows (as
    :func:`_count_cells` gives them, of the candidate ``champion``)."""
    X, y, groups, part = _rows(file, spec)
    test = part == PART_CODES["test"]
    predicted = pipeline.predict(X[test])
    return _cell_counts(groups[test].assign(part=part[test]), y[test], predicted, "champion")


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


def rows_of_counts(counts: pd.DataFrame, sensitive: list[str]):
    """Labels, predictions and groups of rows with these confusion-cell counts per group:
    every measure of :mod:`fairpca.metrics` is a function of the counts, so the in-memory
    audit's own functions give on them what they give on the rows (one byte a row)."""
    repeats = counts[list(CELLS)].to_numpy(dtype=np.int64).T.ravel()  # cell by cell
    cell = np.repeat(np.arange(4, dtype=np.int8).repeat(len(counts)), repeats)  # 2 * y + p
    rows = np.repeat(np.tile(np.arange(len(counts)), 4), repeats)
    return cell // 2, cell % 2, counts[sensitive].iloc[rows].reset_index(drop=True)


def _summed(parts: list[pd.DataFrame], sensitive) -> pd.DataFrame:
    """The partitions' cell counts summed per (candidate, part, groups)."""
    keys = ["candidate", "part", *sensitive]
    return pd.concat(parts, ignore_index=True).groupby(keys, sort=False)[list(CELLS)].sum()


def _measure(cells: pd.DataFrame, passes: Passes, config, name: str, part: str,
             gated: bool = True) -> dict[str, float]:  # fmt: skip
    """A candidate's (or ``majority``'s) numbers on every row of ``part``, from its summed
    cell counts per group (:func:`_summed`): with ``gated``, what a candidate's row holds
    (the in-memory sweep's measures: metrics with intervals, the gate's standard errors, the
    share of the more frequent class), else :func:`counts_metrics`."""
    from fairpca.tasks.evaluate import gated_metrics, metric_options, one_class_share

    counts = cells.xs((name, PART_CODES[part]), level=("candidate", "part")).reset_index()
    sensitive = list(passes.spec.sensitive)
    options = metric_options(config.evaluation, config.seed)
    if gated:
        y, predicted, groups = rows_of_counts(counts, sensitive)
        metrics = gated_metrics(y, predicted, groups, options)
        metrics["one_class_share"] = one_class_share(predicted)
    else:
        metrics = counts_metrics(counts, sensitive, **options)
    return {k: float(v) for k, v in metrics.items() if np.isfinite(v)}


# ---- the passes over the partitions (on the cluster) -----------------------------------------


@dataclass
class Passes:
    """What the passes over the partitions found; only counts, statistics, bounded samples
    and fitted models, never the table's rows."""

    files: list[Path]
    spec: RowSpec
    sizes: pd.DataFrame  # rows per (groups, part, y)
    digest: str  # SHA-256 of the training rows, partition by partition
    sample: Any  # the in-memory samples as a Split (training, validation rows; no test rows)
    preprocessor: Any
    encoded: tuple  # the samples' training and validation rows, encoded (float64)

    def rows_of(self, part: str) -> int:
        return int(self.sizes.loc[self.sizes["part"] == PART_CODES[part], "rows"].sum())

    @property
    def majority(self) -> int:
        """The majority class of the training rows."""
        train = self.sizes[self.sizes["part"] == PART_CODES["train"]]
        return int(train.loc[train["y"] == 1, "rows"].sum() * 2 > train["rows"].sum())

    def labels(self, part: str) -> np.ndarray:
        """A part's labels, sorted (one byte a row): all that the choice reads of them."""
        per_label = self.sizes[self.sizes["part"] == PART_CODES[part]].groupby("y")["rows"].sum()
        return np.repeat(per_label.index.to_numpy(np.int8), per_label.to_numpy())


def _spec(config, files: list[Path]) -> RowSpec:
    from fairpca.tasks.data import typed_label

    source = config.source
    split = config.split
    taken = {source.label, *source.sensitive, *source.drop}
    features = tuple(c for c in _read(files[0], source.sep).columns if c not in taken)
    if not features:
        raise ValueError(f"{source.data} has no feature column besides label and sensitive.")
    shares = (split.train_share, split.validation_share, split.test_share)
    return RowSpec(source.label, typed_label(source), tuple(source.sensitive), features,
                   config.seed, source.sep, shares, kept=features)  # fmt: skip


def _per_file(function, files: list, *args) -> list:
    """``function(file, *args)`` for every file, on the cluster; each argument is sent
    once, as one key of the graph that every file's task reads (not copied into each)."""
    import dask

    task = dask.delayed(function, pure=True)
    shared = [dask.delayed(arg, pure=False, traverse=False) for arg in args]
    return list(dask.compute(*[task(file, *shared) for file in files]))


def _first_pass(files: list[Path], spec: RowSpec, n_rows: int, config):
    """Rows per (groups, part, label) (each part needs rows of both labels: to train, to
    choose and to test), the training digest, and the in-memory samples as a
    :class:`fairpca.tasks.data.Split`: :data:`SAMPLE_ROWS` rows of each of the training and
    validation parts, seeded and stratified by label x group (each partition draws a little
    more than its share; the union is cut to size by
    :func:`fairpca.tasks.data.stratified_sample`), with every feature and no test rows (the
    test part is only measured, on the partitions)."""
    from fairpca.tasks.data import Split, stratified_sample

    shares = dict(zip(PART_CODES, spec.shares, strict=False))
    rates = {part: min(1.0, 1.2 * SAMPLE_ROWS[part] / max(n_rows * shares[part], 1.0))
             for part in SAMPLE_ROWS}  # fmt: skip
    facts = _per_file(_first_facts, list(enumerate(files)), spec, rates)
    keys = [*spec.sensitive, "part", "y"]
    sizes = pd.concat([f[0] for f in facts]).groupby(keys, sort=False)["rows"].sum()
    found = sizes.groupby(["part", "y"]).sum()
    for part, code in PART_CODES.items():
        negative, positive = (int(found.get((code, label), 0)) for label in (0, 1))
        if not negative or not positive:
            raise ValueError(ONE_LABEL_IN_A_PART.format(
                part=part, data=config.source.data, negative=negative, positive=positive
            ))  # fmt: skip
    X, groups = (pd.concat([f[i] for f in facts], ignore_index=True) for i in (2, 4))
    y, part = (np.concatenate([f[i] for f in facts]) for i in (3, 5))
    values = {}
    for name in SAMPLE_ROWS:
        inside = np.flatnonzero(part == PART_CODES[name])
        drawn = stratified_sample(y[inside], groups.iloc[inside], SAMPLE_ROWS[name], spec.seed,
                                  floor=config.evaluation.min_group_size)  # fmt: skip
        rows = inside[drawn]
        values |= {f"X_{name}": X.iloc[rows].reset_index(drop=True), f"y_{name}": y[rows],
                   f"s_{name}": groups.iloc[rows].reset_index(drop=True)}  # fmt: skip
    values |= {"X_test": X.iloc[:0], "y_test": y[:0], "s_test": groups.iloc[:0]}
    digest = hashlib.sha256("".join(f[1] for f in facts).encode()).hexdigest()
    return sizes.reset_index(), digest, Split(**values)


def _screen(sample, config) -> tuple[dict[str, str], list[dict]]:
    """The in-memory audit's screening (identifiers and other unusable columns, target
    leakage, proxies of a sensitive attribute) on a seeded stratified sample of at most
    :data:`SCREEN_ROWS` training rows: the excluded columns with their reasons and the
    record's entries."""
    from types import SimpleNamespace

    from fairpca.datasets import screen_columns
    from fairpca.tasks.data import screen_training_rows, stratified_sample

    rows = stratified_sample(sample.y_train, sample.s_train, SCREEN_ROWS, config.seed)
    X, y = sample.X_train.iloc[rows].reset_index(drop=True), sample.y_train[rows]
    source = config.source
    unusable = screen_columns(X, keep=[c for c in source.keep if c in X]).excluded
    dataset = SimpleNamespace(
        X=X[[c for c in X.columns if c not in unusable]],
        sensitive=sample.s_train.iloc[rows].reset_index(drop=True), screened=unusable,
    )  # fmt: skip
    leaking, entries = screen_training_rows(
        dataset, y, np.arange(len(y)), source, config.evaluation.min_group_size
    )
    return {**unusable, **leaking}, entries


def _passes(files: list[Path], config, clock) -> Passes:
    """The split, the counts and the samples (two passes), the screening and the encoder
    on the samples (timed by the :class:`fairpca.tasks.stages.Stopwatch` ``clock``)."""
    from fairpca.tasks.represent import make_preprocessor

    with clock("load_data"):
        spec = _spec(config, files)
        histogram = pd.concat(_per_file(_uniform_histogram, files, spec), ignore_index=True)
        spec = dataclasses.replace(spec, cuts=stratum_cuts(histogram, spec.shares))
        sizes, digest, sample = _first_pass(files, spec, int(histogram["rows"].sum()), config)
    with clock("encode"):
        excluded, entries = _screen(sample, config)
        kept = [c for c in spec.features if c not in excluded]
        spec = dataclasses.replace(spec, kept=tuple(kept))
        sample = dataclasses.replace(
            sample, X_train=sample.X_train[kept], X_validation=sample.X_validation[kept],
            X_test=sample.X_test[kept], leaking=excluded, screening=entries,
        )  # fmt: skip
        # the in-memory audit's encoder, with pandas output (set before the fit, so every
        # step sees the names it was fitted with): fair PCA keeps the encoded columns' names
        preprocessor = make_preprocessor(sample.X_train, config.representation.min_category_count)
        preprocessor.set_output(transform="pandas").fit(sample.X_train)
        encoded = tuple(np.asarray(preprocessor.transform(X), dtype=np.float64)
                        for X in (sample.X_train, sample.X_validation))  # fmt: skip
    return Passes(files, spec, sizes, digest, sample, preprocessor, encoded)


# ---- the search on the samples, the shortlist refitted on the partitions ---------------------


def _search(config, passes: Passes):
    """The in-memory audit's wide search (k, C, the lambda sweep of every variant) on the
    samples, as the in-memory audit searches a sample of a large table: the candidates'
    table, the searches, what was skipped (variants that cannot be fitted, classifiers
    searched but not refitted), the resolved config, the k record and the searched rows."""
    from fairpca.tasks.data import search_sample
    from fairpca.tasks.evaluate import shared_mmd_sigma
    from fairpca.tasks.represent import resolve_k
    from fairpca.tasks.select import GatePolicy, require_fair_variant
    from fairpca.tasks.sweep import DEFAULT_C_GRID, search_representation, sweep_representation

    representation, evaluation, selection = (
        config.representation, config.evaluation, config.selection
    )  # fmt: skip
    variants = list(representation.variants)
    width = passes.encoded[0].shape[1]
    k_record = resolve_k(representation.k, width, passes.sample.s_train, variants,
                         representation.k_grid)  # fmt: skip
    representation = representation.model_copy(update={"k_grid": k_record["grid"]})
    config = config.model_copy(update={"representation": representation})
    searched, encoded = search_sample(
        passes.sample, passes.encoded, config.split.search_rows, config.seed,
        evaluation.min_group_size,
    )  # fmt: skip
    sigma = shared_mmd_sigma(encoded[0], representation.k_grid[0],
                             max_rows=representation.metric_max_rows, seed=config.seed)  # fmt: skip
    searches, skipped, rows = {}, {}, []
    for variant in variants:
        try:
            search = search_representation(
                variant, *encoded, searched, representation.k_grid, representation,
                evaluation, selection, config.seed,
            )  # fmt: skip
        except ValueError as error:
            skipped[variant] = str(error)
            continue
        searches[variant] = search
        rows += sweep_representation(
            search.representation, *encoded, searched, representation, evaluation,
            config.seed, sigma, C=search.C, scoring=selection.select_by,
            lambdas=search.lambdas, policy=GatePolicy.from_config(selection),
            C_grid=list(evaluation.logreg_C or DEFAULT_C_GRID),
        ).rows  # fmt: skip
    require_fair_variant(variants, skipped, width)
    skipped |= {
        f"classifier:{name}": f"{name} was searched on the sample only; the Dask route "
        "refits logistic regression (logreg, logreg_tuned) exactly on every row, so only those "
        "are shortlisted"
        for name in evaluation.classifiers
        if name not in CLASSIFIERS
    }
    return pd.DataFrame(rows), searches, skipped, config, k_record, searched


def _refit_representations(passes: Passes, candidates: list[dict], searches: dict, config):
    """Each shortlisted (variant, k) refitted on every training row from the partitions'
    sufficient statistics (:func:`fairpca._fair_pca.fit_from_shared_statistics`: one pass
    for fair PCA, Fair PCA-S and the standard PCA directions at every k, one more for equal
    opportunity); standard PCA is the fitted :class:`sklearn.decomposition.PCA` whose
    directions are fair PCA's ``pca_components_`` at that k (the same statistics' leading
    eigenvectors)."""
    import dask.dataframe as dd
    from sklearn.decomposition import PCA

    from fairpca._fair_pca import fit_from_shared_statistics
    from fairpca.tasks.represent import FittedRepresentation, make_representation

    start = time.perf_counter()
    columns = list(passes.preprocessor.get_feature_names_out())
    groups = [f"group:{c}" for c in passes.spec.sensitive]
    dtypes = dict.fromkeys(columns, np.float64) | dict.fromkeys(groups, object)
    meta = pd.DataFrame(columns=[*dtypes, LABEL_COLUMN]).astype(dtypes | {LABEL_COLUMN: np.int64})
    rows = dd.from_map(_encoded_training_rows, passes.files, args=[passes.spec,
                       passes.preprocessor], meta=meta, enforce_metadata=False)  # fmt: skip
    estimators = {}
    for variant, k in dict.fromkeys((c["variant"], int(c["k"])) for c in candidates):
        facts = searches[variant].representation.facts
        fair = "fair_pca" if variant == "pca" else variant
        equalize = facts.get("equalize_covariance", config.representation.equalize_covariance)
        estimator = make_representation(fair, k, equalize_covariance=equalize, seed=config.seed)
        estimators[variant, k] = estimator.set_params(sensitive_columns=groups)
    fit_from_shared_statistics(list(estimators.values()), rows.drop(columns=[LABEL_COLUMN]),
                               rows[LABEL_COLUMN])  # fmt: skip
    seconds = time.perf_counter() - start
    out = {}
    for (variant, k), fair in estimators.items():
        fair.set_params(sensitive_columns=None)  # the pipeline passes features only
        if variant != "pca":
            facts = {"k": float(k), "mean_gap_fit": fair.mean_gap_}
            out[variant, k] = FittedRepresentation(variant, fair, seconds, facts)
            continue
        pca = PCA(n_components=k)
        pca.components_ = np.array(fair.pca_components_[:k], dtype=np.float64)
        pca.mean_ = np.array(fair.mean_, dtype=np.float64)
        pca.n_components_, pca.n_features_in_ = k, fair.n_features_in_
        pca.explained_variance_ = np.ones(k)  # only read when whitening, which is off
        if hasattr(fair, "feature_names_in_"):
            pca.feature_names_in_ = fair.feature_names_in_
        out[variant, k] = FittedRepresentation(variant, pca, seconds, {"k": float(k)})
    return out


def _fit_logistic(passes: Passes, problems: dict) -> dict:
    """Logistic regressions fitted exactly on every training row of the partitions, as
    scikit-learn's ``LogisticRegression(C)`` minimises ``1/2 ||w||^2 + C sum log loss``
    (intercept not penalised): Newton's method, each step one pass over the partitions for
    every problem at once (loss, gradient and Hessian summed on the workers); a step that
    raises the objective is halved. ``problems``: name -> (representation, C). Returns
    name -> fitted :class:`~sklearn.linear_model.LogisticRegression`."""
    from sklearn.linear_model import LogisticRegression

    state = {name: {"w": np.zeros(len(rep.get_feature_names_out()) + 1), "iterations": 0}
             for name, (rep, _) in problems.items()}  # fmt: skip
    active = list(problems)
    for _ in range(NEWTON_MAX_ITER):
        if not active:
            break
        models = [(problems[name][0], state[name]["w"]) for name in active]
        parts = _per_file(_newton_terms, passes.files, passes.spec, passes.preprocessor, models)
        for j, name in enumerate(list(active)):
            loss, gradient, hessian = (sum(part[j][i] for part in parts) for i in range(3))
            if _newton_step(state[name], problems[name][1], loss, gradient, hessian):
                active.remove(name)
    fitted = {}
    for name, (_, C) in problems.items():
        w = state[name]["w"]
        model = LogisticRegression(C=C, max_iter=1000)
        model.coef_, model.intercept_ = w[None, :-1].copy(), w[-1:].copy()
        model.classes_, model.n_features_in_ = np.array([0, 1]), w.size - 1
        model.n_iter_ = np.array([state[name]["iterations"]], dtype=np.int32)
        fitted[name] = model
    return fitted


def _newton_step(state: dict, C: float, loss: float, gradient, hessian) -> bool:
    """One safeguarded Newton step of ``state`` (its weights ``w``; after a step, the best
    objective with its weights and the step); True once converged."""
    w = state["w"]
    penalty = np.r_[np.ones(w.size - 1), 0.0]  # the intercept is not penalised
    objective = C * loss + 0.5 * np.sum(penalty * w * w)
    best = state.get("best")
    if best is not None and objective > best[0] * (1 + 1e-12):  # overshot: halve the step
        state["step"] = state["step"] / 2
        state["w"] = best[1] - state["step"]
        return bool(np.max(np.abs(state["step"])) < NEWTON_TOL)
    step = np.linalg.solve(C * hessian + np.diag(penalty), C * gradient + penalty * w)
    state["best"], state["step"] = (objective, w), step
    state["w"], state["iterations"] = w - step, state["iterations"] + 1
    return bool(np.max(np.abs(step)) < NEWTON_TOL * (1 + np.max(np.abs(w))))


def _refit_classifiers(passes: Passes, candidates: list[dict], representations: dict, config,
                       searches: dict) -> dict:  # fmt: skip
    """Each shortlisted candidate's classifier fitted on every training row
    (:func:`_fit_logistic`; the paper's C for ``logreg``, the searched one for
    ``logreg_tuned``) on its representation at its lambda (a copy), and ``logreg_tuned``'s
    probability threshold chosen for ``select_by`` on every validation row, meeting the gate
    there where it can (:func:`fairpca.tasks.sweep.gated_threshold`). Returns name ->
    pipeline over the encoded features (representation, then the classifier)."""
    from sklearn.model_selection import FixedThresholdClassifier
    from sklearn.pipeline import Pipeline

    from fairpca.tasks.select import GatePolicy
    from fairpca.tasks.sweep import ThresholdGate, gated_threshold, paper_C

    problems = {}
    for row in candidates:
        given = row.get("C_given", searches[row["variant"]].C)
        tuned = row["classifier"] == "logreg_tuned" and given is not None and np.isfinite(given)
        estimator = copy.deepcopy(representations[row["variant"], int(row["k"])].estimator)
        lam = row.get("lambda")
        if "tradeoff" in estimator.get_params() and lam is not None and np.isfinite(lam):
            estimator.set_params(tradeoff=float(lam))
        problems[candidate_key(row)] = (estimator, float(given) if tuned else
                                        paper_C(passes.rows_of("train")))  # fmt: skip
    models = _fit_logistic(passes, problems)
    pipelines = {name: Pipeline([("represent", problems[name][0]), ("classify", model)])
                 for name, model in models.items()}  # fmt: skip
    tuned = [candidate_key(r) for r in candidates if r["classifier"] == "logreg_tuned"]
    if tuned:
        parts = _per_file(_validation_scores, passes.files, passes.spec, passes.preprocessor,
                          {name: pipelines[name] for name in tuned})  # fmt: skip
        y = np.concatenate([part[1] for part in parts])
        groups = pd.concat([part[2] for part in parts], ignore_index=True)
        gate = ThresholdGate(GatePolicy.from_config(config.selection), groups,
                             config.evaluation.min_group_size)  # fmt: skip
        for name in tuned:
            scores = np.concatenate([part[0][name] for part in parts]).astype(np.float64)
            threshold = gated_threshold(scores, y, config.selection.select_by, gate)
            model = FixedThresholdClassifier(models[name], threshold=threshold)
            model.estimator_ = models[name]
            pipelines[name].steps[-1] = ("classify", model)
    return pipelines


def candidate_key(row: dict) -> str:
    """A shortlisted candidate's name on the cluster (variant, k, lambda, classifier, C)."""
    return "|".join(str(row.get(key)) for key in ("variant", "k", "lambda", "classifier",
                                                  "C_given"))  # fmt: skip


IDENTITY = ("variant", "k", "lambda", "lambda_index", "classifier", "C", "C_given", "n_features")


@dataclass
class PartitionAudit:
    """What the Dask route returns to the flow: the record, the candidates' table, the
    chosen pipeline and ``score(pipeline)``, a champion's metrics on the test partitions
    (while the client is open)."""

    record: Any
    table: pd.DataFrame
    pipeline: Any
    score: Any
    measured: pd.DataFrame | None = None  # the shortlist measured on every validation row
    references: list | None = None  # the references as the decision read them


def audit_partitions(config, out_dir: Path, *, kind: str, started_at: datetime,
                     tags: dict[str, str]) -> PartitionAudit:  # fmt: skip
    """The Dask route of the audit, from the partitioned table to the written model and the
    record (see the module docstring), on the current ``distributed.Client``
    (:func:`connect`). The flow writes, seals and logs it as any audit."""
    from sklearn.pipeline import Pipeline

    from fairpca.tasks.references import fit_references
    from fairpca.tasks.select import majority_accuracy_of, registrable, shortlist
    from fairpca.tasks.stages import Stopwatch

    clock = Stopwatch()
    passes = _passes(check_partitioned_source(config), config, clock)
    sensitive = passes.spec.sensitive
    with clock("search"):
        table, searches, skipped, config, k_record, searched = _search(config, passes)
    with clock("refit"):
        # the SHORTLIST best of the wide search by the audit's own order and the best
        # unconstrained PCA (select.shortlist), of the classifiers the route fits
        majority = majority_accuracy_of(searched.y_train, searched.y_validation)
        fitted = registrable(table[table["classifier"].isin(CLASSIFIERS)],
                             config.selection.allow_row_storing_models)  # fmt: skip
        candidates = shortlist(fitted, majority, config.selection, SHORTLIST)
        representations = _refit_representations(passes, candidates, searches, config)
        pipelines = _refit_classifiers(passes, candidates, representations, config, searches)
    with clock("references"):
        # the in-memory audit's reference mitigations, searched and fitted on the samples;
        # the test part is measured on the partitions: the validation sample stands in here
        train, validation = passes.encoded
        standing_in = dataclasses.replace(passes.sample, **{
            f"{name}_test": getattr(passes.sample, f"{name}_validation") for name in ("X", "y", "s")
        })  # fmt: skip
        references = fit_references({"train": train, "validation": validation, "test": validation},
                                    standing_in, config.evaluation, config.seed, config.selection,
                                    config.split.search_rows)  # fmt: skip
    with clock("evaluate"):  # one pass: every candidate's and reference's cell counts
        predictors = {f"reference:{r['name']}": r["predict"] for r in references if "predict" in r}
        cells = _summed(_per_file(_count_cells, passes.files, passes.spec, passes.preprocessor,
                                  pipelines, predictors, passes.majority), sensitive)  # fmt: skip
        measure = functools.partial(_measure, cells, passes, config)
        measured = pd.DataFrame([{k: row[k] for k in IDENTITY if k in row}
                                 | {"validation_rows": passes.rows_of("validation")}
                                 | measure(candidate_key(row), "validation")
                                 for row in candidates])  # fmt: skip
        choice, reported, references = _decided(measure, measured, references, passes, config,
                                                searched)  # fmt: skip
    steps = pipelines[candidate_key(choice.chosen)].steps
    pipeline = Pipeline([("preprocess", passes.preprocessor), *steps])
    record = _record(config, out_dir, passes, pipeline, representations, searches, kind=kind,
                     started_at=started_at, choice=choice, reported=reported, table=table,
                     references=references, skipped={**SKIPPED, **skipped}, k_record=k_record,
                     timings=clock.timings(), tags={"fairpca.route": "dask", **tags})  # fmt: skip

    def score(champion) -> dict[str, float]:
        """A champion's metrics on this audit's test partitions (counts summed on the cluster)."""
        parts = _per_file(_champion_cells, passes.files, passes.spec, champion)
        return _measure(_summed(parts, sensitive), passes, config, "champion", "test", gated=False)

    return PartitionAudit(record, table, pipeline, score, measured, references)


def _decided(measure, measured: pd.DataFrame, references: list[dict], passes: Passes, config,
             searched):  # fmt: skip
    """The in-memory audit's choice (:func:`fairpca.tasks.select.choose`: eligibility, the
    gate, certification) on the shortlist measured on every validation row; each reference's
    validation and test numbers on every row of those parts, judged as a candidate is; what
    is reported of the choice (validation and test, the majority class and unconstrained PCA
    beside it) and the decision after the references
    (:func:`fairpca.tasks.select.judge_chosen`, as in memory). ``measure``: :func:`_measure`
    of the cell counts. Returns the choice, what is reported and the references."""
    from fairpca.tasks.decision import note
    from fairpca.tasks.evaluate import validation_metrics
    from fairpca.tasks.record import unjudged_groups
    from fairpca.tasks.select import choose, ineligibility, judge_chosen

    choice = choose(measured, passes.labels("train"), passes.labels("validation"),
                    config.selection)  # fmt: skip
    where = (
        f"the {len(measured)} best candidates of the wide search on a stratified sample "
        f"({len(searched.y_train):,} training, {len(searched.y_validation):,} validation rows) "
        f"were refitted on all {passes.rows_of('train'):,} training rows of the Dask "
        f"partitions and measured on all {passes.rows_of('validation'):,} validation rows, "
        "where the choice was made"
    )
    choice = dataclasses.replace(choice, decision=choice.decision.adding(note(where)))
    fitted_on = (f"; fitted on a stratified sample of {passes.sample.y_train.size:,} training "
                 "rows, measured on every validation and test row")  # fmt: skip
    judged = []
    for reference in references:
        name = f"reference:{reference['name']}"
        if "predict" in reference:
            validation = measure(name, "validation")
            reference = {
                **{k: v for k, v in reference.items() if k != "predict"},
                "config": reference["config"] + fitted_on,
                "validation": validation, "test": measure(name, "test"),
                "ineligible": ineligibility(validation, choice.majority_accuracy, config.selection),
            }  # fmt: skip
        judged.append(reference)
    reported = {"majority": {"class": passes.majority, "test": measure("majority", "test", False),
                             "validation": {"accuracy": choice.majority_accuracy}}}  # fmt: skip
    for name, row in (("chosen", choice.chosen), ("pca", choice.pca_row)):
        if row is not None:
            reported[name] = {"validation": validation_metrics(row),
                              "test": measure(candidate_key(row), "test", False)}  # fmt: skip
    split = {f"n_{part}": passes.rows_of(part) for part in PART_CODES}
    unjudged = unjudged_groups(_group_sizes(passes, config.evaluation),
                               reported["chosen"]["validation"], split,
                               config.evaluation.min_group_size)  # fmt: skip
    decided = judge_chosen(choice, judged, reported["chosen"]["test"], unjudged, config.selection)
    return decided, reported, judged


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
    withheld = {attribute: cells[attribute].nunique() - len(published[attribute])
                for attribute in sensitive}  # fmt: skip
    return with_withheld(published, withheld, evaluation.min_group_size)


def _record(config, out_dir: Path, passes: Passes, pipeline, representations: dict,
            searches: dict, **fields):  # fmt: skip
    """The :class:`fairpca.tasks.record.AuditRecord` of the Dask route, by the in-memory
    route's :func:`fairpca.tasks.record.build_record` (``fields``: what the route passes it
    as it is), with the facts of the rows from the counts and the files' SHA-256s (named
    relative to their common folder); the chosen pipeline saved under ``out_dir/model`` and
    the projection matrices beside it."""
    from fairpca.tasks.evaluate import pip_requirements
    from fairpca.tasks.mlflow_logging import as_model_input, input_example, save_model_locally
    from fairpca.tasks.onnx_export import save_graph
    from fairpca.tasks.record import RowFacts, build_record, frontier_points
    from fairpca.tasks.report import write_matrices
    from fairpca.tasks.trust import model_digest, sha256_file

    sample = passes.sample
    files = passes.files
    example = input_example(as_model_input(sample.X_train),
                            config.representation.min_category_count)  # fmt: skip
    model_dir = save_model_locally(
        pipeline, out_dir, input_example=example, pip_requirements=pip_requirements()
    )
    # the ONNX graph checked on the validation sample (the partitions' rows are not in memory)
    graph = save_graph(model_dir, pipeline, sample.X_validation, checked_on="validation sample")
    representations = {variant: rep for (variant, _), rep in representations.items()}
    root = Path(os.path.commonpath([f.parent for f in files]))
    facts = RowFacts(
        rows={part: passes.rows_of(part) for part in PART_CODES},
        group_sizes=_group_sizes(passes, config.evaluation),
        test_group_sizes=_group_sizes(passes, config.evaluation, [PART_CODES["test"]]),
        sensitive=list(passes.spec.sensitive), screening=sample.screening,
        training_data_sha256=passes.digest,
        data_source={"kind": "file", "name": Path(config.source.data).name,
                     "sha256": {str(f.relative_to(root)): sha256_file(f) for f in files}},
    )  # fmt: skip
    return build_record(
        config, run_name=Path(out_dir).name, split=facts, diagnostics={},
        representations=representations, hashes=write_matrices(out_dir, representations),
        frontier=frontier_points(searches, fields["table"], config.selection), onnx=graph,
        model_sha256=sha256_file(next(model_dir.glob("*.skops"))),
        model_digest=model_digest(pipeline, passes.digest),
        params={"route": "dask", "sample_rows": str(sample.y_train.size),
                "screening_rows": str(min(SCREEN_ROWS, sample.y_train.size))}, **fields,
    )  # fmt: skip
