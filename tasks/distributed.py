"""The audit's Dask route: a table larger than one machine, kept in partitions on a
``dask.distributed`` cluster.

``fairpca audit --data FOLDER_OR_GLOB --dask-address tcp://host:8786`` reads a folder of
Parquet files (or a glob of CSV parts) as a Dask DataFrame, one partition per file, and never
gathers its rows:

- the split: each row's part (train / validation / test, 60 / 20 / 20) is drawn from a
  seeded hash of the row's content, so it does not depend on the partitioning and identical
  rows share a part; it is not stratified (a stratified split needs every row's label and
  group at once);
- the encoder (one-hot, standardisation) is fitted on a seeded sample of at most
  ``ENCODER_SAMPLE_ROWS`` training rows drawn from every partition;
- fair PCA is fitted from partition statistics (:meth:`fairpca.FairPCA.fit` on the Dask
  DataFrame: the library's Dask route), once per k of the grid;
- the classifiers, ``SGDClassifier(loss="log_loss")`` for each (k, C), learn by
  ``partial_fit`` on the training rows of one partition after the other (partitions in
  order, rows shuffled by a seeded draw, ``EPOCHS`` passes), on the workers;
- every metric is computed from confusion-cell counts per intersection group summed over the
  partitions, by the same code as the in-memory audit (:func:`fairpca.metrics.group_fairness`
  on the released rows, the same small-group suppression), with closed-form 95% intervals:
  Wilson for rates, the delta method for differences, the ratio and balanced accuracy.

The record, report and MLflow run are the in-memory audit's, without what needs every row in
memory (the lambda sweep, the cross-validated choice, the reference mitigations, the
representation diagnostics): those are listed in the record's ``skipped`` with the reason.
Dask is imported only here, when this route runs (extra ``fairpca[dask]``).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import math
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CONNECT_TIMEOUT_S",
    "SHARES",
    "audit_partitions",
    "check_partitioned_source",
    "counts_metrics",
    "on_partitions",
    "part_of_rows",
    "partition_files",
]

SHARES = (0.6, 0.2, 0.2)  # train, validation, test
PART_CODES = {"train": 0, "validation": 1, "test": 2}
CONNECT_TIMEOUT_S = 3
ENCODER_SAMPLE_ROWS = 20_000
EPOCHS = 2
CLASSIFIER = "sgd_logreg"
CELLS = ("TN", "FP", "FN", "TP")
Z95 = 1.959963984540054
GLOB_CHARACTERS = "*?["


# ---- the source ------------------------------------------------------------------------------


def on_partitions(source) -> bool:
    """Whether an audit's ``source`` is a partitioned table (a folder, or a glob of files),
    which the Dask route reads."""
    data = getattr(source, "data", None)
    if data is None:
        return False
    return Path(data).is_dir() or any(c in str(data) for c in GLOB_CHARACTERS)


def partition_files(data: str | Path) -> list[Path]:
    """The files of a partitioned table, sorted: a folder's ``*.parquet`` files (also in
    sub-folders, as Hive partitioning writes them), or the files a glob matches.

    Raises
    ------
    ValueError
        Nothing matches, or the files are neither all Parquet nor all CSV.
    """
    path = Path(data)
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        what = f"the folder {path} holds no .parquet file"
    else:
        files = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_file())
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
    return "csv" if name.endswith((".csv", ".csv.gz", ".tsv")) else None


def connect(address: str, timeout: float = CONNECT_TIMEOUT_S):
    """A ``distributed.Client`` of the scheduler at ``address`` (``"local"``: a temporary
    LocalCluster of two single-threaded workers), or a :class:`ValueError` within
    ``timeout`` seconds when it cannot be reached."""
    try:
        from distributed import Client
    except ImportError as error:  # pragma: no cover - the dask extra is part of dev
        raise ValueError(
            "a partitioned table is audited on Dask: pip install 'fairpca[dask]'."
        ) from error
    if address == "local":
        return Client(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError) as error:
        raise ValueError(
            f"no Dask scheduler answered at {address} within {timeout:g} s ({error}); start "
            "one (`dask scheduler` and `dask worker ADDRESS`) or pass the address it prints."
        ) from None


def check_partitioned_source(config) -> list[Path]:
    """The checks before any work: a scheduler address, files that match, the columns
    named in their schema, a reachable scheduler (closed again). Returns the files.

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
    files = partition_files(source.data)
    columns = _columns_of(files[0], source.sep)
    missing = [c for c in [source.label, *source.sensitive, *source.drop] if c not in columns]
    if missing:
        raise ValueError(
            f"{files[0]} has no column(s) {missing}; its columns are {sorted(columns)[:20]}."
        )
    connect(config.dask_address).close()
    return files


