"""Hostile and ordinary-but-messy inputs: real user files, crafted directories, bad options.

Each test pins the exact behaviour for one case: the error type / exit code and that the
message names the problem and the value, or the successful result. Command-line cases run
the real ``fairpca`` console script in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from data_files import data_dir_or_skip
from messages import matching

from fairpca.datasets import (
    ScreeningWarning,
    balanced_accuracy_alone,
    load_user_data,
    make_preprocessor,
    screen_columns,
)

FAIRPCA = [sys.executable, "-c", "from fairpca.flows.entry import main; main()"]
N_ROWS = 240


def people(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    """A table as users have it: ids, names, dates of birth, case numbers, free text."""
    rng = np.random.default_rng(seed)
    first = np.array(["Amaru", "Bexley", "Corisande", "Dagny", "Eulalie", "Fenwick"])
    words = np.array(["struck", "vehicle", "near", "store", "with", "unknown", "object", "late"])
    label = rng.integers(0, 2, n)
    return pd.DataFrame(
        {
            "person_id": rng.permutation(48_151_623_000 + 7 * np.arange(n)),
            "full_name": [f"{rng.choice(first)} Qzx{i:05d}wyn" for i in range(n)],
            "dob": [
                f"19{rng.integers(40, 70)}-{i % 12 + 1:02d}-{i % 28 + 1:02d}" for i in range(n)
            ],
            "case_number": [f"77CF{i:06d}ZQ" for i in range(n)],
            "narrative": [" ".join(rng.choice(words, 6)) + f" ref{i}" for i in range(n)],
            "age": rng.integers(18, 70, n).astype(float) + rng.random(n),
            "priors": rng.poisson(2.0, n),
            "degree": rng.choice(["F", "M"], n),
            "group": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
            "outcome": label,
        }
    )


UNIQUE_COLUMNS = ("person_id", "full_name", "dob", "case_number", "narrative")


# ----------------------------------------------------- case 1: personal data, screening


def test_screening_excludes_ids_names_dates_case_numbers_and_text_with_one_warning(tmp_path):
    path = tmp_path / "people.csv"
    people().to_csv(path, index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_user_data(path, label="outcome", sensitive="group")
    screening = [w for w in caught if issubclass(w.category, ScreeningWarning)]
    assert len(screening) == 1
    message = str(screening[0].message)
    for column in UNIQUE_COLUMNS:
        assert repr(column) in message
    assert list(data.X.columns) == ["age", "priors", "degree"]
    assert data.screened["dob"] == "date/time values"
    assert data.screened["person_id"].startswith("identifier-like: integer values")
    assert data.screened["full_name"].startswith("identifier-like")
    assert data.screened["case_number"].startswith("identifier-like")
    assert data.screened["narrative"].startswith(("free text", "identifier-like"))
    with pytest.warns(ScreeningWarning, match="'priors': dropped on request"):
        kept = load_user_data(
            path, label="outcome", sensitive="group", keep=["dob"], drop=["priors"]
        )
    assert list(kept.X.columns) == ["dob", "age", "degree"]
    assert kept.screened["priors"] == "dropped on request"


def test_screening_keep_and_drop_must_name_feature_columns(tmp_path):
    path = tmp_path / "people.csv"
    people().to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"'dobb'.*did you mean \['dob'\]"):
        load_user_data(path, label="outcome", sensitive="group", keep=["dobb"])
    with pytest.raises(ValueError, match=r"keep/drop name \['group'\]"):
        load_user_data(path, label="outcome", sensitive="group", drop=["group"])
    with pytest.raises(ValueError, match=r"\['age'\] are in both keep and drop"):
        screen_columns(people(), keep=["age"], drop=["age"])


def test_wide_categoricals_are_screened_and_one_hot_width_is_capped():
    rng = np.random.default_rng(3)
    codes = pd.Series(rng.integers(0, 400, 2000)).map(lambda i: f"code{i}")
    frame = pd.DataFrame({"code": codes, "x": rng.normal(size=2000)})
    screening = screen_columns(frame)
    assert screening.kept == ["x"]
    assert re.fullmatch(
        r"\d+ distinct categories \(more than 100\) would explode .*", screening.excluded["code"]
    )
    encoded = make_preprocessor(frame[["code"]], min_category_count=1).fit(frame[["code"]])
    assert len(encoded.get_feature_names_out()) == 50  # 49 frequent + 1 pooled column
    unseen = encoded.transform(pd.DataFrame({"code": ["never-seen"]}))
    assert unseen.sum() == 1.0  # unseen values land in the pooled column


def test_target_leakage_is_excluded_with_its_score_and_keep_overrides():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 500)
    frame = pd.DataFrame(
        {
            "is_recid": np.where(rng.random(500) < 0.97, y, 1 - y),  # the label, 3% noise
            "days_to_event": np.where(y == 1, rng.integers(0, 700, 500), np.nan),
            "priors": rng.poisson(2.0, 500) + y,  # a genuine, weaker predictor
        }
    )
    assert balanced_accuracy_alone(frame["is_recid"], y) == pytest.approx(
        0.5 * (np.mean(frame["is_recid"][y == 1] == 1) + np.mean(frame["is_recid"][y == 0] == 0))
    )
    screening = screen_columns(frame, y)
    assert screening.kept == ["priors"]
    assert screening.excluded["is_recid"].startswith("likely target leakage: alone it predicts")
    assert "balanced accuracy 1.000" in screening.excluded["days_to_event"]  # missingness
    assert screen_columns(frame, y, keep=["is_recid"]).kept == ["is_recid", "priors"]


@pytest.mark.data
def test_compas_file_is_screened_to_a_narrow_design():
    compas = "propublica-compas/compas-scores-two-years.csv"
    path = data_dir_or_skip(compas) / compas
    with pytest.warns(ScreeningWarning, match="'is_recid': likely target leakage"):
        data = load_user_data(path, label="two_year_recid", positive_label=1, sensitive="race")
    for column in ("id", "name", "dob", "c_case_number", "is_recid", "end", "c_charge_desc"):
        assert column in data.screened
    width = len(make_preprocessor(data.X).fit(data.X).get_feature_names_out())
    assert width < 150  # was ~41,000 one-hot columns


# ----------------------------------------------------- case 1: synthetic input example


def test_input_example_holds_no_value_of_a_person():
    from fairpca.tasks.mlflow_logging import PLACEHOLDER_CATEGORY, as_model_input, input_example

    frame = people().drop(columns=["group", "outcome"])
    example = input_example(as_model_input(frame), min_category_count=30)
    for column in ("full_name", "case_number", "dob", "narrative"):
        assert set(example[column]) == {PLACEHOLDER_CATEGORY}
    assert set(example["degree"]) == {"F", "M"}  # each occurs in >= 30 rows
    median, quartile = frame["age"].median(), frame["age"].quantile(0.25)
    assert example["age"].tolist() == [float(f"{median:.3g}"), float(f"{quartile:.3g}")]


# ----------------------------------------------------- case 4: path traversal


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "..", ".", "a/b", "a\\b", ""])
def test_run_name_with_a_path_is_refused(name):
    from pydantic import ValidationError

    from fairpca.flows.config import AuditConfig

    with pytest.raises(ValidationError, match="run_name"):
        AuditConfig(dataset="german", run_name=name)


def test_paths_are_kept_inside_the_output_directory(tmp_path):
    from fairpca.tasks.trust import path_inside

    assert path_inside(tmp_path, "audit-1") == (tmp_path / "audit-1").resolve()
    (tmp_path / "link").symlink_to("/tmp")
    for name in ("../x", "/etc/passwd", "link/x", "."):
        with pytest.raises(ValueError, match="outside"):
            path_inside(tmp_path, name)


# ----------------------------------------------------- case 5: credentials


def test_credentials_are_taken_out_of_tracking_uris(monkeypatch):
    from fairpca.flows.config import AuditConfig, resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    config = AuditConfig(dataset="german", tracking_uri="http://alice:s3cr%40t@mlflow:5000/x")
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ  # validating the config sets nothing
    assert resolve_tracking_uri(config.tracking.tracking_uri) == "http://mlflow:5000/x"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cr@t"
    dumped = json.dumps(config.flat_params()) + config.model_dump_json()
    assert "s3cr" not in dumped and "alice" not in dumped
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://bob:hunter2@host")
    assert resolve_tracking_uri(None) == "https://host"
    assert os.environ["MLFLOW_TRACKING_URI"] == "https://host"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "hunter2"


# ----------------------------------------------------- case 3: relog executes nothing


def _saved_audit_dir(tmp_path: Path, record) -> Path:
    """A kept output directory with a real saved model and audit record (as an audit writes
    them); ``record`` is the shared typed record fixture."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from fairpca.tasks.evaluate import pip_requirements
    from fairpca.tasks.mlflow_logging import (
        AUDIT_FILE,
        as_model_input,
        input_example,
        save_model_locally,
    )
    from fairpca.tasks.trust import seal_output_dir

    frame = people()
    X = frame[["age", "degree"]]
    pipeline = make_pipeline(make_preprocessor(X), LogisticRegression()).fit(X, frame["outcome"])
    out_dir = tmp_path / "audit-kept"
    out_dir.mkdir()
    save_model_locally(
        pipeline,
        out_dir,
        input_example=input_example(as_model_input(X)),
        pip_requirements=pip_requirements(),
    )
    (out_dir / AUDIT_FILE).write_text(record.model_dump_json())
    seal_output_dir(out_dir)  # signed as the audit signs it
    return out_dir


