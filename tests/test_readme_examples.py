"""The README's examples run as written: the code blocks of "Audit any MLflow model: the
``fairness`` evaluator" are read from README.md and executed, in order, in an empty folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def section_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README section under ``heading`` (up to the next heading
    of the same or a higher level)."""
    text = README.read_text()
    level = heading.split()[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) :]
    end = re.search(rf"^#{{1,{len(level)}}} ", rest, re.M)
    body = rest[: end.start()] if end else rest
    return re.findall(r"^```python\n(.*?)^```", body, re.S | re.M)


@pytest.mark.slow
def test_readme_evaluator_examples_run_as_written(tmp_path):
    pytest.importorskip("mlflow")
    blocks = section_blocks("### Audit any MLflow model: the `fairness` evaluator")
    assert len(blocks) == 3
    assert 'evaluators=["fairness"]' in blocks[0]
    assert 'evaluators=["default", "fairness"]' in blocks[1]
    script = tmp_path / "example.py"
    # then the groups the evaluator logged: by name, as the loaders publish them
    groups = (
        "runs = mlflow.search_runs(search_all_experiments=True)\n"
        "print('GROUPS', *sorted(c for c in runs.columns if '.sex:' in c))\n"
    )
    script.write_text("\n".join([*blocks, groups]))
    # as a new user runs it: no tracking URI or other MLflow setting left by earlier tests
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_")}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    dp, dp_high = map(float, lines[0].split())
    assert 0.0 <= dp <= dp_high <= 1.0
    accuracy, dp_again = map(float, lines[1].split())
    assert 0.7 < accuracy < 1.0 and dp_again == pytest.approx(dp)  # same predictions
    assert "dp_difference" in " ".join(lines[2:-1])  # the gate failed, naming the metric
    groups = lines[-1].split()
    assert groups[0] == "GROUPS" and "metrics.selection_rate.sex:Female" in groups
    assert not any(name.endswith(("sex:0", "sex:1")) for name in groups)


def test_example_audit_yaml_is_the_default_configuration():
    """``audit.yaml`` at the repository root loads and equals the defaults it claims."""
    from fairpca.flows.cli import build_config
    from fairpca.flows.config import AuditConfig, load_config_file

    example = README.parent / "audit.yaml"
    assert "fairpca audit --config audit.yaml" in example.read_text()
    written = load_config_file(example)
    # written in sections, as the model is: each top-level key a section or a run setting
    assert sorted(written) == [
        "evaluation", "output", "representation", "seed", "selection", "source", "split",
        "tracking",
    ]  # fmt: skip
    assert written["evaluation"]["min_group_size"] == 30
    assert written["selection"]["thresholds"]["max_dp_difference"] == 0.05
    loaded = build_config({}, example, AuditConfig)
    default = AuditConfig(dataset="adult", sensitive=["sex"])
    assert loaded.model_dump() == default.model_dump()
