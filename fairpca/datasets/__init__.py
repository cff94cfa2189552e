"""Dataset loaders for fair PCA experiments and audits.

Public datasets of the paper (Adult and German credit bundled; Bank Marketing, COMPAS and the
splits of Lee et al. 2022 read from ``$FAIRPCA_DATA_DIR``), user CSV/Parquet files, and the
feature preprocessor. Every raw file is checked against its published SHA-256 before it is
parsed.
"""

from .._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._dataset": ["Dataset"],
        "._files": [
            "DATA_DIR_ENV",
            "ChecksumMismatchError",
            "DatasetNotFoundError",
            "DataTooLargeError",
        ],
        "._paper_splits": ["LEE2022_DIMENSIONS", "load_lee2022_split"],
        "._preprocess": [
            "RareCategoryPooler",
            "make_preprocessor",
            "split_feature_kinds",
        ],
        "._public": [
            "DATASET_NAMES",
            "load_adult",
            "load_bank",
            "load_compas",
            "load_dataset",
            "load_german",
        ],
        "._limits": ["MIN_CATEGORY_COUNT"],
        "._screen": [
            "RARE_CATEGORY",
            "ColumnScreening",
            "NumericTextWarning",
            "ScreeningWarning",
            "balanced_accuracy_alone",
            "leaking_columns",
            "screen_columns",
            "warn_screened",
        ],
        "._user": ["LabelValuesWarning", "detect_separator", "load_user_data"],
    },
)