def test_relog_refuses_a_crafted_pickle_model_and_runs_none_of_it(tmp_path, audit_record):
    import pickle

    out_dir = _saved_audit_dir(tmp_path, audit_record)
    model = out_dir / "model"
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (model / "model.pkl").write_bytes(pickle.dumps(Payload()))
    mlmodel = (model / "MLmodel").read_text()
    (model / "MLmodel").write_text(
        mlmodel.replace("serialization_format: skops", "serialization_format: cloudpickle")
    )
    started = time.perf_counter()
    done = subprocess.run(
        [*FAIRPCA, "relog", str(out_dir), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    said = "".join(done.stderr.split())  # the refusal's words: tests/tasks/test_trust_signing.py
    assert "['model/model.pkl']" in said and "Traceback" not in said
    assert not marker.exists()
    assert not (tmp_path / "m.db").exists()  # failed before any MLflow store was touched
    assert time.perf_counter() - started < 60


def test_relog_names_the_file_that_changed_since_the_audit(tmp_path, audit_record):
    from fairpca.tasks.mlflow_logging import check_relog_dir, check_saved_model
    from fairpca.tasks.trust import NO_SEAL

    out_dir = _saved_audit_dir(tmp_path, audit_record)
    check_relog_dir(out_dir)  # as written: accepted
    with (out_dir / "model" / "requirements.txt").open("a") as handle:
        handle.write("\nevil-package\n")
    with pytest.raises(ValueError, match=r"file 'model/requirements.txt' has \d+ bytes"):
        check_relog_dir(out_dir)
    with pytest.raises(ValueError, match=r"requirements \['evil-package'\] are not"):
        check_saved_model(out_dir / "model")  # the model check alone refuses it too
    (out_dir / "audit.seal.json").unlink()
    with pytest.raises(ValueError, match=matching(NO_SEAL, out_dir=out_dir)):
        check_relog_dir(out_dir)


# ----------------------------------------------------- case 8: relog duplicates history


def test_logging_metrics_twice_keeps_one_copy_of_every_point(mlflow_store, audit_record, tmp_path):
    from fairpca.tasks.mlflow_logging import log_params_metrics
    from fairpca.tasks.record import MetricStep

    _, client = mlflow_store
    experiment = client.create_experiment(f"hostile-{time.time_ns()}", tmp_path.as_uri())
    run_id = client.create_run(experiment).info.run_id
    audit = audit_record.model_copy(
        update={
            "params": {"k": "3"},
            "tags": {"fairpca.audit_id": "x"},
            "metrics": {"accuracy": 0.7},
            "metric_steps": [
                MetricStep(key="fair_pca/logreg/accuracy", value=0.6 + 0.1 * step, step=step)
                for step in range(3)
            ],
        }
    )
    for _ in range(2):  # an interrupted logging, then `fairpca relog`
        log_params_metrics.fn(client, run_id, audit)
    history = client.get_metric_history(run_id, "fair_pca/logreg/accuracy")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.6), (1, 0.7), (2, 0.8)]
    assert len(client.get_metric_history(run_id, "accuracy")) == 1


