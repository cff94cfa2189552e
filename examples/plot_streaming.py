"""
Streaming: ``partial_fit`` and ``fit_chunks``
=============================================

Fair PCA needs only statistics that merge exactly: counts, means, the scatter matrix and
per-group sums. So rows can arrive in chunks, today's batch after yesterday's, or be read
from a file larger than memory, and the projection equals the one ``fit`` computes on all
rows at once. This example streams 40,000 synthetic rows in chunks and compares.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from fairpca import FairPCA

rng = np.random.default_rng(0)
n, d = 40_000, 60
groups = rng.choice(["a", "b", "c"], size=n, p=[0.6, 0.3, 0.1])
shift = {"a": 0.0, "b": 0.5, "c": -1.0}
X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)
X[:, :5] += np.array([shift[g] for g in groups])[:, None]

at_once = FairPCA(n_components=8).fit(X, sensitive_features=groups)


def subspace_distance(a, b):
    """Largest principal angle's sine between the row spaces of two component matrices."""
    return np.linalg.norm(a.T @ a - b.T @ b, 2)


# %%
# ``partial_fit``: usable after every chunk
# -----------------------------------------
# Each call adds a chunk and refits from all the statistics so far. After the last chunk the
# components are those of the one-shot fit, to rounding.
streamed = FairPCA(n_components=8)
distances = []
for start in range(0, n, 4_000):
    rows = slice(start, start + 4_000)
    streamed.partial_fit(X[rows], sensitive_features=groups[rows])
    distances.append(subspace_distance(streamed.components_, at_once.components_))
print(f"after the last chunk: distance {distances[-1]:.1e}, mean gap {streamed.mean_gap_:.1e}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogy(np.arange(1, len(distances) + 1) * 4_000, distances, marker="o")
ax.set_xlabel("rows seen")
ax.set_ylabel("distance to the one-shot fit")
ax.set_title("partial_fit converges to fit")
fig.tight_layout()

# %%
# ``fit_chunks``: one pass over a file
# ------------------------------------
# A ``.npy`` file is memory-mapped and read chunk by chunk (here 5,000 rows at a time); the
# labels may be a file too. The fitted estimator keeps no statistics: it pickles as small as
# after ``fit``.
with tempfile.TemporaryDirectory() as folder:
    np.save(Path(folder) / "X.npy", X)
    np.save(Path(folder) / "groups.npy", groups)
    from_file = FairPCA(n_components=8).fit_chunks(
        Path(folder) / "X.npy", sensitive_features=Path(folder) / "groups.npy", chunk_rows=5_000
    )
gap = subspace_distance(from_file.components_, at_once.components_)
print(f"fit_chunks vs fit: distance {gap:.1e}")

# %%
# Any iterable of ``(X, sensitive_features)`` tuples works as well, e.g. batches from a
# database cursor:
batches = ((X[i : i + 10_000], groups[i : i + 10_000]) for i in range(0, n, 10_000))
from_batches = FairPCA(n_components=8).fit_chunks(batches)
gap = subspace_distance(from_batches.components_, at_once.components_)
print(f"from batches vs fit: distance {gap:.1e}")
plt.show()
