"""fairpca: efficient fair PCA for fair representation learning.

Scikit-learn compatible estimators and metrics implementing Kleindessner, Donini, Russell and
Zafar, "Efficient fair PCA for fair representation learning" (AISTATS 2023).
"""

from ._chunked import ArrayChunks, IterableChunks, ParquetChunks
from ._fair_pca import FairPCA
from ._kernel import FairKernelPCA
from ._memory import InsufficientMemoryError

__all__ = [
    "ArrayChunks",
    "FairKernelPCA",
    "FairPCA",
    "InsufficientMemoryError",
    "IterableChunks",
    "ParquetChunks",
]
__version__ = "0.1.0"