# ----------------------------------------------------- cases 6 and 7: fail fast, quietly


def _cli(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PREFECT_HOME": str(cwd / ".prefect-home"), "COLUMNS": "200"}
    started = time.perf_counter()
    done = subprocess.run(
        [*FAIRPCA, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
        env=env,
    )  # fmt: skip
    return done, time.perf_counter() - started


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)) * 4)
    # 600 rows: every group of `group` keeps --min-group-size rows in the validation part.
    people(600).to_csv(tmp_path / "semi.csv", sep=";", index=False)
    people(600)[["age", "group", "outcome"]].to_csv(tmp_path / "narrow.csv", index=False)
    (tmp_path / "bad.yaml").write_text("dataset: german\nk: [3\n")
    (tmp_path / "bad.json").write_text('{"dataset": "german",}')
    user = ["--label", "outcome", "--sensitive", "group"]
    return {
        "directory": (["--data", "dir.csv", *user], "is a directory, not a file"),
        "binary": (["--data", "binary.csv", *user], "binary (it contains NUL bytes)"),
        "missing file": (["--data", "nope.csv", *user], "Data file not found: nope.csv"),
        "typo": (
            ["--data", "semi.csv", "--label", "outcom", "--sensitive", "group"],
            "'outcom' -> did you mean ['outcome']",
        ),
        "nan lambda": (["--dataset", "german", "--lambdas", "nan"], "got [nan]"),
        "k too large": (
            ["--data", "semi.csv", *user, "-k", "9"],
            "-k 9 is larger than possible: the training rows encode to 4 feature column(s) and the "
            "sensitive attribute(s) impose 2 group-mean constraint(s), so at most -k 2",
        ),
        "no dimension left": (
            ["--data", "narrow.csv", *user, "--variants", "fair_pca"],
            "the training rows encode to 1 feature column(s)",
        ),
        "output dir": (
            ["--data", "semi.csv", *user, "-k", "2", "--output-dir", "/proc/x"],
            "output directory '/proc/x' is not writable",
        ),
        "run name": (["--dataset", "german", "--run-name", "../../x"], "run_name"),
        "yaml": (["--config", "bad.yaml"], "is not valid YAML"),
        "json": (["--config", "bad.json"], "is not valid JSON"),
    }


