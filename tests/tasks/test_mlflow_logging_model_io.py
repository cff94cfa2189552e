"""A saved model carries no code: it depends on the installed fairpca through a pinned
requirement, loading it never changes what ``import fairpca`` gives, and a directory whose
model was given code or extra requirements is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from messages import matching

from fairpca.datasets import load_dataset, make_preprocessor


@pytest.fixture(scope="module")
def adult_rows():
    data = load_dataset("adult")
    return data.X.iloc[:600], data.y[:600], data.sensitive.iloc[:600]


@pytest.fixture
def saved(tmp_path, adult_rows):
    """A sealed output directory with a fairpca pipeline saved as the audit saves it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from fairpca import FairPCA
    from fairpca.tasks.evaluate import pip_requirements
    from fairpca.tasks.mlflow_logging import as_model_input, input_example, save_model_locally
    from fairpca.tasks.trust import seal_output_dir

    X, y, sensitive = adult_rows
    preprocess = make_preprocessor(X).fit(X)
    encoded = preprocess.transform(X)
    represent = FairPCA(n_components=2).fit(encoded, sensitive_features=sensitive)
    pipeline = make_pipeline(preprocess, represent, LogisticRegression())
    pipeline.steps[-1][1].fit(represent.transform(encoded), y)
    out_dir = tmp_path / "audit-kept"
    out_dir.mkdir()
    save_model_locally(
        pipeline,
        out_dir,
        input_example=input_example(as_model_input(X)),
        pip_requirements=pip_requirements(),
    )
    (out_dir / "audit.json").write_text(json.dumps({"audit_id": "audit-kept", "tags": {}}))
    seal_output_dir(out_dir)
    return out_dir


def test_the_model_carries_no_code_and_pins_the_installed_fairpca(saved):
    model = saved / "model"
    spec = yaml.safe_load((model / "MLmodel").read_text())
    assert spec["flavors"]["sklearn"]["code"] is None
    assert "code" not in spec["flavors"]["python_function"]
    assert not (model / "code").exists() and not list(model.rglob("*.py"))
    requirements = (model / "requirements.txt").read_text().split()
    assert f"fairpca=={version('fairpca')}" in requirements
    assert {r.split("==")[0] for r in requirements} == {
        "mlflow", "fairpca", "numpy", "scipy", "scikit-learn", "pandas"
    }  # fmt: skip


LOAD_THEN_IMPORT = """
import sys, mlflow.pyfunc, mlflow.sklearn
model = mlflow.{flavor}.load_model(sys.argv[1])
import fairpca
from fairpca.datasets import load_dataset
print(fairpca.__file__)
print(load_dataset("adult").X.shape[0])
"""


@pytest.mark.parametrize("flavor", ["sklearn", "pyfunc"])
def test_loading_the_model_leaves_import_fairpca_alone(saved, flavor):
    import fairpca

    done = subprocess.run(
        [sys.executable, "-c", LOAD_THEN_IMPORT.format(flavor=flavor), str(saved / "model")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    file, rows = done.stdout.split()[-2:]
    assert file == fairpca.__file__ and rows == "48842"


def test_code_and_requirements_added_to_the_model_are_refused(saved):
    """The reviewer's scenario: a tampered code/fairpca/__init__.py, the manifest edited to
    match, an extra requirements line. Refused by the seal, and by the model check alone."""
    from fairpca.tasks.mlflow_logging import (
        NOT_THE_PINNED_RUNTIME,
        check_relog_dir,
        check_saved_model,
    )
    from fairpca.tasks.trust import (
        CARRIES_CODE,
        SEAL_DOES_NOT_VERIFY,
        SEAL_FILE,
        SealError,
        sha256_file,
    )

    model = saved / "model"
    (model / "code" / "fairpca").mkdir(parents=True)
    (model / "code" / "fairpca" / "__init__.py").write_text("import os; os.system('id')\n")
    with (model / "requirements.txt").open("a") as handle:
        handle.write("\nevil-package==1.0\n")
    seal = json.loads((saved / SEAL_FILE).read_text())
    for path in [model / "code" / "fairpca" / "__init__.py", model / "requirements.txt"]:
        name = path.relative_to(saved).as_posix()
        seal["files"][name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (saved / SEAL_FILE).write_text(json.dumps(seal))
    with pytest.raises(SealError, match=matching(SEAL_DOES_NOT_VERIFY)):
        check_relog_dir(saved)
    code = matching(CARRIES_CODE, model_dir=model, code=["code/fairpca/__init__.py"])
    with pytest.raises(ValueError, match=code):
        check_saved_model(model)
    import shutil

    shutil.rmtree(model / "code")
    evil = matching(NOT_THE_PINNED_RUNTIME, given=["evil-package==1.0"])
    with pytest.raises(ValueError, match=evil):
        check_saved_model(model)


@pytest.mark.parametrize(
    "line", ["fairpca @ git+https://evil/fairpca", "-e /tmp/x", "--index-url=https://evil"]
)
def test_requirements_that_are_not_plain_pins_are_refused(saved, line):
    from fairpca.tasks.mlflow_logging import NOT_THE_PINNED_RUNTIME, check_saved_model

    check_saved_model(saved / "model")  # as saved: accepted
    path = saved / "model" / "requirements.txt"
    path.write_text(path.read_text().replace(f"fairpca=={version('fairpca')}", line))
    with pytest.raises(ValueError, match=matching(NOT_THE_PINNED_RUNTIME)):
        check_saved_model(saved / "model")


def test_a_model_saved_with_code_paths_is_refused(tmp_path):
    import mlflow.sklearn
    from sklearn.dummy import DummyClassifier

    from fairpca.tasks.mlflow_logging import check_saved_model
    from fairpca.tasks.trust import CARRIES_CODE

    source = tmp_path / "helper.py"
    source.write_text("X = 1\n")
    mlflow.sklearn.save_model(
        DummyClassifier().fit([[0]], [0]), str(tmp_path / "model"),
        serialization_format="skops", code_paths=[str(source)],
        pip_requirements=[f"fairpca=={version('fairpca')}"],
    )  # fmt: skip
    with pytest.raises(ValueError, match=matching(CARRIES_CODE, model_dir=tmp_path / "model")):
        check_saved_model(Path(tmp_path / "model"))
