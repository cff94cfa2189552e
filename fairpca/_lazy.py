"""Public names of a package imported on first use (PEP 562), so that importing one light
submodule (the command line's settings, a constant) does not import scikit-learn and SciPy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``, whose public names are
    ``exports``: ``{submodule: names}`` (``"._fair_pca": ["FairPCA"]``)."""
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home[name], package), name)

    def __dir__() -> list[str]:
        return sorted(home)

    return sorted(home), __getattr__, __dir__
