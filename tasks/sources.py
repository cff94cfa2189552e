"""The audit's data source, loaded without Prefect (the command line checks it before any
server starts; :func:`fairpca.tasks.data.load_data` is the Prefect task around it)."""

from __future__ import annotations

from typing import Any

__all__ = ["load_source"]


def load_source(source) -> Any:
    """The :class:`fairpca.datasets.Dataset` named by an audit config's ``source`` section; a
    bundled dataset's coded groups carry their names (``Female`` / ``Male``, not 0 / 1) into
    the audit."""
    from fairpca import datasets

    if source.dataset is not None:
        kwargs: dict[str, Any] = {"data_dir": source.data_dir}
        if source.sensitive:
            kwargs["sensitive"] = tuple(source.sensitive)
        return datasets.load_dataset(source.dataset, **kwargs).with_named_groups()
    return datasets.load_user_data(
        source.data,
        label=source.label,
        sensitive=tuple(source.sensitive),
        positive_label=_typed_label(source),
        keep=tuple(source.keep),
        drop=tuple(source.drop),
        sep=source.sep,
        leakage=False,  # decided on the training rows (fairpca.tasks.data.split_data)
    )


def _typed_label(source) -> Any:
    """``positive_label`` arrives as text (CLI, YAML); match it to a numeric label column."""
    value = source.positive_label
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number
