"""What the gate tests share: the e2e registrant (loaded from its file, as the e2e run uses
it) and the policy file's text every gate test folder starts from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REGISTRANT = Path(__file__).resolve().parent / "e2e" / "gate_registrant.py"
POLICY = """model: {model}
reference: {{path: reference.csv, label: approved, sensitive: [group]}}
thresholds: {{max_dp_difference: 0.1, max_eo_difference: 0.15}}
n_resamples: 200
"""


def registrant() -> ModuleType:
    """``tests/e2e/gate_registrant.py`` as a module (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("gate_registrant", REGISTRANT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
