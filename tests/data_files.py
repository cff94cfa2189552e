"""The data files that are not bundled (Bank Marketing, COMPAS, the splits of Lee et al. 2022:
licences forbid shipping them): tests that need them are marked ``data`` and skip, saying how
to get them, when ``FAIRPCA_DATA_DIR`` does not hold them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HOW_TO_GET = (
    "download the files named in docs/user_guide/data.rst ('The paper's datasets': sources "
    "and layout) into one folder and run the tests with FAIRPCA_DATA_DIR=<that folder> "
    "(this repository's CI: FAIRPCA_DATA_DIR=../shared/datasets)"
)


def data_dir_or_skip(*relative: str) -> Path:
    """``$FAIRPCA_DATA_DIR``, holding every path of ``relative``; else the test is skipped
    with what is missing and how to get it."""
    root = os.environ.get("FAIRPCA_DATA_DIR")
    if not root:
        pytest.skip(f"needs {', '.join(relative)}, not bundled: FAIRPCA_DATA_DIR is not set; "
                    + HOW_TO_GET)  # fmt: skip
    missing = [name for name in relative if not (Path(root) / name).exists()]
    if missing:
        pytest.skip(f"FAIRPCA_DATA_DIR={root} lacks {', '.join(missing)}; " + HOW_TO_GET)
    return Path(root)