def _columns_of(file: Path, sep: str | None) -> list[str]:
    if _kind(file) == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(file).names)
    return list(pd.read_csv(file, nrows=0, sep=sep or None, engine="python").columns)


def _read(files: list[Path], sep: str | None):
    import dask.dataframe as dd

    names = [str(f) for f in files]
    if _kind(files[0]) == "parquet":
        return dd.read_parquet(names)
    return dd.read_csv(names, sep=sep or ",", blocksize=None)  # one partition per file


# ---- what runs on the workers, one partition at a time ---------------------------------------


@dataclass(frozen=True)
class RowSpec:
    """How a partition's rows become features, label, groups and part (sent to workers)."""

    label: str
    positive_label: Any
    sensitive: tuple[str, ...]
    features: tuple[str, ...]
    seed: int


def _hash_key(seed: int) -> str:
    return hashlib.sha256(f"fairpca-split-{seed}".encode()).hexdigest()[:16]


def part_of_rows(frame: pd.DataFrame, seed: int) -> np.ndarray:
    """Each row's part (0 train, 1 validation, 2 test, by :data:`SHARES`): a seeded 64-bit
    hash of the row's values (as text), read as a uniform number in [0, 1)."""
    hashed = pd.util.hash_pandas_object(
        frame.astype(str), index=False, hash_key=_hash_key(seed)
    ).to_numpy()
    uniform = (hashed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.searchsorted(np.cumsum(SHARES)[:-1], uniform, side="right").astype(np.int8)


def _rows(frame: pd.DataFrame, spec: RowSpec):
    """Features, binary label, groups (as text) and part of a partition's rows."""
    label = frame[spec.label]
    if spec.positive_label is not None:
        y = (label == spec.positive_label).to_numpy(dtype=np.int64)
    else:
        y = label.astype("int64").to_numpy()
        if not np.isin(y, (0, 1)).all():
            raise ValueError(
                f"label column {spec.label!r} is not 0/1; pass --positive-label <value>."
            )
    groups = frame[list(spec.sensitive)].astype(str).reset_index(drop=True)
    features = frame[list(spec.features)].reset_index(drop=True)
    return features, y, groups, part_of_rows(frame, spec.seed)


def _first_facts(frame: pd.DataFrame, spec: RowSpec, index: int, per_partition: int):
    """One pass: rows per (part, groups, label), the training rows' digest and a seeded
    sample of training rows (for the encoder)."""
    X, y, groups, part = _rows(frame, spec)
    keys = groups.assign(part=part, y=y)
    sizes = keys.value_counts(sort=False).rename("rows").reset_index()
    train = np.flatnonzero(part == PART_CODES["train"])
    rng = np.random.default_rng([spec.seed, index])
    sample = np.sort(rng.choice(train, size=min(per_partition, train.size), replace=False))
    digest = hashlib.sha256()
    for piece in (X.iloc[train], pd.DataFrame({"y": y[train]}), groups.iloc[train]):
        digest.update(pd.util.hash_pandas_object(piece, index=False).to_numpy().tobytes())
    sampled = (X.iloc[sample], y[sample], groups.iloc[sample])
    return sizes, digest.hexdigest(), sampled


def _encoded_training_rows(frame, spec: RowSpec, preprocessor, columns: list[str]):
    """The training rows encoded, with the group columns (fair PCA's ``sensitive_columns``)."""
    X, _, groups, part = _rows(frame, spec)
    train = part == PART_CODES["train"]
    out = preprocessor.transform(X[train]).astype(np.float64).reset_index(drop=True)[columns]
    for column in spec.sensitive:
        out[f"group:{column}"] = groups[column].to_numpy()[train]
    return out


def _train_step(models, frame, spec: RowSpec, preprocessor, representations, step: tuple):
    """``partial_fit`` of every (k, C) classifier on one partition's training rows, in a
    seeded random order (``step``: epoch and partition index)."""
    X, y, _, part = _rows(frame, spec)
    train = np.flatnonzero(part == PART_CODES["train"])
    if train.size == 0:
        return models
    order = np.random.default_rng([spec.seed, *step]).permutation(train)
    encoded = preprocessor.transform(X.iloc[order])
    models = {key: _copy(model) for key, model in models.items()}
    for k, representation in representations.items():
        projected = representation.transform(encoded)
        for (model_k, _), model in models.items():
            if model_k == k:
                model.partial_fit(projected, y[order], classes=np.array([0, 1]))
    return models


def _copy(model):
    import copy

    return copy.deepcopy(model)


def _count_cells(frame, spec: RowSpec, preprocessor, representations, models):
    """Confusion-cell counts per (part, candidate, groups) of the validation and test rows;
    candidate ``majority`` counts the labels alone (its prediction is set on the client)."""
    X, y, groups, part = _rows(frame, spec)
    rows = np.flatnonzero(part != PART_CODES["train"])
    encoded = preprocessor.transform(X.iloc[rows])
    keys = groups.iloc[rows].reset_index(drop=True).assign(part=part[rows])
    predictions = {"majority": np.zeros(rows.size, dtype=np.int64)}
    for (k, C), model in models.items():
        projected = representations[k].transform(encoded)
        predictions[f"{k}:{C!r}"] = model.predict(projected).astype(np.int64)
    tables = []
    for candidate, predicted in predictions.items():
        cell = 2 * y[rows] + predicted
        onehot = pd.DataFrame(np.eye(4, dtype=np.int64)[cell], columns=list(CELLS))
        table = pd.concat([keys, onehot], axis=1).groupby(list(keys.columns), sort=False).sum()
        tables.append(table.reset_index().assign(candidate=candidate))
    return pd.concat(tables, ignore_index=True)


# ---- metrics from counts ---------------------------------------------------------------------


def released_problem(counts: pd.DataFrame, sensitive: list[str], min_group_size: int,
                     allow_small_groups: bool = False):  # fmt: skip
    """The library's problem of rows whose confusion-cell counts per intersection group are
    ``counts`` (columns ``sensitive`` and :data:`CELLS`), released as
    :func:`fairpca.metrics.group_fairness` releases rows (groups below ``min_group_size``
    withheld), and its report: the same numbers as on the rows themselves."""
    from fairpca.metrics import _counts, _fairness

    counts = counts[counts[list(CELLS)].sum(axis=1) > 0].reset_index(drop=True)
    # One stand-in row per intersection group gives the groupings, labels and names exactly
    # as the rows would; the counts are then the summed ones.
    stand_in = np.zeros(len(counts), dtype=np.int64)
    problem = _counts.fairness_problem(
        stand_in, stand_in, counts[sensitive], 1, min_group_size,
        allow_small_groups=allow_small_groups,
    )  # fmt: skip
    summed = np.zeros_like(problem.counts)
    np.add.at(summed, problem.cell, counts[list(CELLS)].to_numpy(dtype=np.float64))
    problem = dataclasses.replace(problem, counts=summed)
    released = _fairness._released(problem)
    return released[0], _fairness._report(*released)


def wilson(hits: float, trials: float) -> tuple[float, float]:
    """Wilson's 95% score interval of ``hits / trials`` (NaN without trials)."""
    if trials <= 0:
        return math.nan, math.nan
    p, z2 = hits / trials, Z95**2
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z95 * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def _around(point: float, se: float, low: float = 0.0, high: float = 1.0):
    """The normal 95% interval ``point +- 1.96 se`` within [low, high]."""
    if not (np.isfinite(point) and np.isfinite(se)):
        return math.nan, math.nan
    return max(low, point - Z95 * se), min(high, point + Z95 * se)


def _extremes(hits: np.ndarray, trials: np.ndarray, keep: np.ndarray):
    """(rate, rows) of the lowest and the highest defined rate among the kept groups."""
    used = np.flatnonzero(keep & (trials > 0))
    if used.size < 2:
        return None
    rate = hits[used] / trials[used]
    low, high = used[np.argmin(rate)], used[np.argmax(rate)]
    return (hits[low] / trials[low], trials[low]), (hits[high] / trials[high], trials[high])


def _difference_interval(hits, trials, keep):
    """Delta-method interval of the spread (highest - lowest rate): the two extreme groups'
    binomial variances added."""
    pair = _extremes(hits, trials, keep)
    if pair is None:
        return math.nan, math.nan
    (p1, n1), (p2, n2) = pair
    return _around(p2 - p1, math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2))


