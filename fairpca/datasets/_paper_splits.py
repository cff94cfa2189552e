"""The ten 70/30 splits of Lee et al. (2022) used for Tables 1-3 of the paper."""

from __future__ import annotations

import gzip
import io
import os
import zlib

import numpy as np

from ._files import LEE2022_SOURCE, RawFile, not_found_error, resolve_data_dir

__all__ = ["LEE2022_DIMENSIONS", "load_lee2022_split"]

#: Number of (standardized, one-hot encoded) feature columns per dataset.
LEE2022_DIMENSIONS = {"adult": 97, "german": 57, "compas": 11}
N_SPLITS = 10


def _read_split_file(raw: RawFile, data_dir, n_features: int) -> np.ndarray:
    root = resolve_data_dir(data_dir)
    path = None if root is None else root / raw.subdir / raw.filename
    if path is None or not path.is_file():
        raise not_found_error(raw, path)
    try:
        text = gzip.decompress(path.read_bytes()).decode("ascii")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is not a readable gzip-compressed CSV ({error}); download the split again "
            f"from {raw.source}."
        ) from error
    lines = text.splitlines()
    if lines and not _is_numeric_row(lines[0]):  # tolerate a header row
        lines = lines[1:]
    try:
        table = np.loadtxt(io.StringIO("\n".join(lines)), delimiter=",", ndmin=2)
    except ValueError as error:
        raise ValueError(
            f"{path} does not parse as a numeric CSV ({error}); download it again from "
            f"{raw.source}."
        ) from error
    expected = n_features + 2
    if table.shape[0] == 0 or table.shape[1] != expected:
        raise ValueError(
            f"{path} has shape {table.shape}; expected rows of {expected} columns "
            f"({n_features} features, then y and z). Download it again from {raw.source}."
        )
    labels = table[:, -2:]
    if not np.isfinite(table).all() or not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError(
            f"{path} has non-finite values or y/z outside {{0, 1}}; download it again from "
            f"{raw.source}."
        )
    return table


def _is_numeric_row(line: str) -> bool:
    try:
        [float(value) for value in line.split(",")]
    except ValueError:
        return False
    return True


def load_lee2022_split(
    dataset: str,
    index: int,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load one of the ten train/test splits of Lee et al. (2022).

    Files ``lee2022-splits/{dataset}/{train,test}_{index}.csv.gz`` in the data directory;
    each row holds the standardized features, then the label ``y``, then the sensitive
    attribute ``z`` (both 0/1). These files are never bundled.

    Parameters
    ----------
    dataset : {"adult", "german", "compas"}
        Which dataset (feature dimensions 97, 57 and 11).
    index : int
        Split number, 0 to 9.
    data_dir : str, path-like or None, default=None
        Data directory; ``None`` means ``$FAIRPCA_DATA_DIR``.

    Returns
    -------
    X_train : ndarray of shape (n_train, d), float64
    y_train : ndarray of shape (n_train,), int64
        Label: adult income >50K, german bad credit, compas two-year recidivism.
    z_train : ndarray of shape (n_train,), int64
        Sensitive attribute: adult 1 = male, german 1 = age >= 25, compas 1 = Caucasian.
    X_test : ndarray of shape (n_test, d), float64
    y_test : ndarray of shape (n_test,), int64
    z_test : ndarray of shape (n_test,), int64

    Raises
    ------
    DatasetNotFoundError
        A split file is missing.
    ValueError
        Unknown dataset or index, or a file that does not parse with the expected columns.
    """
    if dataset not in LEE2022_DIMENSIONS:
        raise ValueError(
            f"Unknown Lee et al. 2022 dataset {dataset!r}; choose one of "
            f"{list(LEE2022_DIMENSIONS)}."
        )
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise TypeError(f"index must be an int from 0 to {N_SPLITS - 1}; got {index!r}.")
    if not 0 <= index < N_SPLITS:
        raise ValueError(f"index must be between 0 and {N_SPLITS - 1}; got {index}.")
    arrays = []
    for part in ("train", "test"):
        raw = RawFile(f"lee2022-splits/{dataset}", f"{part}_{index}.csv.gz", None, LEE2022_SOURCE)
        table = _read_split_file(raw, data_dir, LEE2022_DIMENSIONS[dataset])
        arrays += [
            np.ascontiguousarray(table[:, :-2]),
            table[:, -2].astype(np.int64),
            table[:, -1].astype(np.int64),
        ]
    return tuple(arrays)
