"""The one builder of metric names: points, intervals and per-group values agree, and every name
is one MLflow accepts."""

from __future__ import annotations

import re
from typing import Any

# Characters MLflow accepts in metric names; others become "_".
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_\-. :/]")


def metric_names(values: dict) -> dict:
    """``values`` with every name made MLflow-safe (rejected characters become ``_``).

    Raises if two names collide.
    """
    safe_values = {}
    for name, value in values.items():
        safe = _UNSAFE_NAME.sub("_", name)
        if safe in safe_values:
            raise ValueError(
                f"two metric names become {safe!r} once characters MLflow rejects are "
                f"replaced; rename the groups so their labels differ in letters or digits."
            )
        safe_values[safe] = value
    return safe_values


def group_label(name: str, group: Any, attributes: dict) -> str:
    """The label as text; an intersection group is ``<attr1>:<group1>/<attr2>:<group2>``."""
    if name != "intersection":
        return str(group)
    return "/".join(f"{a}:{g}" for a, g in zip(attributes, group, strict=True))


def group_name(name: str, group: Any, attributes: dict) -> str:
    """``<attr>:<group>`` of metric names; an intersection group is named by its label."""
    label = group_label(name, group, attributes)
    return label if name == "intersection" else f"{name}:{label}"