def _ratio_interval(hits, trials, keep):
    """Delta-method interval of the ratio (lowest / highest rate) on its logarithm."""
    pair = _extremes(hits, trials, keep)
    if pair is None or pair[1][0] <= 0:
        return math.nan, math.nan
    (p1, n1), (p2, n2) = pair
    if p1 <= 0:
        return 0.0, min(1.0, wilson(0.0, n1)[1] / p2)
    se = math.sqrt((1 - p1) / (n1 * p1) + (1 - p2) / (n2 * p2))
    return p1 / p2 * math.exp(-Z95 * se), min(1.0, p1 / p2 * math.exp(Z95 * se))


def _grouping_intervals(problem, grouping, report) -> dict[str, tuple[float, float]]:
    from fairpca.metrics._counts import RATE_CELLS, fraction

    counts = grouping.aggregate(problem.counts)
    keep = counts.sum(axis=-1) >= problem.min_group_size
    spreads = {"dp_difference": "selection_rate", "eo_difference": "tpr", "fpr_difference": "fpr"}
    out = {m: _difference_interval(*fraction(counts, r), keep) for m, r in spreads.items()}
    tpr, fpr = out["eo_difference"], out["fpr_difference"]
    out["equalized_odds_difference"] = (max(tpr[0], fpr[0]), max(tpr[1], fpr[1]))
    out["selection_rate_ratio"] = _ratio_interval(*fraction(counts, "selection_rate"), keep)
    out = {f"{m}.{grouping.name}": v for m, v in out.items()}
    result = report.intersection if grouping.key is None else report.attributes[grouping.key]
    index = {label: g for g, label in enumerate(grouping.labels)}
    for group in result.group_size:
        name = report._group_name(grouping.name, group)
        for rate in RATE_CELLS:
            hits, trials = fraction(counts[index[group]], rate)
            out[f"{rate}.{name}"] = wilson(float(hits), float(trials))
    return out


