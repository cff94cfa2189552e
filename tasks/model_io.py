"""What the logged model carries besides its weights, and where the audit may write.

- :func:`input_example`: the model's example input, synthetic for real: per-column medians
  and quartiles of numeric columns, and for categoricals only categories that occur in at
  least ``min_group_size`` rows (else a placeholder the encoder treats as unseen), so no
  single person's value is ever logged.
- :func:`path_inside`: every written path resolves inside its base directory.
- :func:`write_manifest` / :func:`verify_manifest`: SHA-256 of every file of a saved model,
  written when the audit saves it and checked before anything logs it again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from fairpca.datasets import RARE_CATEGORY

__all__ = [
    "MANIFEST_FILE",
    "PLACEHOLDER_CATEGORY",
    "as_model_input",
    "input_example",
    "path_inside",
    "verify_manifest",
    "write_manifest",
]

PLACEHOLDER_CATEGORY = RARE_CATEGORY  # the pooled bucket of rare categories
MANIFEST_FILE = "model.sha256.json"


def input_example(X_train: pd.DataFrame, min_group_size: int = 30) -> pd.DataFrame:
    """Two synthetic rows built from aggregates only.

    Numeric columns: the median and the lower quartile, rounded to 3 significant digits
    (the median of an odd number of distinct values is one row's value). Categorical
    columns: the most frequent and the second most frequent category if they occur in at
    least ``min_group_size`` rows, otherwise :data:`PLACEHOLDER_CATEGORY`. No raw row and no
    sensitive attribute is used (sensitive columns are not features).
    """
    rows: list[dict[str, Any]] = [{}, {}]
    for column in X_train.columns:
        values = X_train[column]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            rows[0][column] = _rounded(values.median())
            rows[1][column] = _rounded(values.quantile(0.25))
            continue
        counts = values.astype(str).value_counts()
        common = [str(value) for value, n in counts.items() if n >= min_group_size][:2]
        common += [PLACEHOLDER_CATEGORY] * (2 - len(common))
        rows[0][column], rows[1][column] = common
    return pd.DataFrame(rows, columns=list(X_train.columns))


def _rounded(value: float) -> float:
    return float(f"{value:.3g}")


def as_model_input(X: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as plain strings (the model's input schema)."""
    out = X.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]) or pd.api.types.is_bool_dtype(
            out[column]
        ):
            out[column] = out[column].astype(str)
    return out


def path_inside(base: str | Path, *parts: str) -> Path:
    """``base / parts...``, refused unless it resolves inside ``base`` (no ``..``, no
    absolute part, no symlink out of it)."""
    root = Path(base).resolve()
    target = root.joinpath(*parts).resolve()
    if target == root or not target.is_relative_to(root):
        raise ValueError(
            f"path {'/'.join(parts)!r} would be written outside {root} (it resolves to "
            f"{target}); use a plain name without '/', '..' or an absolute path."
        )
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(model_dir: Path) -> Path:
    """Record the SHA-256 of every file under ``model_dir`` in ``<parent>/model.sha256.json``."""
    model_dir = Path(model_dir)
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    hashes = {p.relative_to(model_dir).as_posix(): _sha256(p) for p in files}
    manifest = model_dir.parent / MANIFEST_FILE
    manifest.write_text(json.dumps(hashes, indent=2, sort_keys=True))
    return manifest


def verify_manifest(model_dir: Path) -> None:
    """Every file of ``model_dir`` must be the one the audit wrote.

    Raises
    ------
    ValueError
        No manifest, a file missing, added or changed (named), or a manifest entry that
        points outside ``model_dir``.
    """
    model_dir = Path(model_dir)
    manifest = model_dir.parent / MANIFEST_FILE
    if not manifest.is_file():
        raise ValueError(
            f"{model_dir.parent} has no {MANIFEST_FILE}: it was not written by a fairpca "
            "audit (or predates the manifest), so its model is not logged."
        )
    expected = json.loads(manifest.read_text())
    present = {p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file()}
    added = sorted(present - set(expected))
    if added:
        raise ValueError(f"{model_dir}: file(s) {added} are not in {MANIFEST_FILE}.")
    for name, digest in expected.items():
        path = path_inside(model_dir, name)
        if not path.is_file():
            raise ValueError(f"{model_dir}: file {name!r} of {MANIFEST_FILE} is missing.")
        if _sha256(path) != digest:
            raise ValueError(
                f"{model_dir}: file {name!r} changed since the audit wrote it (SHA-256 "
                f"differs from {MANIFEST_FILE}); re-run the audit instead of logging it."
            )
