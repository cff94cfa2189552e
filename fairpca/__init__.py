"""fairpca: efficient fair PCA for fair representation learning.

Scikit-learn compatible estimators and metrics implementing Kleindessner, Donini, Russell and
Zafar, "Efficient fair PCA for fair representation learning" (AISTATS 2023).
"""

from ._fair_pca import FairPCA
from ._kernel import FairKernelPCA

__all__ = ["FairKernelPCA", "FairPCA"]
__version__ = "0.1.0"