def _overall_intervals(problem) -> dict[str, tuple[float, float]]:
    tn, fp, fn, tp = problem.counts.sum(axis=0)
    n, positives, negatives = tn + fp + fn + tp, fn + tp, tn + fp
    out = {
        "accuracy": wilson(tn + tp, n),
        "positive_rate": wilson(fp + tp, n),
        "base_rate": wilson(fn + tp, n),
    }
    low, high = out["positive_rate"]
    ends = (max(low, 1 - low), max(high, 1 - high))
    out["one_class_share"] = (0.5 if low <= 0.5 <= high else min(ends), max(ends))
    if positives > 0 and negatives > 0:
        tpr, tnr = tp / positives, tn / negatives
        se = 0.5 * math.sqrt(tpr * (1 - tpr) / positives + tnr * (1 - tnr) / negatives)
        out["balanced_accuracy"] = _around(0.5 * (tpr + tnr), se)
    return out


def counts_metrics(counts: pd.DataFrame, sensitive: list[str], *, min_group_size: int,
                   allow_small_groups: bool = False) -> dict[str, float]:  # fmt: skip
    """Every metric of :func:`fairpca.metrics.group_fairness` from confusion-cell counts per
    intersection group (the same names and values, small groups withheld alike), with 95%
    intervals in closed form: Wilson for rates, the delta method for differences, the
    selection-rate ratio (on its logarithm) and balanced accuracy; the worst over attributes
    takes the worst bounds. Each interval contains its estimate."""
    from fairpca.metrics import ci_metrics
    from fairpca.metrics._intervals import worst_interval

    problem, report = released_problem(counts, sensitive, min_group_size, allow_small_groups)
    metrics = report.as_metrics()
    intervals = _overall_intervals(problem)
    for grouping in problem.groupings():
        intervals.update(_grouping_intervals(problem, grouping, report))
    for measure in ("dp_difference", "eo_difference", "fpr_difference",
                    "equalized_odds_difference", "selection_rate_ratio"):  # fmt: skip
        found = [intervals[f"{measure}.{g.name}"] for g in problem.attributes]
        intervals[measure] = worst_interval(found, lowest=measure.endswith("ratio"))
    bounds = ci_metrics(intervals)
    for key, value in bounds.items():
        name, side = key.rsplit(".", 1)
        if name in metrics:
            keep = min if side.endswith("low") else max  # contain the estimate
            metrics[key] = float(keep(value, metrics[name]))
    return metrics


# ---- the audit -------------------------------------------------------------------------------


@dataclass
class PartitionAudit:
    """What the Dask route returns to the flow: the record, the candidates' table and the
    scorer of a champion on the test partitions."""

    record: Any
    table: pd.DataFrame
    score: Any


def _spec(config, columns: list[str]) -> RowSpec:
    from fairpca.tasks.data import _typed_label

    source = config.source
    taken = {source.label, *source.sensitive, *source.drop}
    features = tuple(c for c in columns if c not in taken)
    if not features:
        raise ValueError(f"{source.data} has no feature column besides label and sensitive.")
    return RowSpec(
        source.label, _typed_label(source), tuple(source.sensitive), features, config.seed
    )


