"""Data tasks: load a dataset or a user file, and split it in three (seeded, stratified),
screening the columns on the training rows."""

from __future__ import annotations

import dataclasses
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE


@dataclass(frozen=True)
class Split:
    """Three disjoint parts: raw features, 0/1 labels and the sensitive attribute frame.

    ``train`` fits representations and classifiers, ``validation`` chooses the candidate and
    applies the gate, ``test`` is only reported (never read by any choice).
    """

    X_train: pd.DataFrame
    y_train: np.ndarray
    s_train: pd.DataFrame
    X_validation: pd.DataFrame
    y_validation: np.ndarray
    s_validation: pd.DataFrame
    X_test: pd.DataFrame
    y_test: np.ndarray
    s_test: pd.DataFrame
    leaking: dict[str, str] = field(default_factory=dict)  # excluded on the training rows
    screening: list[dict[str, Any]] = field(default_factory=list)  # the audit's record
    # Each row's entity as an integer code (``group_column``; None: independent rows), read by
    # the cross-validation folds; codes only, never the entity's own name, and never logged.
    entity_train: np.ndarray | None = None
    entity_validation: np.ndarray | None = None
    entity_test: np.ndarray | None = None


def stratum_labels(y: np.ndarray, sensitive: pd.DataFrame) -> np.ndarray:
    """Integer code of each row's label x (intersectional) group stratum."""
    keys = pd.Series(np.asarray(y).astype(str))
    for column in sensitive.columns:
        keys = keys + "|" + sensitive[column].astype(str).to_numpy()
    return pd.factorize(keys, sort=True)[0]


