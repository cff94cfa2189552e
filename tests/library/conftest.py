"""Shared by the tests of the library (``fairpca/``): a small two-group data set."""

from __future__ import annotations

import numpy as np
import pytest


def _shifted_groups(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + z[:, None]
    return X, z


@pytest.fixture
def shifted_groups():
    """``shifted_groups(n, d, seed=0) -> (X, z)``: standard normal rows in two groups of about
    equal size; group 1 is shifted by one in every feature."""
    return _shifted_groups


# Loads a file in a fresh interpreter and prints the seconds from the call to its error (imports
# excluded), the error's type and its message.
_LOAD = """
import json, sys, time
from fairpca.datasets import load_user_data
started = time.perf_counter()
try:
    load_user_data(sys.argv[1], **json.loads(sys.argv[2]))
except Exception as error:
    print(time.perf_counter() - started)
    print(type(error).__name__)
    print(error)
"""
# Runs that loader as its only child, so that RUSAGE_CHILDREN holds the loader's peak RSS alone.
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, '-c', *sys.argv[1:]], capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(done.returncode, done.stdout.strip(), done.stderr.strip()[-2000:])
"""


def _failed_load(path, env=None, **options) -> tuple[float, str, str, int]:
    import json
    import os
    import subprocess
    import sys

    env = env if env is not None else dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, _LOAD, str(path), json.dumps(options)],
        capture_output=True, text=True, env=env, check=True, timeout=300,
    )  # fmt: skip
    peak_kib, result = out.stdout.split("\n", 1)
    code, result = result.split(" ", 1)
    assert code == "0", out.stdout
    seconds, kind, message = result.split("\n", 2)
    return float(seconds), kind, message, int(peak_kib) * 1024  # ru_maxrss: KiB on Linux


@pytest.fixture
def failed_load():
    """``failed_load(path, env=None, **load_user_data options)``: load the file in a fresh
    process that must fail; ``(seconds from the call to the error, error type, message, peak
    RSS in bytes)``."""
    return _failed_load