def _first_pass(frame, spec: RowSpec):
    """Group sizes per part and label, the training digest, the encoder's sample."""
    import dask

    blocks = frame.to_delayed()
    per_partition = max(1, math.ceil(ENCODER_SAMPLE_ROWS / len(blocks)))
    task = dask.delayed(_first_facts, pure=True)
    facts = dask.compute(*[task(b, spec, i, per_partition) for i, b in enumerate(blocks)])
    keys = [*spec.sensitive, "part", "y"]
    sizes = pd.concat([f[0] for f in facts]).groupby(keys, sort=False)["rows"].sum()
    digest = hashlib.sha256("".join(f[1] for f in facts).encode()).hexdigest()
    sample_X = pd.concat([f[2][0] for f in facts], ignore_index=True)
    sample_y = np.concatenate([f[2][1] for f in facts])
    sample_s = pd.concat([f[2][2] for f in facts], ignore_index=True)
    return sizes.reset_index(), digest, (sample_X, sample_y, sample_s)


def _fit_representations(frame, spec, preprocessor, grid: list[int], seed: int) -> dict:
    """Fair PCA for each k, each fitted on the cluster from partition statistics."""
    from fairpca import FairPCA
    from fairpca.tasks.represent import FittedRepresentation

    columns = list(preprocessor.get_feature_names_out())
    meta = pd.DataFrame({c: pd.Series(dtype=np.float64) for c in columns})
    for column in spec.sensitive:
        meta[f"group:{column}"] = pd.Series(dtype=object)
    encoded = frame.map_partitions(
        _encoded_training_rows, spec, preprocessor, columns, meta=meta, enforce_metadata=False
    )
    fitted = {}
    for k in grid:
        start = time.perf_counter()
        estimator = FairPCA(
            n_components=k, sensitive_columns=[f"group:{c}" for c in spec.sensitive],
            random_state=seed,
        ).fit(encoded)  # fmt: skip
        estimator.set_params(sensitive_columns=None)  # it transforms encoded features only
        facts = {"k": float(k), "mean_gap_fit": float(getattr(estimator, "mean_gap_", math.nan))}
        fitted[k] = FittedRepresentation("fair_pca", estimator, time.perf_counter() - start, facts)
    return fitted


def _train(frame, spec, preprocessor, representations, C_grid, n_train: int, seed: int):
    """Every (k, C) classifier, trained by ``partial_fit`` over the partitions in order."""
    import dask
    from sklearn.linear_model import SGDClassifier

    models = {
        (k, C): SGDClassifier(loss="log_loss", alpha=1.0 / (C * n_train), random_state=seed)
        for k in representations
        for C in C_grid
    }
    estimators = {k: rep.estimator for k, rep in representations.items()}
    step = dask.delayed(_train_step, pure=True)
    state = models
    for epoch in range(EPOCHS):
        for index, block in enumerate(frame.to_delayed()):
            state = step(state, block, spec, preprocessor, estimators, (epoch, index))
    (trained,) = dask.compute(state)
    return trained


def _evaluate(frame, spec, preprocessor, representations, models) -> pd.DataFrame:
    import dask

    estimators = {k: rep.estimator for k, rep in representations.items()}
    task = dask.delayed(_count_cells, pure=True)
    parts = dask.compute(
        *[task(b, spec, preprocessor, estimators, models) for b in frame.to_delayed()]
    )
    keys = ["candidate", "part", *spec.sensitive]
    return pd.concat(parts, ignore_index=True).groupby(keys, sort=False)[list(CELLS)].sum()


def _candidate_counts(cells: pd.DataFrame, candidate: str, part: str, majority: int):
    table = cells.xs((candidate, PART_CODES[part]), level=("candidate", "part")).reset_index()
    if candidate == "majority" and majority == 1:  # every row predicted 1
        table = table.assign(FP=table["TN"], TP=table["FN"], TN=0, FN=0)
    return table


def _choose(rows: list[dict], policy, selection, majority_accuracy: float):
    """The candidate meeting the gate and eligible with the best ``select_by`` (ties:
    accuracy); the reasons the chosen one may not be promoted."""

    def rules(row) -> list[str]:
        reasons = []
        if not row.get("accuracy", 0) >= majority_accuracy + selection.min_accuracy_gain:
            reasons.append(
                f"accuracy {row.get('accuracy', math.nan):.4f} does not beat the majority-class "
                f"baseline {majority_accuracy:.4f} by {selection.min_accuracy_gain:g}"
            )
        low = row.get("balanced_accuracy.ci95_low", math.nan)
        if not low > 0.5 + selection.min_balanced_accuracy_margin:
            reasons.append(f"balanced accuracy lower bound {low:.4f} is not above chance")
        if not row.get("one_class_share", 1.0) <= selection.max_one_class_share:
            reasons.append("predicts one class for almost every row")
        return reasons

    def rank(row):
        measure = row.get(selection.select_by, -math.inf)
        return (not rules(row), not policy.failures(row), measure, row.get("accuracy", 0))

    chosen = max(rows, key=rank)
    return chosen, rules(chosen), policy.failures(chosen)


