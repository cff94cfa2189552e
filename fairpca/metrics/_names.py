"""The one builder of metric names: points, intervals and per-group values agree, and every name
is one MLflow accepts (``mlflow.utils.validation._validate_metric_name``: letters, digits,
``_ - . : /`` and spaces; no ``//`` or other path that normalises to another name; at most 250
characters, here 240 so that ``.ci95_high`` still fits).

Names are ``<measure>.<attribute>`` and ``<rate>.<attribute>:<group>``; an intersection group is
``<attr1>:<group1>/<attr2>:<group2>``. An attribute or group label of any hashable type becomes
a *token*: characters MLflow rejects, and ``/`` (the separator), become ``_``; a token longer
than 60 characters is cut and ends in a hash of the label. Labels whose tokens coincide (``1``
and ``"1"``, ``a<b`` and ``a>b``) all get the suffix ``_<8 hex digits>`` of a SHA-256 of their
type and ``repr``, so the same labels always get the same names. ``intersection`` is reserved for
the cross-attribute grouping; an attribute whose token is ``intersection`` gets the suffix too.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

# Characters kept in a token; "/" separates the attributes of an intersection group.
_UNSAFE_TOKEN = re.compile(r"[^A-Za-z0-9_\-. :]")
TOKEN_LENGTH = 60
# MLflow's limit on metric keys (250) less the longest interval suffix (".ci95_high").
NAME_LENGTH = 240
INTERSECTION = "intersection"


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _typed(label: Any) -> str:
    """Text that tells labels of different types apart (``1`` vs ``"1"``)."""
    kind = type(label)
    return f"{kind.__module__}.{kind.__qualname__}:{label!r}"


def token(label: Any) -> str:
    """The MLflow-safe text of one label (not yet made unique)."""
    text = label if isinstance(label, str) else str(label)
    safe = _UNSAFE_TOKEN.sub("_", text)
    if len(safe) > TOKEN_LENGTH:
        safe = f"{safe[: TOKEN_LENGTH - 9]}_{_digest(_typed(label))}"
    return safe


def unique_tokens(labels: list, reserved: frozenset = frozenset()) -> list[str]:
    """Tokens of ``labels``, distinct from each other and from ``reserved``.

    Every label whose token is shared (or reserved) gets ``_<hash>`` of its type and repr;
    should two of those still coincide, the hash grows until they differ.

    Examples
    --------
    >>> unique_tokens([1, "1", "a<b", "a>b", "n/a // unknown"])
    ['1_70126a15', '1_21fff628', 'a_b_431ced94', 'a_b_5e69509e', 'n_a __ unknown']
    """
    tokens = [token(label) for label in labels]
    counts = Counter(tokens)
    for length in range(8, 65, 8):
        result = [
            f"{t}_{_digest(_typed(label), length)}" if counts[t] > 1 or t in reserved else t
            for label, t in zip(labels, tokens, strict=True)
        ]
        if len(set(result)) == len(result) and not reserved & set(result):
            return result
    raise AssertionError("labels with equal type and repr: the encoder gave duplicate groups")


def attribute_tokens(names: list) -> list[str]:
    """Tokens of the attribute names; ``intersection`` stays free for the cross grouping."""
    return unique_tokens(names, reserved=frozenset({INTERSECTION}))


def metric_names(values: dict) -> dict:
    """``values`` with every name at most ``NAME_LENGTH`` characters (a longer one is cut and
    ends in a hash of the whole name). Names are built from tokens, so they are MLflow-valid;
    should two coincide, the later gets a hash of its position too."""
    named = {}
    for position, (name, value) in enumerate(values.items()):
        if len(name) > NAME_LENGTH:
            name = f"{name[: NAME_LENGTH - 11]}_{_digest(name, 10)}"
        if name in named:
            name = f"{name[: NAME_LENGTH - 11]}_{_digest(f'{position}:{name}', 10)}"
        named[name] = value
    return named


def group_label(name: str, group: Any, attributes: dict) -> str:
    """The label as readable text; an intersection group is ``<attr1>:<group1>/<attr2>:...``."""
    if name != INTERSECTION:
        return str(group)
    return "/".join(f"{a}:{g}" for a, g in zip(attributes, group, strict=True))


def group_tokens(groups: dict) -> dict[tuple[Any, Any], tuple[str, str]]:
    """``(attribute, group)`` -> ``(attribute token, group token)``: how the metric names of
    a grouping of these labels (``{attribute: [group labels]}``) spell them.

    Examples
    --------
    >>> group_tokens({"race": ["Hispanic/Latino", "White"]})
    {('race', 'Hispanic/Latino'): ('race', 'Hispanic_Latino'), ('race', 'White'): ('race', 'White')}
    """
    names = list(groups)
    out = {}
    for name, name_token in zip(names, attribute_tokens(names), strict=True):
        labels = list(groups[name])
        for label, label_token in zip(labels, unique_tokens(labels), strict=True):
            out[(name, label)] = (name_token, label_token)
    return out