def allocate(total: int, counts: np.ndarray) -> np.ndarray:
    """Split ``total <= counts.sum()`` rows over strata in proportion to ``counts``.

    Largest-remainder rounding (ties to the lower stratum index): the result sums to
    ``total`` and never exceeds ``counts``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if total <= 0 or counts.sum() == 0:
        return np.zeros_like(counts)
    exact = total * counts / counts.sum()
    quota = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - quota), kind="stable")
    quota[order[: total - quota.sum()]] += 1
    return quota


DEFAULT_SHARES = (0.5, 0.25, 0.25)  # training, validation, test: today's 5,000 / 2,500 / 2,500


def part_sizes(
    n_samples: int,
    n_train: int | None = None,
    n_validation: int | None = None,
    n_test: int | None = None,
    *,
    shares: tuple[float, float, float] = DEFAULT_SHARES,
) -> tuple[int, ...]:
    """The three sizes: each part's ``share`` of the ``n_samples`` rows (largest remainder),
    at most its cap ``n_<part>`` (None: no cap). With all three caps given they are the
    sizes, scaled down in proportion to them when the data hold fewer rows."""
    caps = [n_train, n_validation, n_test]
    if None not in caps:
        wanted = np.array(caps, dtype=np.int64)
        wanted = allocate(n_samples, wanted) if wanted.sum() > n_samples else wanted
    else:
        weights = np.round(np.asarray(shares, dtype=float) * 1e6).astype(np.int64)
        wanted = allocate(min(n_samples, int(np.floor(n_samples * sum(shares) + 1e-9))), weights)
        wanted = np.minimum(wanted, [n_samples if cap is None else cap for cap in caps])
    if wanted.min() < 2:
        raise ValueError(
            f"{n_samples} rows are too few for training, validation and test parts "
            f"(would be {wanted.tolist()} rows); each part needs at least 2 rows: pass more data."
        )
    return tuple(int(size) for size in wanted)


def stratified_sample(
    y: np.ndarray, sensitive: pd.DataFrame, size: int, seed: int, floor: int = 0
) -> np.ndarray:
    """Sorted indices of about ``size`` rows drawn without replacement, seeded, each label x
    group stratum in proportion to its size (largest remainder) but at least ``floor`` rows
    (all of a smaller stratum: a small group keeps the rows its metrics need, so the sample
    may exceed ``size`` by those); every row when ``size`` is not smaller than the rows."""
    if size >= len(y):
        return np.arange(len(y))
    strata = stratum_labels(y, sensitive)
    counts = np.bincount(strata)
    take = np.maximum(allocate(size, counts), np.minimum(counts, floor))
    rng = np.random.default_rng(seed)
    chosen = [
        rng.permutation(np.flatnonzero(strata == code))[:n] for code, n in enumerate(take) if n
    ]
    return np.sort(np.concatenate(chosen))


MIN_SPLITTABLE_STRATUM = 3  # one row for each of the three parts
# The messages of the refusals below (str.format templates; tests name them, not their words)
TOO_FEW_ENTITIES = (
    "the group column names {count} {entities}; keeping each entity's rows in one part needs at "
    "least 3 (one for each part): leave --group-column out, or name the column of the entities "
    "(person, firm)."
)


def split_rows(
    y: np.ndarray,
    sensitive: pd.DataFrame,
    *,
    n_train: int | None = None,
    n_validation: int | None = None,
    n_test: int | None = None,
    seed: int,
    shares: tuple[float, float, float] = DEFAULT_SHARES,
    entities: np.ndarray | pd.Series | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices of the training, validation and test parts (sorted, disjoint): each part
    its share of the rows, at most its cap (:func:`part_sizes`).

    Stratified by label x group and seeded: each part takes each stratum's rows in proportion
    to the stratum's size (largest remainder). A stratum with fewer than 3 rows cannot be
    represented in every part, so all its rows go to training (a group of any size never
    aborts the split); every other stratum keeps at least one training row.

    With ``entities`` (each row's entity: a panel's person or firm) every entity's rows go to
    one part (:func:`split_entities`: stratified as far as whole entities allow).
    """
    y = np.asarray(y)
    sizes = part_sizes(len(y), n_train, n_validation, n_test, shares=shares)
    if entities is not None:
        return split_entities(y, sensitive, entities, sizes, seed)
    strata = stratum_labels(y, sensitive)
    rng = np.random.default_rng(seed)
    members = [rng.permutation(np.flatnonzero(strata == code)) for code in range(strata.max() + 1)]
    counts = np.array([len(rows) for rows in members])
    small = counts < MIN_SPLITTABLE_STRATUM  # all its rows go to training
    splittable = np.where(small, 0, counts - 1)
    held_out = allocate(min(sizes[1] + sizes[2], int(splittable.sum())), splittable)
    n_validation_of = allocate(min(sizes[1], int(held_out.sum())), held_out)
    validation = [rows[:v] for rows, v in zip(members, n_validation_of, strict=True)]
    test = [rows[v:h] for rows, v, h in zip(members, n_validation_of, held_out, strict=True)]
    rest = [rows[h:] for rows, h in zip(members, held_out, strict=True)]
    tiny = [rows for rows, is_small in zip(rest, small, strict=True) if is_small]
    rest_counts = np.where(small, 0, [len(rows) for rows in rest])
    n_tiny = sum(len(rows) for rows in tiny)
    take = allocate(min(max(sizes[0] - n_tiny, 0), int(rest_counts.sum())), rest_counts)
    train = tiny + [rows[:t] for rows, t in zip(rest, take, strict=True)]
    return tuple(
        np.sort(np.concatenate(part)).astype(np.int64) for part in (train, validation, test)
    )