def _provenance(config, files: list[Path]) -> dict:
    from fairpca.tasks.record import code_version, definition_of
    from fairpca.tasks.trust import sha256_file

    name = Path(config.source.data).name
    return {
        "definition": definition_of(config.source),
        "data_source": {
            "kind": "file",
            "name": name,
            "sha256": {str(f.relative_to(files[0].parent.parent)): sha256_file(f) for f in files},
        },
        "code_version": code_version(),
    }


SKIPPED = {
    "lambda_sweep": "the Dask route fits fair PCA without the PCA trade-off block (lambda)",
    "references": "the reference mitigations (fairlearn) need every row in memory",
    "cross_validation": "the choice is made on the validation partitions",
    "diagnostics": "MMD^2 and linear inseparability need the projected rows in memory",
    "screening": "column screening (leakage, proxies) needs the training rows in memory; the "
    "columns are used as given (--drop excludes)",
    "split_stratification": "the split is a seeded hash of each row, not stratified",
}


def _group_sizes(sizes: pd.DataFrame, spec, evaluation, parts=None) -> dict:
    """Published rows per group (the library's release rule, applied to the counts)."""
    from fairpca.tasks.record import WITHHELD

    chosen = sizes if parts is None else sizes[sizes["part"].isin(parts)]
    cells = chosen.groupby(list(spec.sensitive), sort=False)["rows"].sum().reset_index()
    cells = cells.assign(TN=cells["rows"], FP=0, FN=0, TP=0)
    _, report = released_problem(
        cells, list(spec.sensitive), evaluation.min_group_size, evaluation.allow_small_groups
    )
    out = {}
    for attribute in spec.sensitive:
        published = report.attributes[attribute].group_size
        out[attribute] = {str(k): int(v) for k, v in published.items()}
        withheld = cells[attribute].nunique() - len(published)
        if withheld:
            out[attribute][WITHHELD] = (
                f"{withheld} group(s), suppressed: fewer than {evaluation.min_group_size} of "
                "these rows, or hidden so that a suppressed group's size cannot be recovered"
            )
    return out


def audit_partitions(config, out_dir: Path, *, kind: str, started_at: datetime,
                     tags: dict[str, str]) -> PartitionAudit:  # fmt: skip
    """The Dask route of the audit, from the partitioned table to the written model and the
    record (see the module docstring). The flow writes, seals and logs it as any audit."""
    files = check_partitioned_source(config)
    client = connect(config.dask_address)
    try:
        return _audit_on(client, files, config, out_dir, kind, started_at, tags)
    finally:
        client.close()


