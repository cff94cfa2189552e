"""Dataset loaders for fair PCA experiments and audits.

Public datasets of the paper (Adult and German credit bundled; Bank Marketing, COMPAS and the
splits of Lee et al. 2022 read from ``$FAIRPCA_DATA_DIR``), user CSV/Parquet files, and the
feature preprocessor. Every raw file is checked against its published SHA-256 before it is
parsed.
"""

from ._dataset import Dataset
from ._files import DATA_DIR_ENV, ChecksumMismatchError, DatasetNotFoundError, DataTooLargeError
from ._paper_splits import LEE2022_DIMENSIONS, load_lee2022_split
from ._preprocess import (
    MIN_CATEGORY_COUNT,
    RARE_CATEGORY,
    RareCategoryPooler,
    make_preprocessor,
    split_feature_kinds,
)
from ._public import (
    DATASET_NAMES,
    load_adult,
    load_bank,
    load_compas,
    load_dataset,
    load_german,
)
from ._screen import (
    ColumnScreening,
    NumericTextWarning,
    ScreeningWarning,
    balanced_accuracy_alone,
    leaking_columns,
    screen_columns,
    warn_screened,
)
from ._user import LabelValuesWarning, detect_separator, load_user_data

__all__ = [
    "DATASET_NAMES",
    "DATA_DIR_ENV",
    "LEE2022_DIMENSIONS",
    "MIN_CATEGORY_COUNT",
    "RARE_CATEGORY",
    "ChecksumMismatchError",
    "ColumnScreening",
    "DataTooLargeError",
    "Dataset",
    "DatasetNotFoundError",
    "LabelValuesWarning",
    "NumericTextWarning",
    "RareCategoryPooler",
    "ScreeningWarning",
    "balanced_accuracy_alone",
    "detect_separator",
    "leaking_columns",
    "load_adult",
    "load_bank",
    "load_compas",
    "load_dataset",
    "load_german",
    "load_lee2022_split",
    "load_user_data",
    "make_preprocessor",
    "screen_columns",
    "split_feature_kinds",
    "warn_screened",
]