CASES = [
    "directory", "binary", "missing file", "typo", "nan lambda", "k too large",
    "no dimension left", "output dir", "run name", "yaml", "json",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_bad_input_ends_fast_with_one_clear_message_and_exit_2(case, tmp_path):
    args, message = _bad_inputs(tmp_path)[case]
    done, seconds = _cli(["audit", *args], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    flat = " ".join(done.stderr.split())
    assert message in flat, flat
    assert "Traceback" not in done.stderr and "temporary server" not in done.stderr
    assert not (tmp_path / "fairpca-output").exists()
    # No Prefect server is started: a few seconds of imports and loading on an idle core.
    assert seconds < 30, seconds


def table(n: int, minority: int, seed: int = 0) -> pd.DataFrame:
    """Numeric and categorical features, a 0/1 label ``y`` and a group column ``g`` whose
    last ``minority`` rows are the minority group."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    return pd.DataFrame(
        {
            **{f"x{i}": x[:, i] for i in range(4)},
            "c": rng.choice(["p", "q", "r"], n),
            "g": ["major"] * (n - minority) + ["minor"] * minority,
            "y": (x[:, 0] + rng.normal(size=n) > 0).astype(int),
        }
    )


def _crafted_tables(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Real-looking tables that used to fail after the work (or with a traceback)."""
    table(300, 30).to_csv(tmp_path / "minority.csv", index=False)
    table(300, 1).to_csv(tmp_path / "lonely.csv", index=False)
    copy = table(600, 300).assign(s=lambda frame: frame["y"])
    copy.to_csv(tmp_path / "copy.csv", index=False)
    infinite = table(600, 300)
    infinite.loc[3, "x1"], infinite.loc[5, "x2"] = np.inf, -np.inf
    infinite.to_csv(tmp_path / "inf.csv", index=False)
    table(6, 3).assign(y=[0, 1] * 3).to_csv(tmp_path / "six.csv", index=False)
    twice = table(600, 300).assign(g2=lambda frame: frame["g"][::-1].to_numpy()).to_csv(index=False)
    (tmp_path / "twice.csv").write_text(twice.replace(",g2\n", ",g\n", 1))
    rng = np.random.default_rng(1)
    encoded = table(600, 300).assign(
        a_b=rng.choice(["c", "d"], 600), a=rng.choice(["b_c", "e"], 600)
    )
    encoded.to_csv(tmp_path / "encoded.csv", index=False)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "away").symlink_to(tmp_path)
    (tmp_path / "out" / "dangling").symlink_to(tmp_path / "nothing")
    user = ["--label", "y", "--sensitive", "g"]
    groups = "only 1 of its 2 groups have at least --min-group-size {} rows, so its DP and EO "
    return {
        "minority": (
            ["--data", "minority.csv", *user],
            "in the validation part (75 rows) sensitive column 'g': " + groups.format(30),
        ),
        "minority, --min-group-size 10": (
            ["--data", "minority.csv", *user, "--min-group-size", "10"],
            "in the validation part (75 rows) sensitive column 'g': " + groups.format(10),
        ),
        "one group in a part": (
            ["--data", "lonely.csv", *user],
            "sensitive column 'g' holds one group only ('major'): its other groups have too "
            "few rows to reach every part. Merge or drop",
        ),
        "sensitive copies the label": (
            ["--data", "copy.csv", "--label", "y", "--sensitive", "s"],
            "sensitive column 's' determines the label: each of its groups holds rows of one "
            "label value only, so in the validation part fewer than two of its groups large "
            "enough to report have rows of label 1, so its EO difference",
        ),
        "inf": (
            ["--data", "inf.csv", *user],
            "Column(s) hold infinite values (inf or -inf; count per column): {'x1': 1, 'x2': 1}",
        ),
        "six rows": (
            ["--data", "six.csv", *user],
            "6 rows are too few for training, validation and test parts (would be [3, 2, 1] "
            "rows); each part needs at least 2 rows",
        ),
        "duplicate column names": (
            ["--data", "twice.csv", *user],
            "The header of twice.csv names column(s) ['g'] more than once (after trimming "
            "spaces) with different values",
        ),
        "one-hot names collide": (
            ["--data", "encoded.csv", *user, "-k", "2"],
            "column 'a_b' = 'c' and column 'a' = 'b_c' would both be encoded as the feature "
            "'a_b_c'; rename one of the two columns in the file, or exclude one with --drop a",
        ),
        "run directory links out": (
            ["--data", "copy.csv", *user, "-k", "2", "--output-dir", "out", "--run-name", "away"],
            "out/away is a symbolic link (run_name 'away'); an audit writes only into a new "
            "directory of its own",
        ),
        "run directory is a dangling link": (
            [
                "--data",
                "copy.csv",
                *user,
                "-k",
                "2",
                "--output-dir",
                "out",
                "--run-name",
                "dangling",
            ],
            "out/dangling is a symbolic link (run_name 'dangling')",
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "minority", "minority, --min-group-size 10", "one group in a part",
        "sensitive copies the label", "inf",
        "six rows", "duplicate column names", "one-hot names collide",
        "run directory links out", "run directory is a dangling link",
    ],
)  # fmt: skip
def test_crafted_table_ends_before_any_server_with_one_message(case, tmp_path):
    args, message = _crafted_tables(tmp_path)[case]
    done, seconds = _cli(["audit", *args], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    flat = " ".join(done.stderr.split())
    assert flat.startswith("Invalid input (nothing was run): ") and message in flat, flat
    assert flat.count("Invalid input") == 1
    assert "Traceback" not in done.stderr and "temporary server" not in done.stderr
    assert seconds < 30, seconds


@pytest.mark.slow
def test_a_10000_column_file_fails_in_seconds_naming_the_width_and_the_fix(tmp_path):
    rng = np.random.default_rng(0)
    wide = pd.DataFrame(rng.normal(size=(300, 10_000)).round(3)).add_prefix("f")
    wide.assign(g=rng.choice(["a", "b"], 300), y=rng.integers(0, 2, 300)).to_csv(
        tmp_path / "wide.csv", index=False
    )
    done, seconds = _cli(["audit", "--data", "wide.csv", "--label", "y", "--sensitive", "g",
                          "-k", "2"], tmp_path)  # fmt: skip
    flat = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in done.stderr, flat
    assert (
        "Invalid input (nothing was run): the data encode to 10000 feature columns; Fair PCA-S "
        "solves exact 10000 x 10000 eigenproblems, estimated at 50 minutes, over the limit of "
        "600 s (FAIRPCA_MAX_FIT_SECONDS): pass --variants without fair_pca_s" in flat
    ), flat
    assert "temporary server" not in done.stderr
    print(f"10,000 columns refused after {seconds:.1f} s")
    assert seconds < 90, seconds  # loading and screening 10,000 columns (7-9 s idle), no fit


def test_a_plot_of_undefined_differences_is_drawn_and_says_so(tmp_path):
    from fairpca.flows.config import Thresholds
    from fairpca.tasks.report import plot_tradeoff

    rows = [
        {"variant": "pca", "classifier": "logreg", "lambda": np.nan, "accuracy": 0.7},
        {"variant": "fair_pca", "classifier": "logreg", "lambda": 0.0, "accuracy": 0.6},
        {"variant": "fair_pca", "classifier": "logreg", "lambda": 1.0, "accuracy": 0.65},
    ]  # no dp_difference column: every value undefined
    path = plot_tradeoff(
        pd.DataFrame(rows), tmp_path / "tradeoff.png", chosen=rows[1], pca=rows[0],
        majority_accuracy=0.55, thresholds=Thresholds(),
    )  # fmt: skip
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_semicolon_separated_file_loads_like_the_comma_one(tmp_path):
    frame = people()
    frame.to_csv(tmp_path / "semi.csv", sep=";", index=False)
    frame.to_csv(tmp_path / "comma.csv", index=False)
    frame.to_csv(tmp_path / "tab.csv", sep="\t", index=False)
    kwargs = {"label": "outcome", "sensitive": "group"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScreeningWarning)
        reference = load_user_data(tmp_path / "comma.csv", **kwargs)
        for name in ("semi.csv", "tab.csv"):
            data = load_user_data(tmp_path / name, **kwargs)
            pd.testing.assert_frame_equal(data.X, reference.X)
    with pytest.raises(ValueError, match=r"\['outcome', 'group'\] not found"):
        load_user_data(tmp_path / "semi.csv", sep=",", **kwargs)  # a wrong explicit separator


# ----------------------------------------------------- case 1: nothing personal is written


def _any_of(values: set[str]) -> re.Pattern[bytes]:
    """One pattern matching any of ``values``, written as a trie (``(?:a(?:b|c)|d)``): each
    byte of the data meets one branch per prefix instead of every value (the written files
    are scanned once, not once per value)."""
    trie: dict = {}
    for value in values:
        node = trie
        for byte in value.encode():
            node = node.setdefault(byte, {})
        node[None] = {}

    def branches(node: dict) -> bytes:
        options = [
            re.escape(bytes([b])) + branches(child) for b, child in node.items() if b is not None
        ]
        if None in node:  # a whole value ends here: a match need not go on
            return b"(?:" + b"|".join(options) + b")?" if options else b""
        return options[0] if len(options) == 1 else b"(?:" + b"|".join(options) + b")"

    return re.compile(branches(trie))


def _written_bytes(roots: list[Path]) -> list[tuple[Path, bytes]]:
    """Every file under ``roots``, zip archives (model.skops) also member by member."""
    out = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if not path.is_file():
                continue
            data = path.read_bytes()
            out.append((path, data))
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as archive:
                    out += [(path / name, archive.read(name)) for name in archive.namelist()]
    return out


@pytest.mark.flow
@pytest.mark.slow
def test_no_unique_value_of_the_input_reaches_anything_written(
    prefect_harness, mlflow_store, tmp_path, monkeypatch
):
    from cli_invoke import invoke
    from prefect.settings import get_current_settings

    uri, _ = mlflow_store
    frame = people(n=400, seed=11)
    (tmp_path / "input").mkdir()
    (tmp_path / "work").mkdir()
    frame.to_csv(tmp_path / "input" / "people.csv", index=False)
    monkeypatch.chdir(tmp_path / "work")  # everything the audit writes locally lands here
    result = invoke(
        ["audit", "--data", "../input/people.csv", "--label", "outcome", "--sensitive", "group",
         "-k", "2", "--variants", "pca,fair_pca", "--lambdas", "0,1", "--classifiers",
         "logreg", "--tracking-uri", uri, "--output-dir", "out",
         "--model-name", f"hostile-{time.time_ns()}"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    db_url = get_current_settings().server.database.connection_url.get_secret_value()
    roots = [tmp_path / "work", Path(uri.removeprefix("sqlite:///")).parent]
    roots.append(Path(db_url.split("///", 1)[1]))
    roots.append(Path(get_current_settings().home))  # Prefect's local storage and logs
    written = _written_bytes([root for root in roots if root.exists()])
    assert any(path.name == "model.skops" for path, _ in written)
    values = {str(v) for column in UNIQUE_COLUMNS for v in frame[column]}
    any_value = _any_of(values)
    leaks = [
        (str(path), found.group()) for path, data in written if (found := any_value.search(data))
    ]
    assert leaks == [], leaks[:5]


@pytest.mark.flow
@pytest.mark.slow
def test_a_password_in_the_tracking_uri_is_never_written_or_printed(
    prefect_harness, tmp_path, monkeypatch
):
    from cli_invoke import invoke
    from prefect.settings import get_current_settings

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.chdir(tmp_path)
    port = _health_only_server()  # passes the CLI's reachability check, fails every logging call
    (tmp_path / "audit.yaml").write_text("mlflow_retries: 0\nmlflow_retry_backoff: 0.05\n")
    result = invoke(
        ["audit", "--config", "audit.yaml", "--dataset", "german", "-k", "2", "--variants",
         "pca,fair_pca", "--lambdas", "0", "--classifiers", "logreg", "--output-dir", "out",
         "--tracking-uri", f"http://auditor:Pw-7f3kQz9@127.0.0.1:{port}"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # logging failed: results kept locally
    assert f"http://127.0.0.1:{port}" in result.output and "Pw-7f3kQz9" not in result.output
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "Pw-7f3kQz9"
    db_url = get_current_settings().server.database.connection_url.get_secret_value()
    roots = [tmp_path, Path(db_url.split("///", 1)[1])]
    written = _written_bytes(roots)
    assert any(path.name == "audit.json" for path, _ in written)
    assert [str(path) for path, data in written if b"Pw-7f3kQz9" in data] == []


def _health_only_server() -> int:
    """A server on 127.0.0.1 that answers MLflow's ``/health`` and nothing else (HTTP 503)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            healthy = self.path == "/health"
            self.send_response(200 if healthy else 503)
            self.end_headers()
            self.wfile.write(b"OK" if healthy else b"unavailable")

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


# ----------------------------------------------------- database URIs keep their password


def test_a_database_uri_keeps_its_password_for_connecting_but_nothing_written_shows_it(
    monkeypatch,
):
    from fairpca.flows.config import AuditConfig, mask_credentials, resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    uri = "postgresql://mlflow:s3cret@db:5432/mlflow"
    config = AuditConfig(dataset="german", tracking_uri=uri)
    assert config.tracking.tracking_uri == uri  # the SQL store authenticates with it
    assert resolve_tracking_uri(config.tracking.tracking_uri) == uri
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ  # basic auth is for http(s) only
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert resolve_tracking_uri(None) == uri and os.environ["MLFLOW_TRACKING_URI"] == uri
    # what flows/audit.py logs as MLflow params and writes to config.json / audit.json
    params = {**config.flat_params(), "resolved_tracking_uri": mask_credentials(uri)}
    assert (
        params["tracking_uri"]
        == params["resolved_tracking_uri"]
        == "postgresql://***@db:5432/mlflow"
    )
    written = [
        json.dumps(params),
        config.model_dump_json(),
        json.dumps(config.model_dump(mode="json")),
    ]
    assert [text for text in written if "s3cret" in text] == []
    with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI"):  # masked: refused, with the fix
        AuditConfig.model_validate_json(config.model_dump_json())


# ----------------------------------------------------- compressed CSV files are data files


@pytest.mark.parametrize(
    "name", ["loans.csv.gz", "loans.CSV.bz2", "loans.csv.xz", "loans.csv.zip", "l.pq"]
)
def test_compressed_csv_and_parquet_data_files_are_accepted(name):
    from fairpca.flows.config import AuditConfig

    config = AuditConfig(data=Path(name), label="y", sensitive=["sex"])
    assert config.source.data == Path(name)


@pytest.mark.parametrize("name", ["loans.txt", "loans.gz", "loans.csv.7z"])
def test_other_data_suffixes_are_refused_naming_the_allowed_ones(name):
    from pydantic import ValidationError

    from fairpca.flows.config import AuditConfig

    with pytest.raises(ValidationError, match=rf"\.csv\.gz.*\.parquet.*got {re.escape(name)}"):
        AuditConfig(data=Path(name), label="y", sensitive=["sex"])


# ----------------------------------------------------- relog: the directory vouches for nothing


class Foreign:
    """A type outside the project's trusted list, for a crafted skops file."""


def _craft_mlmodel(model: Path, extra_types: list[str]) -> None:
    import yaml

    from fairpca.tasks.trust import seal_output_dir

    spec = yaml.safe_load((model / "MLmodel").read_text())
    spec["flavors"]["sklearn"]["skops_trusted_types"] = [
        *(spec["flavors"]["sklearn"].get("skops_trusted_types") or []),
        *extra_types,
    ]
    (model / "MLmodel").write_text(yaml.safe_dump(spec))
    seal_output_dir(model.parent)  # even signed with the key, the fixed list still rules


def test_relog_refuses_trusted_types_outside_the_fixed_list(tmp_path, audit_record):
    import skops.io
    import yaml

    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import check_relog_dir
    from fairpca.tasks.trust import (
        FILE_TYPES_UNTRUSTED,
        MLMODEL_TYPES_UNTRUSTED,
        seal_output_dir,
    )

    out_dir = _saved_audit_dir(tmp_path, audit_record)
    check_relog_dir(out_dir)  # as the audit wrote it: accepted
    _craft_mlmodel(out_dir / "model", ["builtins.eval"])
    untrusted = matching(MLMODEL_TYPES_UNTRUSTED, foreign=["builtins.eval"])
    with pytest.raises(ValueError, match=untrusted):
        relog_output_dir(out_dir, f"sqlite:///{tmp_path}/m.db")
    assert not (tmp_path / "m.db").exists()

    (tmp_path / "second").mkdir()
    out_dir = _saved_audit_dir(tmp_path / "second", audit_record)
    model = out_dir / "model"
    flavor = yaml.safe_load((model / "MLmodel").read_text())["flavors"]["sklearn"]
    skops.io.dump({"payload": Foreign()}, model / flavor["pickled_model"])
    seal_output_dir(out_dir)
    foreign = matching(FILE_TYPES_UNTRUSTED, foreign=["test_hostile_inputs.Foreign"])
    with pytest.raises(ValueError, match=foreign):
        check_relog_dir(out_dir)


def test_relog_refuses_symlinks_naming_the_file(tmp_path, audit_record):
    from fairpca.flows.relog import relog_output_dir
    from fairpca.tasks.mlflow_logging import check_relog_dir
    from fairpca.tasks.trust import SYMBOLIC_LINK

    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = hunter2\n")
    out_dir = _saved_audit_dir(tmp_path, audit_record)
    (out_dir / "report.md").symlink_to(secret)
    with pytest.raises(ValueError, match=matching(SYMBOLIC_LINK, path=out_dir / "report.md")):
        relog_output_dir(out_dir, f"sqlite:///{tmp_path}/m.db")
    assert not (tmp_path / "m.db").exists()
    (out_dir / "report.md").unlink()
    (out_dir / "projection").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ValueError, match=matching(SYMBOLIC_LINK, path=out_dir / "projection")):
        check_relog_dir(out_dir)


@pytest.mark.flow
@pytest.mark.slow
def test_relog_moves_no_alias_without_promote(prefect_harness, mlflow_store, tmp_path):
    from cli_invoke import invoke

    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig
    from fairpca.flows.relog import relog_output_dir

    uri, client = mlflow_store
    name = f"own-{tmp_path.name}"
    config = AuditConfig(
        dataset="german", k=10, variants=["pca", "fair_pca"], lambdas=[0.0],
        classifiers=["linear_svm"], tracking_uri=uri, output_dir=tmp_path / "out",
        model_name=name, thresholds={"max_dp_difference": 1.0, "max_eo_difference": 1.0,
                    "min_selection_rate_ratio": 0.0},
        min_accuracy_gain=0.0, max_one_class_share=1.0,
    )  # fmt: skip
    # (k=2 with logreg leaves German no useful classifier: nothing would be registered)
    first = fairness_audit(config)
    assert first.decision == "promote" and first.champion_moved, first.reasons
    out_dir = Path(first.output_dir)
    result = invoke(["relog", str(out_dir), "--tracking-uri", uri, "--force"])
    assert result.exit_code == 0, result.output
    assert client.get_registered_model(name).aliases == {"champion": int(first.model_version)}
    assert "'champion' of" in result.output and "left alone" in result.output
    assert "--promote" in result.output
    logged = relog_output_dir(out_dir, uri, force=True, promote=True)
    # the one decision: the champion's own model is neither registered again nor moved
    assert not logged["champion_moved"] and str(logged["model_version"]) == first.model_version
    assert client.get_registered_model(name).aliases == {"champion": int(first.model_version)}


def test_a_masked_database_uri_read_back_is_refused_with_the_fix():
    """A config written to JSON (a deployment parameter) carries ``user:***@``; reading it
    back gives a clear error naming the fix instead of a failed database login later."""
    from pydantic import ValidationError

    from fairpca.flows.config import AuditConfig

    written = AuditConfig(
        dataset="german", tracking_uri="postgresql://mlflow:s3cret@db:5432/mlflow"
    ).model_dump_json()
    assert "s3cret" not in written
    with pytest.raises(ValidationError, match="MLFLOW_TRACKING_URI"):
        AuditConfig.model_validate_json(written)


def test_a_choice_with_undefined_differences_says_which_and_why():
    from fairpca.flows.config import AuditConfig
    from fairpca.tasks.select import choose

    table = pd.DataFrame(
        [
            {"variant": v, "classifier": "logreg", "lambda": lam, "accuracy": 0.8,
             "one_class_share": 0.6, "eo_difference": 0.01}
            for v, lam in (("pca", np.nan), ("fair_pca", 0.0))
        ]
    )  # fmt: skip
    y = np.array([0, 1] * 10)
    choice = choose(table, y, y, AuditConfig(dataset="german").selection)
    assert not choice.decision.promote
    notes = [fact for r in choice.decision.reasons if r.kind == "note" for fact in r.facts]
    assert any(fact.startswith("dp_difference undefined on the validation rows") for fact in notes)


@pytest.mark.flow
def test_a_failed_flow_never_persists_the_label_of_a_one_row_group(prefect_harness):
    """Issue 28, 7: a flow failing on a group of one row kept the group's label in its
    pickled exception (Prefect's result storage), its logs and its state message. The error
    now names such a group by count; nothing Prefect keeps holds the label."""
    import asyncio
    import base64

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import get_current_settings

    from fairpca import FairPCA

    label = f"Qzx-one-person-{time.time_ns()}"

    @flow(persist_result=False)
    def users_flow():
        rng = np.random.default_rng(0)
        groups = np.array(["a"] * 30 + ["b"] * 29 + [label])
        return FairPCA(2).fit(rng.normal(size=(60, 5)), sensitive_features=groups)

    state = users_flow(return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)  # read back from the result storage
    assert isinstance(error, ValueError) and "1 group(s) have fewer than 2 rows" in str(error)
    APILogHandler().flush()

    async def kept():
        async with get_client() as prefect:
            run_id = state.state_details.flow_run_id
            runs = await prefect.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
            )
            logs = await prefect.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            return [run.state.message for run in runs], [log.message for log in logs]

    messages, logs = asyncio.run(kept())
    assert any("fewer than 2 rows" in text for text in [*messages, *logs])
    stored = [path.read_bytes() for path in Path(get_current_settings().home).rglob("*")
              if path.is_file() and path.stat().st_size < 2**24]  # fmt: skip
    stored += [base64.b64decode(b"".join(data.split()), validate=False) for data in stored
               if data[:4] == b"gAWV"]  # fmt: skip
    assert not [text for text in [*messages, *logs, str(error)] if label in text]
    assert not [data for data in stored if label.encode() in data]