def _audit_on(client, files, config, out_dir, kind, started_at, tags) -> PartitionAudit:
    from fairpca.tasks.represent import make_preprocessor, resolve_k

    clock: dict[str, float] = {}
    tick = time.perf_counter()
    frame = _read(files, config.source.sep)
    spec = _spec(config, list(frame.columns))
    sizes, digest, (sample_X, _, sample_s) = _first_pass(frame, spec)
    clock["time_load_data_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    min_count = config.representation.min_category_count
    preprocessor = make_preprocessor(sample_X, min_count).set_output(transform="pandas")
    preprocessor.fit(sample_X)  # pandas output: fair PCA keeps the encoded columns' names
    width = len(preprocessor.get_feature_names_out())
    k_record = resolve_k(
        config.representation.k, width, sample_s, ["fair_pca"], config.representation.k_grid
    )
    representations = _fit_representations(frame, spec, preprocessor, k_record["grid"],
                                            config.seed)  # fmt: skip
    clock["time_represent_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    n = {p: int(sizes.loc[sizes["part"] == c, "rows"].sum()) for p, c in PART_CODES.items()}
    C_grid = config.evaluation.logreg_C or [1.0 / (2 * n["train"] * 0.01), 1.0]
    models = _train(frame, spec, preprocessor, representations, C_grid, n["train"], config.seed)
    clock["time_train_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    cells = _evaluate(frame, spec, preprocessor, representations, models)
    clock["time_evaluate_s"] = time.perf_counter() - tick
    majority = _majority_of(sizes)
    return _finish(
        config, out_dir, kind, started_at, tags, files, spec, sizes, digest, sample_X,
        preprocessor, representations, models, cells, majority, k_record, n, clock, frame,
    )  # fmt: skip


def _finish(config, out_dir, kind, started_at, tags, files, spec, sizes, digest, sample_X,
            preprocessor, representations, models, cells, majority, k_record, n, clock,
            frame) -> PartitionAudit:  # fmt: skip
    from sklearn.pipeline import Pipeline

    from fairpca.tasks.select import GatePolicy

    evaluation, selection = config.evaluation, config.selection
    metric = {"min_group_size": evaluation.min_group_size,
              "allow_small_groups": evaluation.allow_small_groups}  # fmt: skip
    sensitive = list(spec.sensitive)

    def measured(candidate: str, part: str) -> dict[str, float]:
        table = _candidate_counts(cells, candidate, part, majority)
        return counts_metrics(table, sensitive, **metric)

    policy = GatePolicy.from_config(selection)
    baseline = {part: measured("majority", part) for part in ("validation", "test")}
    rows = []
    for k, C in models:
        values = measured(f"{k}:{C!r}", "validation")
        rows.append({"variant": "fair_pca", "k": k, "lambda": math.nan, "lambda_index": 0,
                     "classifier": CLASSIFIER, "C": C, **values,
                     "meets_gate": not policy.failures(values)})  # fmt: skip
    chosen, eligibility_reasons, gate_failures = _choose(
        rows, policy, selection, baseline["validation"].get("accuracy", math.nan)
    )
    k, C = int(chosen["k"]), float(chosen["C"])
    test = measured(f"{k}:{C!r}", "test")
    pipeline = Pipeline([
        ("preprocess", preprocessor),
        ("represent", representations[k].estimator),
        ("classify", models[(k, C)]),
    ])  # fmt: skip
    facts = {"spec": spec, "sizes": sizes, "digest": digest, "sample_X": sample_X,
             "pipeline": pipeline, "n": n, "clock": clock, "files": files}  # fmt: skip
    record = _record(
        config, out_dir, kind, started_at, tags, facts, rows, chosen, test, baseline,
        eligibility_reasons, gate_failures, policy, k_record, {k: representations[k]},
    )  # fmt: skip
    table = pd.DataFrame(rows)

    def score(champion) -> dict[str, float]:
        return _score_champion(champion, frame, spec, sensitive, metric)

    return PartitionAudit(record, table, score)


def _score_champion(pipeline, frame, spec, sensitive, metric) -> dict[str, float]:
    """A champion's metrics on this audit's test partitions (counts summed on the cluster)."""
    import dask

    task = dask.delayed(_champion_cells, pure=True)
    parts = dask.compute(*[task(b, spec, pipeline) for b in frame.to_delayed()])
    counts = pd.concat(parts).groupby(sensitive, sort=False)[list(CELLS)].sum().reset_index()
    return counts_metrics(counts, sensitive, **metric)


def _champion_cells(frame, spec: RowSpec, pipeline) -> pd.DataFrame:
    X, y, groups, part = _rows(frame, spec)
    test = part == PART_CODES["test"]
    cell = 2 * y[test] + np.asarray(pipeline.predict(X[test]), dtype=np.int64)
    onehot = pd.DataFrame(np.eye(4, dtype=np.int64)[cell], columns=list(CELLS))
    keys = groups[test].reset_index(drop=True)
    return pd.concat([keys, onehot], axis=1).groupby(list(spec.sensitive), sort=False).sum()


def _record(config, out_dir, kind, started_at, tags, facts, rows, chosen, test, baseline,
            eligibility_reasons, gate_failures, policy, k_record, representations):  # fmt: skip
    """The :class:`fairpca.tasks.record.AuditRecord` of the Dask route; the chosen pipeline
    saved under ``out_dir/model`` and the projection matrices beside it."""
    from datetime import UTC

    from fairpca.tasks.evaluate import pip_requirements
    from fairpca.tasks.mlflow_logging import as_model_input, input_example, save_model_locally
    from fairpca.tasks.record import AuditRecord, chosen_metrics, resolved_model_name
    from fairpca.tasks.report import write_matrices
    from fairpca.tasks.select import candidate_name
    from fairpca.tasks.trust import model_digest, sha256_file

    spec, sizes, n = facts["spec"], facts["sizes"], facts["n"]
    evaluation = config.evaluation
    example = input_example(
        as_model_input(facts["sample_X"]), config.representation.min_category_count
    )
    model_dir = save_model_locally(
        facts["pipeline"], out_dir, input_example=example, pip_requirements=pip_requirements()
    )
    hashes = write_matrices(out_dir, {"fair_pca": next(iter(representations.values()))})
    name = candidate_name(chosen)
    eligible = not eligibility_reasons
    reasons = [*gate_failures, *eligibility_reasons]
    decision = {"promote": eligible and not gate_failures, "reasons": reasons}
    validation = {k: v for k, v in chosen.items() if isinstance(v, float) and k != "lambda"}
    test_sizes = _group_sizes(sizes, spec, evaluation, parts=[PART_CODES["test"]])
    from fairpca.tasks.record import withheld_groups

    selection = {
        "chosen": {"variant": "fair_pca", "classifier": CLASSIFIER, "lambda": None,
                   "name": name, "k": int(chosen["k"]), "C": float(chosen["C"])},
        "gate": config.selection.gate,
        "decision": decision,
        "validation": validation,
        "test": test,
        "baselines": {"majority": {"class": _majority_of(sizes),
                                   "validation": baseline["validation"],
                                   "test": baseline["test"]}},
        "split": {f"n_{p}": n[p] for p in PART_CODES},
        "group_sizes": _group_sizes(sizes, spec, evaluation),
        "test_group_sizes": test_sizes,
        "withheld": withheld_groups(test_sizes, test, evaluation.min_group_size),
        "chosen_by": f"the {n['validation']} validation rows (Dask partitions)",
        "warnings": [f"{what}: {why}" for what, why in SKIPPED.items()],
    }  # fmt: skip
    metrics = {f"validation.{k}": v for k, v in chosen_metrics(chosen).items()}
    metrics.update(test)
    for part in ("validation", "test"):
        metrics.update({f"baseline.majority.{part}.{k}": v for k, v in baseline[part].items()})
    metrics.update(facts["clock"])
    metrics = {k: float(v) for k, v in metrics.items() if np.isfinite(v)}
    model_name = resolved_model_name(config.source, config.tracking.model_name)
    run_name = Path(out_dir).name
    return AuditRecord(
        audit_id=run_name, run_name=run_name, kind=kind,
        experiment_name=config.tracking.experiment_name, model_name=model_name,
        champion_alias=config.tracking.champion_alias,
        register_model=config.tracking.register_model and eligible,
        mlflow_retries=config.tracking.mlflow_retries,
        mlflow_retry_backoff=config.tracking.mlflow_retry_backoff,
        started_at=started_at, ended_at=datetime.now(UTC), sensitive=list(spec.sensitive),
        decision=decision,
        chosen=chosen_metrics(chosen) | {"variant": "fair_pca", "classifier": CLASSIFIER},
        selection=selection,
        params=config.flat_params() | {"route": "dask", "epochs": str(EPOCHS)},
        metrics=metrics, metric_steps=[],
        tags={"fairpca.audit_id": run_name, "fairpca.source": config.source.name,
              "fairpca.sensitive": ",".join(spec.sensitive), "fairpca.chosen": name,
              "fairpca.gate": config.selection.gate, "fairpca.route": "dask", **tags},
        model_tags={"fairness.chosen": name, "fairpca.audit_id": run_name, **policy.tags()},
        hashes=hashes, provenance=_provenance(config, facts["files"]),
        policy=policy.record(),
        eligibility={"rules": {"min_accuracy_gain": config.selection.min_accuracy_gain},
                     "chosen_passes": eligible, "reasons": eligibility_reasons},
        references=[], k=k_record | {"fitted": int(chosen["k"])},
        split_sizes={p: n[p] for p in PART_CODES},
        candidates=[{"role": "candidate", **_plain(row)} for row in rows],
        skipped=dict(SKIPPED),
        model_sha256=sha256_file(next(model_dir.glob("*.skops"))),
        model_digest=model_digest(facts["pipeline"], facts["digest"]),
        training_data_sha256=facts["digest"],
    )  # fmt: skip


def _majority_of(sizes: pd.DataFrame) -> int:
    train = sizes[sizes["part"] == PART_CODES["train"]]
    return int(train.loc[train["y"] == 1, "rows"].sum() * 2 > train["rows"].sum())


def _plain(row: dict) -> dict:
    keys = ("variant", "k", "classifier", "C", "accuracy", "balanced_accuracy",
            "dp_difference", "eo_difference", "meets_gate")  # fmt: skip
    return {
        k: row[k]
        for k in keys
        if k in row and not (isinstance(row[k], float) and math.isnan(row[k]))
    }
