"""Which types a fairpca model file may hold: one rule for saving, loading and relogging.

A fitted pipeline (preprocess -> representation -> classifier) is saved with skops, which
refuses to rebuild any type outside its own defaults unless told to trust it. The types
fairpca tells it to trust are the fixed :data:`TRUSTED_TYPES`, never read from the model (a
crafted ``MLmodel`` file could list anything):

- saving (:func:`types_to_trust`): a pipeline holding any other type is refused, so nothing
  is saved that the project would refuse to load;
- loading and relogging (:func:`skops_file_types`): a file asking for any other type is
  refused before anything in it is deserialised.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "TRUSTED_TYPES",
    "UntrustedModelError",
    "foreign_types",
    "skops_file",
    "skops_file_types",
    "types_to_trust",
]

# Every type a fairpca pipeline holds beyond skops' defaults. The tests rebuild every
# variant and classifier and check this list is complete.
TRUSTED_TYPES = frozenset(
    {
        "fairpca._fair_pca.FairPCA",
        "fairpca.datasets._preprocess.RareCategoryPooler",
        "fairpca._kernel.FairKernelPCA",
        "fairpca._kernel_maps.KernelFactor",
        "fairpca._kernel_maps.KernelFunction",
        "fairpca._kernel_maps.NystroemMap",
        "numpy.dtype",
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    }
)


class UntrustedModelError(RuntimeError):
    """A model file cannot be verified as one fairpca wrote; it is not loaded."""


def foreign_types(types: Iterable[str]) -> list[str]:
    """The rule: the names in ``types`` outside :data:`TRUSTED_TYPES`, sorted."""
    return sorted({str(name) for name in types} - TRUSTED_TYPES)


def types_to_trust(pipeline) -> list[str]:
    """The types skops must be told to trust to reload ``pipeline`` (the save path).

    Raises
    ------
    TypeError
        The pipeline holds a type outside :data:`TRUSTED_TYPES`: it would be saved but never
        loaded again, so it is refused now.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(data=skops.io.dumps(pipeline))
    if foreign := foreign_types(needed):
        raise TypeError(
            f"the pipeline holds types fairpca does not trust: {foreign}; a model holding them "
            "could not be loaded again, so it is not saved (use fairpca's representations and "
            "the audit's classifiers)."
        )
    return sorted(needed)


def skops_file(model_dir: Path) -> Path:
    """The skops file of an MLflow sklearn model directory; refuse any other format."""
    import yaml

    model_dir = Path(model_dir)
    flavor = yaml.safe_load((model_dir / "MLmodel").read_text())["flavors"].get("sklearn", {})
    serialization = flavor.get("serialization_format")
    if serialization != "skops":
        raise UntrustedModelError(
            f"the model in {model_dir} is serialised as {serialization!r}; only 'skops' is "
            "loaded (pickle could run arbitrary code)."
        )
    path = (model_dir / str(flavor.get("pickled_model", ""))).resolve()
    if model_dir.resolve() not in path.parents or not path.is_file():
        raise UntrustedModelError(f"the model file {flavor.get('pickled_model')!r} is missing")
    return path


def skops_file_types(path: Path) -> list[str]:
    """The types the skops file ``path`` needs trusted (read without executing anything).

    Raises
    ------
    UntrustedModelError
        One of them is outside :data:`TRUSTED_TYPES`.
    """
    import skops.io

    needed = skops.io.get_untrusted_types(file=path)
    if foreign := foreign_types(needed):
        raise UntrustedModelError(
            f"{Path(path).name} holds types fairpca does not trust: {foreign}; it is not loaded."
        )
    return list(needed)
