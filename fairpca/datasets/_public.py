"""Loaders for the public datasets of the paper, parsing their raw published formats."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import Literal

import pandas as pd

from ._dataset import Dataset, SensitiveSpec, as_names, assemble, binary
from ._files import ADULT_DATA, ADULT_TEST, BANK_FULL, COMPAS_TWO_YEARS, GERMAN_DATA, read_table

__all__ = ["DATASET_NAMES", "load_adult", "load_bank", "load_compas", "load_dataset", "load_german"]

DATASET_NAMES = ("adult", "german", "bank", "compas")

PathLike = str | os.PathLike[str] | None


def _typed(frame: pd.DataFrame, numeric: Sequence[str]) -> pd.DataFrame:
    """Numeric columns to float64, all others to pandas ``category``."""
    for column in frame.columns:
        if column in numeric:
            frame[column] = frame[column].astype("float64")
        else:
            frame[column] = frame[column].astype("category")
    return frame


# ---------------------------------------------------------------------------------- Adult

ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
)
ADULT_NUMERIC = ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week")
ADULT_SPECS = {
    "sex": SensitiveSpec(
        "sex",
        binary(lambda s: s.astype(str) == "Male"),
        "1 = Male (privileged), 0 = Female",
        labels={0: "Female", 1: "Male"},
    ),
}


def _parse_adult(content: bytes) -> pd.DataFrame:
    text = content.decode("ascii")
    if text.startswith("|"):  # adult.test starts with the junk line "|1x3 Cross validator"
        text = text.split("\n", 1)[1]
    frame = pd.read_csv(
        io.StringIO(text),
        header=None,
        names=[*ADULT_COLUMNS, "income"],
        skipinitialspace=True,
        na_values=["?"],
        keep_default_na=False,
        dtype={column: "float64" for column in ADULT_NUMERIC},
    )
    # adult.test writes its labels with a trailing period: "<=50K." and ">50K."
    frame["income"] = frame["income"].str.rstrip(".")
    return frame


def load_adult(
    *,
    sensitive: str | Sequence[str] = ("sex",),
    split: Literal["all", "train", "test"] = "all",
    missing: Literal["category", "drop"] = "category",
    drop: str | Sequence[str] = (),
    data_dir: PathLike = None,
) -> Dataset:
    """Load UCI Adult (census income) from ``adult.data`` and ``adult.test``.

    The label is ``income >50K`` (``y = 1``); 48,842 rows with ``P(y=1) = 0.2393`` under the
    default ``missing="category"``.

    Parameters
    ----------
    sensitive : str or sequence of str, default=("sex",)
        Sensitive attribute(s). ``"sex"``: groups ``"Female"`` and ``"Male"`` (the paper
        codes them 0 and 1 = privileged: :attr:`Dataset.sensitive_codes`). Any other raw
        column, e.g. ``"race"`` (five groups, raw labels), is used as is; ``("sex",
        "race")`` gives two attributes for multi-attribute fair PCA. The columns used are
        removed from ``X``.
    split : {"all", "train", "test"}, default="all"
        ``"train"`` is ``adult.data`` (32,561 rows), ``"test"`` is ``adult.test`` (16,281
        rows, junk first line skipped, trailing periods removed from labels), ``"all"`` both.
    missing : {"category", "drop"}, default="category"
        Missing values (``?`` in workclass, occupation, native_country). ``"category"`` keeps
        the rows with the value ``"missing"`` (all 48,842 rows, the paper's 23.9% positives);
        ``"drop"`` removes the 3,620 rows with a missing value (45,222 rows, ``P(y=1) =
        0.2478``; Lee et al. 2022 subsampled these rows).
    drop : str or sequence of str, default=()
        Further feature columns to remove, e.g. ``("fnlwgt", "race")`` for the setup of
        Lee et al. 2022.
    data_dir : str, path-like or None, default=None
        Read ``<data_dir>/uci-adult/adult.{data,test}`` instead of the bundled copy.

    Returns
    -------
    dataset : Dataset
        ``X`` has the 14 raw features minus the sensitive and dropped ones.

    Raises
    ------
    DatasetNotFoundError
        ``data_dir`` is given and lacks the files.
    ChecksumMismatchError
        A file does not have its published SHA-256.
    """
    if split not in ("all", "train", "test"):
        raise ValueError(f"split must be 'all', 'train' or 'test'; got {split!r}.")
    if missing not in ("category", "drop"):
        raise ValueError(f"missing must be 'category' or 'drop'; got {missing!r}.")
    files = {"all": (ADULT_DATA, ADULT_TEST), "train": (ADULT_DATA,), "test": (ADULT_TEST,)}
    table = pd.concat(
        [read_table(raw, data_dir, _parse_adult) for raw in files[split]], ignore_index=True
    )
    if missing == "drop":
        table = table.dropna().reset_index(drop=True)
    else:
        categorical = [c for c in ADULT_COLUMNS if c not in ADULT_NUMERIC]
        table[categorical] = table[categorical].fillna("missing")
    table = _typed(table, ADULT_NUMERIC)
    label = (table["income"].astype(str) == ">50K").rename("income_gt_50k")
    sources = " + ".join(raw.filename for raw in files[split])
    description = (
        f"UCI Adult ({sources}), {len(table)} rows; missing values: {missing}. "
        "Becker & Kohavi (1996), CC BY 4.0."
    )
    return assemble(
        table,
        features=ADULT_COLUMNS,
        label=label,
        sensitive=sensitive,
        specs=ADULT_SPECS,
        drop=drop,
        name="adult",
        description=description,
        positive_label="income >50K",
    )


# --------------------------------------------------------------------------------- German

GERMAN_COLUMNS = (
    "checking_account_status",
    "duration_months",
    "credit_history",
    "purpose",
    "credit_amount",
    "savings_account",
    "employment_since",
    "installment_rate",
    "personal_status",
    "other_debtors",
    "residence_since",
    "property",
    "age",
    "other_installment_plans",
    "housing",
    "existing_credits",
    "job",
    "people_liable",
    "telephone",
    "foreign_worker",
)
GERMAN_NUMERIC = (
    "duration_months",
    "credit_amount",
    "installment_rate",
    "residence_since",
    "age",
    "existing_credits",
    "people_liable",
)
GERMAN_MALE_CODES = ("A91", "A93", "A94")  # A92 and A95 are female (german.doc)
GERMAN_SPECS = {
    "age": SensitiveSpec(
        "age",
        binary(lambda s: s >= 25),
        "1 = age >= 25 (privileged), 0 = age < 25",
        drop_source=False,
        labels={0: "under 25", 1: "25 or older"},
    ),
    "sex": SensitiveSpec(
        "personal_status",
        binary(lambda s: s.astype(str).isin(GERMAN_MALE_CODES)),
        "1 = male (personal_status A91, A93, A94), 0 = female (A92, A95)",
        labels={0: "Female", 1: "Male"},
    ),
}


def _parse_german(content: bytes) -> pd.DataFrame:
    return pd.read_csv(
        io.BytesIO(content),
        sep=" ",
        header=None,
        names=[*GERMAN_COLUMNS, "credit_risk"],
        dtype={column: "float64" for column in GERMAN_NUMERIC},
    )


def load_german(
    *,
    sensitive: str | Sequence[str] = ("age",),
    drop: str | Sequence[str] = (),
    data_dir: PathLike = None,
) -> Dataset:
    """Load UCI Statlog German credit from ``german.data``.

    1,000 rows, 20 attributes (categoricals keep their ``A..`` codes from ``german.doc``).
    The label is *bad* credit risk (class 2 in the file) coded ``y = 1``, so ``P(y=1) = 0.30``
    as reported in the paper and in the splits of Lee et al. 2022.

    Parameters
    ----------
    sensitive : str or sequence of str, default=("age",)
        ``"age"``: groups ``"25 or older"`` and ``"under 25"`` (the paper's attribute, coded
        1 and 0; ``age`` itself stays a feature, as in the paper). ``"sex"``: ``"Male"`` and
        ``"Female"`` (1 and 0), derived from ``personal_status`` (A91, A93, A94 male; A92,
        A95 female), which is then removed from ``X``. Any other raw column is used as is and
        removed from ``X``. The codes are :attr:`Dataset.sensitive_codes`.
    drop : str or sequence of str, default=()
        Further feature columns to remove; ``("personal_status",)`` with ``sensitive="age"``
        is the setup of Lee et al. 2022 (57 one-hot/scaled features with
        ``make_preprocessor(X, min_category_count=1)``, which keeps every category).
    data_dir : str, path-like or None, default=None
        Read ``<data_dir>/uci-german/german.data`` instead of the bundled copy.

    Returns
    -------
    dataset : Dataset

    Raises
    ------
    DatasetNotFoundError
        ``data_dir`` is given and lacks the file.
    ChecksumMismatchError
        The file does not have its published SHA-256.
    """
    table = _typed(read_table(GERMAN_DATA, data_dir, _parse_german), GERMAN_NUMERIC)
    label = (table.pop("credit_risk").astype(int) == 2).rename("bad_credit")
    return assemble(
        table,
        features=GERMAN_COLUMNS,
        label=label,
        sensitive=sensitive,
        specs=GERMAN_SPECS,
        drop=drop,
        name="german",
        description=(
            "UCI Statlog German credit (german.data), 1000 rows; y = 1 is bad credit risk "
            "(class 2). Hofmann (1994), CC BY 4.0."
        ),
        positive_label="bad credit risk (class 2)",
    )


# ----------------------------------------------------------------------------------- Bank

BANK_NUMERIC = (
    "age",
    "duration",
    "campaign",
    "pdays",
    "previous",
    "emp_var_rate",
    "cons_price_idx",
    "cons_conf_idx",
    "euribor3m",
    "nr_employed",
)
BANK_SPECS = {
    "age": SensitiveSpec(
        "age",
        binary(lambda s: s > 40),
        "1 = age > 40, 0 = age <= 40",
        drop_source=False,
        labels={0: "40 or under", 1: "over 40"},
    ),
}


def _parse_bank(content: bytes) -> pd.DataFrame:
    frame = pd.read_csv(io.BytesIO(content), sep=";", quotechar='"')
    return frame.rename(columns=lambda column: column.replace(".", "_"))


def load_bank(
    *,
    sensitive: str | Sequence[str] = ("age",),
    drop: str | Sequence[str] = (),
    data_dir: PathLike = None,
) -> Dataset:
    """Load UCI Bank Marketing from ``bank-additional-full.csv`` in the data directory.

    41,188 rows, 20 features (dots in column names replaced by underscores, ``"unknown"``
    kept as its own category). The label is term-deposit subscription ``y = "yes"`` coded 1,
    ``P(y=1) = 0.113``. Note UCI's caveat that ``duration`` is only known after the call;
    pass ``drop="duration"`` for a realistic predictive setting (the paper keeps it).

    Parameters
    ----------
    sensitive : str or sequence of str, default=("age",)
        ``"age"``: groups ``"over 40"`` and ``"40 or under"`` (the paper's attribute, coded 1
        and 0 in :attr:`Dataset.sensitive_codes`; ``age`` stays a feature). Any other raw
        column, e.g. ``"marital"``, is used as is and removed from ``X``.
    drop : str or sequence of str, default=()
        Further feature columns to remove.
    data_dir : str, path-like or None, default=None
        Data directory; ``None`` means ``$FAIRPCA_DATA_DIR``. The file is read from
        ``<data_dir>/uci-bank-marketing/bank-additional-full.csv``; it is never bundled.

    Returns
    -------
    dataset : Dataset

    Raises
    ------
    DatasetNotFoundError
        The file is not in the data directory (or no data directory is set).
    ChecksumMismatchError
        The file does not have its published SHA-256.
    """
    table = read_table(BANK_FULL, data_dir, _parse_bank)
    label = (table.pop("y").astype(str) == "yes").rename("subscribed")
    table = _typed(table, BANK_NUMERIC)
    return assemble(
        table,
        features=tuple(table.columns),
        label=label,
        sensitive=sensitive,
        specs=BANK_SPECS,
        drop=drop,
        name="bank",
        description=(
            "UCI Bank Marketing (bank-additional-full.csv), 41188 rows; y = 1 is a term-deposit "
            "subscription. Moro et al. (2014), CC BY 4.0."
        ),
        positive_label="subscribed a term deposit (y = yes)",
    )


# --------------------------------------------------------------------------------- COMPAS

COMPAS_FEATURES = (
    "sex",
    "age",
    "age_cat",
    "race",
    "juv_fel_count",
    "juv_misd_count",
    "juv_other_count",
    "priors_count",
    "c_charge_degree",
)
COMPAS_NUMERIC = ("age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count")
COMPAS_SPECS = {
    "race": SensitiveSpec(
        "race",
        binary(lambda s: s.astype(str) == "Caucasian"),
        "1 = Caucasian (privileged), 0 = any other race",
        labels={0: "other race", 1: "Caucasian"},
    ),
    "sex": SensitiveSpec(
        "sex",
        binary(lambda s: s.astype(str) == "Male"),
        "1 = Male, 0 = Female",
        labels={0: "Female", 1: "Male"},
    ),
}


def _parse_compas(content: bytes) -> pd.DataFrame:
    # The header repeats decile_score and priors_count; pandas names the copies "<name>.1".
    return pd.read_csv(io.BytesIO(content), low_memory=False)


def _propublica_rows(table: pd.DataFrame) -> pd.Series:
    """Row filter of ProPublica's analysis notebook (6,172 of 7,214 rows)."""
    return (
        table["days_b_screening_arrest"].between(-30, 30)
        & (table["is_recid"] != -1)
        & (table["c_charge_degree"] != "O")
        & (table["score_text"] != "N/A")
    )


def load_compas(
    *,
    sensitive: str | Sequence[str] = ("race",),
    features: Sequence[str] | None = None,
    propublica_filter: bool = False,
    drop: str | Sequence[str] = (),
    data_dir: PathLike = None,
) -> Dataset:
    """Load ProPublica COMPAS from ``compas-scores-two-years.csv`` in the data directory.

    The label is ``two_year_recid`` (1 = re-offended within two years): 7,214 rows with
    ``P(y=1) = 0.4507``, or 6,172 rows with ``P(y=1) = 0.4551`` after ProPublica's filter
    (the population Lee et al. 2022 subsampled).

    Parameters
    ----------
    sensitive : str or sequence of str, default=("race",)
        ``"race"``: groups ``"Caucasian"`` and ``"other race"`` (the paper's attribute,
        coded 1 and 0). ``"sex"``: ``"Male"`` and ``"Female"`` (1 and 0). The codes are
        :attr:`Dataset.sensitive_codes`. Any other feature column is used as is. The columns
        used are removed from ``X``.
    features : sequence of str or None, default=None
        Raw columns to use as features. ``None`` means demographics and criminal history:
        sex, age, age_cat, race, juv_fel_count, juv_misd_count, juv_other_count,
        priors_count, c_charge_degree. Identifiers, names, dates, later-outcome columns
        (``is_recid``, ``r_*``, ``event``, ...) and COMPAS's own scores (``decile_score``,
        ``score_text``: the tool under audit) are left out by default.
    propublica_filter : bool, default=False
        Keep only the rows of ProPublica's analysis (screening within 30 days of arrest,
        known recidivism, no ordinary traffic offence, a valid score).
    drop : str or sequence of str, default=()
        Feature columns to remove, e.g. ``"sex"`` for the setup of Lee et al. 2022.
    data_dir : str, path-like or None, default=None
        Data directory; ``None`` means ``$FAIRPCA_DATA_DIR``. The file is read from
        ``<data_dir>/propublica-compas/compas-scores-two-years.csv``; it is never bundled.

    Returns
    -------
    dataset : Dataset

    Raises
    ------
    DatasetNotFoundError
        The file is not in the data directory (or no data directory is set).
    ChecksumMismatchError
        The file does not have its published SHA-256.
    """
    table = read_table(COMPAS_TWO_YEARS, data_dir, _parse_compas)
    chosen = COMPAS_FEATURES if features is None else tuple(features)
    unknown = [column for column in chosen if column not in table.columns]
    forbidden = [column for column in chosen if column == "two_year_recid"]
    if unknown or forbidden or not chosen:
        raise ValueError(
            f"features must be non-empty raw COMPAS columns other than the label "
            f"'two_year_recid'; invalid: {unknown + forbidden}. Available: {list(table.columns)}."
        )
    if propublica_filter:
        table = table[_propublica_rows(table)].reset_index(drop=True)
    label = table["two_year_recid"].astype(int).rename("two_year_recid")
    # Sensitive columns are read even when not listed as features (assemble drops them).
    wanted = [
        COMPAS_SPECS[n].source if n in COMPAS_SPECS else n for n in as_names(sensitive, "sensitive")
    ]
    columns = list(dict.fromkeys([*chosen, *(c for c in wanted if c in table.columns)]))
    numeric = [c for c in columns if pd.api.types.is_numeric_dtype(table[c])]
    table = _typed(table[columns].copy(), numeric)
    return assemble(
        table,
        features=tuple(columns),
        label=label,
        sensitive=sensitive,
        specs=COMPAS_SPECS,
        drop=drop,
        name="compas",
        description=(
            f"ProPublica COMPAS (compas-scores-two-years.csv), {len(table)} rows"
            f"{' (ProPublica filter)' if propublica_filter else ''}; y = 1 is two-year "
            "recidivism."
        ),
        positive_label="re-offended within two years (two_year_recid = 1)",
    )


def load_dataset(name: str, **kwargs) -> Dataset:
    """Load a public dataset by name.

    Parameters
    ----------
    name : {"adult", "german", "bank", "compas"}
        Dataset name (case-insensitive).
    **kwargs
        Passed to :func:`load_adult`, :func:`load_german`, :func:`load_bank` or
        :func:`load_compas`.

    Returns
    -------
    dataset : Dataset
    """
    loaders = {"adult": load_adult, "german": load_german, "bank": load_bank, "compas": load_compas}
    key = str(name).strip().lower()
    if key not in loaders:
        raise ValueError(
            f"Unknown dataset {name!r}; choose one of {list(DATASET_NAMES)}, or load your own "
            "file with fairpca.datasets.load_user_data(path, label=..., sensitive=...)."
        )
    return loaders[key](**kwargs)
