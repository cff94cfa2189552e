"""fairpca: efficient fair PCA for fair representation learning.

Scikit-learn compatible estimators and metrics implementing Kleindessner, Donini, Russell and
Zafar, "Efficient fair PCA for fair representation learning" (AISTATS 2023).
"""

from ._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._chunked": ["ArrayChunks", "IterableChunks", "ParquetChunks"],
        "._fair_pca": ["FairPCA"],
        "._kernel": ["FairKernelPCA"],
        "._memory": ["InsufficientMemoryError"],
    },
)
__version__ = "0.1.0"