def split_entities(
    y: np.ndarray, sensitive: pd.DataFrame, entities, sizes: tuple[int, ...], seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices of the training, validation and test parts of about ``sizes`` rows, each
    entity's rows in one part, stratified by label x group as far as whole entities allow.

    Seeded greedy allocation (the idea of scikit-learn's ``StratifiedGroupKFold``, for three
    parts of unequal sizes and caps): the entities, largest first (ties in a seeded random
    order), each go to the part whose rows of the entity's strata lag furthest behind that
    part's share of them. Rows beyond the parts' caps are left out, whole entities again. A
    part ends within one entity's rows of its size.

    Raises
    ------
    ValueError
        Fewer than three entities, or a part left with fewer than two rows.
    """
    codes = pd.factorize(pd.Series(entities).reset_index(drop=True))[0]
    n_entities = int(codes.max()) + 1 if len(codes) else 0
    if n_entities < 3:
        entities = "entity" if n_entities == 1 else "entities"
        raise ValueError(TOO_FEW_ENTITIES.format(count=n_entities, entities=entities))
    strata = stratum_labels(y, sensitive)
    counts = np.zeros((n_entities, strata.max() + 1))
    np.add.at(counts, (codes, strata), 1)
    targets = np.array([*sizes, len(y) - sum(sizes)], dtype=float)  # the last: left out
    wanted = targets[:, None] * counts.sum(axis=0)[None, :] / len(y)  # part x stratum rows
    taken = np.zeros_like(wanted)
    open_parts = np.flatnonzero(targets > 0)
    rows_of = counts.sum(axis=1)
    shuffled = np.random.default_rng(seed).permutation(n_entities)
    order = shuffled[np.argsort(-rows_of[shuffled], kind="stable")]
    part_of = np.empty(n_entities, dtype=np.int64)
    for entity in order:
        lag = (wanted[open_parts] - taken[open_parts]) @ counts[entity]  # rows behind, weighted
        part = open_parts[int(np.argmax(lag))]
        part_of[entity] = part
        taken[part] += counts[entity]
    parts = tuple(np.flatnonzero(part_of[codes] == part).astype(np.int64) for part in range(3))
    short = [name for name, rows in zip(("training", "validation", "test"), parts, strict=True)
             if len(rows) < 2]  # fmt: skip
    if short:
        raise ValueError(
            f"keeping each of the {n_entities} entities' rows in one part leaves the {short} "
            "part(s) with fewer than 2 rows: pass a table with more entities."
        )
    return parts


@task(name="split-data", cache_policy=NO_CACHE)
def split_data(dataset, sizes, source, *, seed: int, min_group_size: int) -> Split:
    """Seeded three-way split stratified by label and sensitive group, sized by ``sizes``
    (the config's ``split`` section: shares of the rows, optional caps), screened by
    :func:`screen_training_rows`."""
    y = np.asarray(dataset.y, dtype=np.int64)
    given = getattr(dataset, "entities", None)  # a panel's entity column (group_column)
    entities = None if given is None else pd.factorize(given)[0]
    parts = split_rows(y, dataset.sensitive, seed=seed, entities=entities, **split_options(sizes))
    excluded, screening = screen_training_rows(dataset, y, parts[0], source, min_group_size)
    features = dataset.X.drop(columns=list(excluded))
    values = {}
    for name, idx in zip(("train", "validation", "test"), parts, strict=True):
        values[f"X_{name}"] = features.iloc[idx].reset_index(drop=True)
        values[f"y_{name}"] = y[idx]
        values[f"s_{name}"] = dataset.sensitive.iloc[idx].reset_index(drop=True)
        values[f"entity_{name}"] = None if entities is None else entities[idx]
    return Split(**values, leaking=excluded, screening=screening)


@task(name="load-and-split-data", cache_policy=NO_CACHE, retries=0)
def load_split(source, sizes, *, seed: int, min_group_size: int) -> Split:
    """:func:`load_source` and :func:`split_data` in one task run: the loaded table is then no
    task run's result or parameter, which Prefect keeps for the flow run's life (at
    1,000,000 rows about 200 MB that nothing reads after the split).

    The split the pre-flight check made of the same source (:func:`handed_over`) is taken
    as it is, and no longer held there: one read and one screening of the data per command.
    """
    box = _HANDED_OVER.get()
    split = box.pop(_split_key(source, sizes, seed, min_group_size), None) if box else None
    if split is None:
        split = split_data.fn(
            load_source(source), sizes, source, seed=seed, min_group_size=min_group_size
        )
    if split.leaking:  # a line of the run's log (the audit's summary and record list them)
        reasons = "; ".join(f"{column!r}: {why}" for column, why in split.leaking.items())
        get_run_logger().info("columns excluded on the training rows: %s", reasons)
    return split


# The split a pre-flight check made, waiting for the flow of the same command (one entry,
# emptied by the load_split that takes it).
_HANDED_OVER: ContextVar[dict | None] = ContextVar("fairpca_handed_over_split", default=None)


def _split_key(source, sizes, seed: int, min_group_size: int) -> tuple:
    return source.model_dump_json(), sizes.model_dump_json(), seed, min_group_size


@contextmanager
def handed_over(split: Split | None, config):
    """Within the block, :func:`load_split` of ``config``'s source, split and seed takes
    ``split`` (the pre-flight check's) instead of reading and screening the data again;
    ``None`` hands nothing over."""
    key = _split_key(config.source, config.split, config.seed, config.evaluation.min_group_size)
    box = {} if split is None else {key: split}
    del split  # held by the box alone, until load_split takes it
    token = _HANDED_OVER.set(box)
    try:
        yield
    finally:
        _HANDED_OVER.reset(token)


def split_options(sizes) -> dict[str, Any]:
    """:func:`split_rows`' size options from the config's ``split`` section."""
    shares = (sizes.train_share, sizes.validation_share, sizes.test_share)
    return sizes.model_dump(include={"n_train", "n_validation", "n_test"}) | {"shares": shares}


def search_sample(
    split: Split, encoded: tuple, n_train: int | None, seed: int, min_group_size: int = 0
) -> tuple:
    """The rows of the wide search: a seeded stratified sample of about ``n_train``
    training rows and of validation rows in the same proportion, at least ``n_train // 2``
    (None: every row), each label x group stratum with at least ``min_group_size`` rows where
    it has them (:func:`stratified_sample`: the gate judges every group it judges on every
    row), as a :class:`Split` (test rows unchanged) and the matching encoded rows. The same
    split and arrays when nothing is left out."""
    if n_train is None or n_train >= len(split.y_train):
        return split, encoded
    # validation rows in the split's proportion, and at least half the training sample
    # (today's 5,000 / 2,500), so that small groups keep rows there
    proportional = round(n_train * len(split.y_validation) / len(split.y_train))
    n_validation = max(proportional, n_train // 2)
    values, picked = {}, []
    for part, size in (("train", n_train), ("validation", n_validation)):
        y, s = getattr(split, f"y_{part}"), getattr(split, f"s_{part}")
        rows = stratified_sample(y, s, size, seed, floor=min_group_size)
        picked.append(rows)
        values[f"X_{part}"] = getattr(split, f"X_{part}").iloc[rows].reset_index(drop=True)
        values[f"y_{part}"] = y[rows]
        values[f"s_{part}"] = s.iloc[rows].reset_index(drop=True)
        entities = getattr(split, f"entity_{part}")
        values[f"entity_{part}"] = None if entities is None else entities[rows]
    sample = dataclasses.replace(split, **values)
    return sample, tuple(array[rows] for array, rows in zip(encoded, picked, strict=True))


def _entry(column: str, rule: str, score: float | None, action: str = "excluded") -> dict:
    return {"column": column, "rule": rule, "score": score, "action": action}


def screen_training_rows(dataset, y: np.ndarray, train: np.ndarray, source, min_group_size: int):
    """The screening decided on the training rows: a user file's target-leakage rule
    (``leakage_threshold``) and, for every source, proxies of a sensitive attribute
    (``proxy_threshold``: a duplicate, an exact recoding or a near-perfect predictor).

    Returns the excluded columns with their reasons and the ``screening`` record: every
    column a rule excluded (including the load-time rules of a user file), or that
    ``keep`` kept although a rule flagged it, with its rule and score, and every column kept
    that looks like a panel's entity id (the ``group_column`` it could be). One warning names
    the excluded columns. ``source`` is the config's ``source`` section; a proxy rule is
    scored over the groups of at least ``min_group_size`` rows.
    """
    from fairpca.datasets._screen import (
        ColumnScreening,
        leakage_scores,
        proxy_columns,
        warn_screened,
    )

    unknown = [name for name in source.keep if name not in dataset.X.columns]
    if unknown:
        raise ValueError(
            f"keep names column(s) {unknown} that are not feature columns; the features are "
            f"{list(dataset.X.columns)}."
        )
    X = dataset.X.iloc[train].reset_index(drop=True)
    s_train = dataset.sensitive.iloc[train].reset_index(drop=True)
    entries = [_entry(name, why, None) for name, why in (dataset.screened or {}).items()]
    excluded: dict[str, str] = {}

    def flag(column: str, rule: str, score: float, why: str) -> None:
        action = "kept" if column in source.keep else "excluded"
        entries.append(_entry(column, rule, score, action))
        if action == "excluded":
            excluded[column] = why

    if source.data is not None:  # a user file's target-leakage rule
        for column, score in leakage_scores(X, y[train]).items():
            if score >= source.leakage_threshold:
                why = (f"likely target leakage: alone it predicts the label with balanced "
                       f"accuracy {score:.3f} (>= {source.leakage_threshold})")  # fmt: skip
                flag(column, "target leakage", score, why)
    candidates = X[[column for column in X.columns if column not in excluded]]
    for column, (rule, score, why) in proxy_columns(
        candidates, s_train, threshold=source.proxy_threshold, min_rows=min_group_size
    ).items():
        flag(column, rule, score, why)
    if len(excluded) == X.shape[1]:
        raise ValueError(
            f"every feature column is excluded on the training rows ({excluded}); keep one "
            "deliberately with --keep NAME if that is intended."
        )
    warn_screened(ColumnScreening([c for c in X.columns if c not in excluded], excluded))
    return excluded, entries + _panel_ids(dataset, excluded)


def _panel_ids(dataset, excluded: dict[str, str]) -> list[dict]:
    """Screening entries (and one :class:`~fairpca.datasets.ScreeningWarning`) for the kept
    columns that look like a panel's entity id (:func:`fairpca.datasets._screen.
    panel_id_columns`), judged on every row without the labels: it is about the split
    itself. None when the split already groups the rows by an entity column."""
    from fairpca.datasets._screen import ScreeningWarning, panel_id_columns

    if getattr(dataset, "entities", None) is not None:
        return []
    kept = dataset.X[[column for column in dataset.X.columns if column not in excluded]]
    found = panel_id_columns(kept)
    for column, (_, why) in found.items():
        warnings.warn(f"column {column!r} {why}.", ScreeningWarning, stacklevel=3)
    return [_entry(column, why, share, "kept") for column, (share, why) in found.items()]


def load_source(source) -> Any:
    """The :class:`fairpca.datasets.Dataset` named by an audit config's ``source`` section; a
    bundled dataset's coded groups carry their names (``Female`` / ``Male``, not 0 / 1) into
    the audit."""
    from fairpca import datasets

    group = getattr(source, "group_column", None)
    if source.dataset is not None:
        sensitive = {"sensitive": tuple(source.sensitive)} if source.sensitive else {}
        dataset = datasets.load_dataset(source.dataset, data_dir=source.data_dir, **sensitive)
        dataset = dataset.with_named_groups()
    else:
        dataset = datasets.load_user_data(
            source.data,
            label=source.label,
            sensitive=tuple(source.sensitive),
            positive_label=typed_label(source),
            keep=(*source.keep, *([group] if group else [])),  # read, then taken out of X
            drop=tuple(source.drop),
            sep=source.sep,
            leakage=False,  # decided on the training rows (fairpca.tasks.data.split_data)
        )
    return dataset if group is None else with_entities(dataset, group, source.name)


def with_entities(dataset, column: str, where: str):
    """``dataset`` with its column ``column`` moved out of the features into ``entities``
    (each row's entity: the split keeps an entity's rows together).

    Raises
    ------
    ValueError
        ``column`` is no feature column, or has missing values.
    """
    if column not in dataset.X.columns:
        raise ValueError(
            f"group_column {column!r} is not a feature column of {where}; its feature columns "
            f"are {list(dataset.X.columns)}. Name the column of each row's entity (a person's "
            "or a firm's id), or leave --group-column out."
        )
    entities = dataset.X[column].reset_index(drop=True)
    missing = int(entities.isna().sum())
    if missing:
        raise ValueError(
            f"group_column {column!r} has {missing} missing value(s): each row needs its "
            "entity. Fill them (a row alone: an id of its own) or drop those rows."
        )
    return dataclasses.replace(dataset, X=dataset.X.drop(columns=[column]), entities=entities)


def typed_label(source) -> Any:
    """``positive_label`` arrives as text (CLI, YAML); match it to a numeric label column."""
    value = source.positive_label
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number
