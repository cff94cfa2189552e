"""Checks the command line runs before any Prefect server starts.

A bad input must end within seconds with one message that names the problem, the value and
the fix: the data source loads (file, encoding, separator, columns, label, groups), the
target dimension fits the screened and encoded data, and the output directory is writable
with no audit of the same name in it. Nothing here imports Prefect or MLflow.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["PreflightError", "check_before_run", "max_components"]


class PreflightError(ValueError):
    """An input that would make the audit fail; the message says what, which value, the fix."""


def max_components(
    dataset: Any, variants: list[str], min_category_count: int = 30
) -> tuple[int, int, int]:
    """Largest k the variants allow: ``(k_max, encoded width d, mean constraints r)``.

    Fair PCA keeps ``U`` in the null space of the ``r = sum_a (g_a - 1)`` group-mean
    constraints (Algorithm 1/2, stacked attributes as in Sec. 3.5), so ``k <= d - r``; plain
    PCA needs ``k <= d``. ``d`` is the width of the fitted preprocessor on the screened
    columns (one-hot categoricals capped as in :func:`fairpca.datasets.make_preprocessor`).
    """
    from fairpca.datasets import make_preprocessor

    preprocessor = make_preprocessor(dataset.X, min_category_count=min_category_count)
    width = len(preprocessor.fit(dataset.X).get_feature_names_out())
    sensitive = dataset.sensitive
    constraints = int(sum(sensitive[column].nunique() - 1 for column in sensitive.columns))
    fair = any(variant != "pca" for variant in variants)
    return (width - constraints if fair else width), width, constraints


def _check_k(config, dataset) -> str | None:
    """A clear error for a given k that cannot fit; the note when k is chosen by default."""
    from fairpca.tasks.represent import DEFAULT_MAX_K

    k_max, width, constraints = max_components(
        dataset, list(config.variants), config.min_group_size
    )
    screened = getattr(dataset, "screened", {}) or {}
    more = f" or keep screened columns (--keep; screened: {list(screened)})" if screened else ""
    if k_max < 1:
        raise PreflightError(
            f"the data encode to {width} feature column(s) and the sensitive attribute(s) "
            f"impose {constraints} group-mean constraint(s), so fair PCA has no dimension "
            f"left; add feature columns{more}."
        )
    if config.k is None:
        return (
            f"-k not given: k = min({DEFAULT_MAX_K}, the largest k these data allow, {k_max}) "
            f"= {min(DEFAULT_MAX_K, k_max)} (decided again on the encoded training rows)"
        )
    if config.k <= k_max:
        return None
    raise PreflightError(
        f"k={config.k} is larger than possible: the data encode to {width} feature "
        f"column(s) and the sensitive attribute(s) impose {constraints} group-mean "
        f"constraint(s), so at most k={k_max}; pass -k {k_max} or less{more}."
    )


def _check_output_dir(output_dir: Path, run_name: str | None) -> None:
    from fairpca.tasks.model_io import path_inside

    base = Path(output_dir)
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
        target = path_inside(base, run_name)
        if target.exists():
            raise PreflightError(
                f"{target} already exists (run_name {run_name!r}); nothing is overwritten: "
                "choose another run_name or leave it unset."
            )


def _check_signing_key(output_dir: Path) -> None:
    """The key that will seal the output directory can be read (or created) outside it."""
    from fairpca.tasks.signing import SealError, key_path, signing_key

    try:
        signing_key(create=True)
    except (SealError, OSError) as error:
        raise PreflightError(f"the audit cannot sign its output directory: {error}") from error
    if key_path().resolve().is_relative_to(Path(output_dir).resolve()):
        raise PreflightError(
            f"the signing key {key_path()} lies inside --output-dir {output_dir}; set "
            "XDG_CONFIG_HOME (or FAIRPCA_SIGNING_KEY) so the key is kept elsewhere."
        )


def check_before_run(config) -> list[str]:
    """Load the data source and check k and the output directory; return the warnings.

    Raises
    ------
    PreflightError
        For any input that would make the audit fail.
    """
    from fairpca.datasets import ScreeningWarning
    from fairpca.tasks.sources import load_source

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dataset = load_source(config)
        except (ValueError, TypeError, OSError, LookupError) as error:
            raise PreflightError(str(error)) from error
    k_note = _check_k(config, dataset)
    _check_output_dir(config.output_dir, config.run_name)
    _check_signing_key(config.output_dir)
    # The flow loads the data again; the screening was reported here already.
    warnings.filterwarnings("ignore", category=ScreeningWarning)
    found = [str(item.message) for item in caught if issubclass(item.category, UserWarning)]
    return found + ([k_note] if k_note else [])
