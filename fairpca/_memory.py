"""Memory budget: sizes of the working sets and a check before any large allocation.

Fair PCA's exact routes hold d x d matrices (the scatter, its deflated copy, the eigensolver's
workspace; Fair PCA-S one scatter per group) and exact fair kernel PCA holds n x n kernel
matrices. A width that does not fit must end in a clear error before anything is allocated,
never in a crash of the BLAS library or a swap storm. The budget is the memory the operating
system reports as available (``MemAvailable`` of ``/proc/meminfo``, else free physical pages;
at most what a container's memory cgroup still allows), or the value of the environment
variable ``FAIRPCA_MEMORY_LIMIT`` (bytes, or with a unit such
as ``512MB`` or ``4GiB``).
"""

from __future__ import annotations

import os
import re

BLOCK_BYTES = 1 << 26  # 64 MiB: a chunk of rows, a centred block, a kernel batch
BLOCK_ROWS = 8192  # rows summed at once in a bounded-size product
LIMIT_VARIABLE = "FAIRPCA_MEMORY_LIMIT"
FLOAT_BYTES = 8
PARALLEL_FITS = 2  # representations an audit fits at once (its task runner's workers)

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def rows_per_block(n_features: int, itemsize: int = 8, most: int | None = None) -> int:
    """Rows of a block of about ``BLOCK_BYTES``: at least 256, at most ``most`` if given."""
    rows = max(256, BLOCK_BYTES // (itemsize * max(n_features, 1)))
    return int(rows if most is None else min(rows, most))


class InsufficientMemoryError(MemoryError, ValueError):
    """A fit would allocate more memory than is available; raised before allocating."""


def parse_bytes(text: str, variable: str = LIMIT_VARIABLE) -> int:
    """``"4GB"`` -> 4e9, ``"512 MiB"`` -> 512 * 2**20, ``"1e9"`` -> 10**9.

    ``variable`` names the setting the text came from, for the error message.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{variable}={text!r} is not a size; give bytes (e.g. 4000000000) or a "
            "number with a unit (e.g. 4GB, 512MiB)."
        )
    return int(float(match.group(1)) * _UNITS[unit])


def size_setting(variable: str, default: int) -> int:
    """The size in the environment variable ``variable`` (see :func:`parse_bytes`), else
    ``default``."""
    text = os.environ.get(variable, "").strip()
    return parse_bytes(text, variable) if text else default


def available_bytes() -> int | None:
    """The memory budget in bytes: ``FAIRPCA_MEMORY_LIMIT``, else what the system reports
    as available (the smaller of the machine's and a container's memory limit); None when
    neither is known."""
    limit = os.environ.get(LIMIT_VARIABLE)
    if limit:
        return parse_bytes(limit)
    known = [size for size in (_system_available(), _cgroup_available()) if size is not None]
    return min(known) if known else None


def _system_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _cgroup_available() -> int | None:
    """Limit minus usage of this process's memory cgroup (v2, else v1); None if unlimited."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            with open(limit_file, encoding="ascii") as handle:
                limit = handle.read().strip()
            with open(usage_file, encoding="ascii") as handle:
                usage = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # no limit
            return None
        return max(int(limit) - usage, 0)
    return None


def fits(n_bytes: float) -> bool:
    """Whether ``n_bytes`` fit in the budget. Sizes up to ``BLOCK_BYTES`` always fit unless
    ``FAIRPCA_MEMORY_LIMIT`` is set (the system is then not asked)."""
    if n_bytes <= BLOCK_BYTES and not os.environ.get(LIMIT_VARIABLE):
        return True
    budget = available_bytes()
    return budget is None or n_bytes <= budget


def format_bytes(n_bytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def require(n_bytes: float, what: str, fix: str) -> None:
    """Raise :class:`InsufficientMemoryError` when ``n_bytes`` do not fit the budget.

    ``what`` names the allocation and its width (e.g. ``"the d x d scatter matrices for
    n_features=41000"``), ``fix`` says how to avoid it.
    """
    if fits(n_bytes):
        return
    budget = available_bytes()
    raise InsufficientMemoryError(
        f"Not enough memory: {what} need about {format_bytes(n_bytes)}, but only "
        f"{format_bytes(budget)} are available (MemAvailable, or {LIMIT_VARIABLE} when set). "
        f"{fix}"
    )


def require_parallel(sizes: dict[str, float], fix: str, parallel: int = PARALLEL_FITS) -> None:
    """:func:`require` for fits that run ``parallel`` at a time: the ``parallel`` largest
    working sets of ``sizes`` (name -> bytes) must fit together."""
    largest = sorted(sizes, key=sizes.get, reverse=True)[:parallel]
    names = " and ".join(largest)
    together = " together, as they run at the same time," if len(largest) > 1 else ""
    require(sum(sizes[name] for name in largest), f"the fits of {names}{together}", fix)


# ---------------------------------------------------------------------- working-set sizes
def covariance_bytes(n_features: int, n_group_scatters: int = 0) -> int:
    """Exact covariance route: the scatter, its deflated copy and two eigensolver
    workspaces of d x d; for Fair PCA-S (Section 3.6) also each group's scatter and its
    covariance, and the d x d null-space basis and products of the solve."""
    matrices = 4 + (2 * n_group_scatters + 3 if n_group_scatters else 0)
    return FLOAT_BYTES * matrices * n_features * n_features


def statistics_bytes(n_features: int, n_components: int, oversamples: int) -> int:
    """Randomized route from streamed statistics: the d x d scatter and a few d x 2l blocks."""
    size = n_components + oversamples
    return FLOAT_BYTES * (n_features * n_features + 6 * n_features * size)


def svd_bytes(n_samples: int, n_features: int) -> int:
    """Thin SVD route: two n x d copies of the centred data, the SVD factors and workspace."""
    small = min(n_samples, n_features)
    return FLOAT_BYTES * (3 * n_samples * n_features + 4 * small * small)


def randomized_bytes(n_samples: int, n_features: int, size: int) -> int:
    """Randomized in-memory route: the centred data and the n x l / d x l range blocks."""
    return FLOAT_BYTES * (n_samples * n_features + 3 * (n_samples + n_features) * size)


def kernel_bytes(n_samples: int) -> int:
    """Exact fair kernel PCA: the n x n training kernel, a deflated copy and a factor or an
    eigensolver workspace of the same size."""
    return FLOAT_BYTES * 3 * n_samples * n_samples
