"""The audit's Dask route (tasks/distributed.py) on a real ``dask.distributed`` LocalCluster
of two worker processes, on an Adult-like table kept as a folder of Parquet files (or a glob
of CSV parts): what it records is what the same pipeline gives on the same rows in memory."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from messages import matching

distributed = pytest.importorskip("distributed")

from fairpca.flows.config import AuditConfig  # noqa: E402
from fairpca.tasks import distributed as route  # noqa: E402
from fairpca.tasks.data import DEFAULT_SHARES as SHARES  # noqa: E402
from fairpca.tasks.distributed import audit_partitions  # noqa: E402
from fairpca.tasks.evaluate import metrics_with_intervals  # noqa: E402

pytestmark = [pytest.mark.flow, pytest.mark.slow]

ROWS = 8000
FILES = 8
FOLDER: list = []  # the table's Parquet folder, once written
LABEL, SENSITIVE = "income", ["sex"]
# the order in which the route reads (and hashes) a row: label, sensitive, then the rest
COLUMNS = ["income", "sex", "age", "education_num", "hours_per_week", "workclass", "race"]
NO_MEMORY_POLICING = {
    f"distributed.worker.memory.{name}": False for name in ("target", "spill", "pause", "terminate")
}


def adult_like(n: int, seed: int = 0) -> pd.DataFrame:
    """Rows shaped like Adult's: income depends on age, education, hours and sex, and hours
    on sex."""
    rng = np.random.default_rng(seed)
    sex = np.where(rng.random(n) < 1 / 3, "Female", "Male")
    age = rng.integers(18, 80, n)
    education = rng.integers(1, 17, n)
    hours = np.clip(rng.normal(36 + 6 * (sex == "Male"), 10).round(), 1, 99)  # a proxy
    score = 0.05 * (age - 40) + 0.35 * (education - 10) + 0.04 * (hours - 40)
    score += 0.6 * (sex == "Male") - 1.3
    income = np.where(rng.random(n) < 1 / (1 + np.exp(-score)), ">50K", "<=50K")
    return pd.DataFrame({
        "age": age,
        "education_num": education,
        "hours_per_week": hours,
        "workclass": rng.choice(["Private", "Self-emp", "Gov"], n, p=[0.7, 0.15, 0.15]),
        "sex": sex,
        "race": rng.choice(["White", "Black", "Other"], n, p=[0.8, 0.12, 0.08]),
        "income": income,
    })  # fmt: skip


def write_parts(table: pd.DataFrame, folder, suffix: str) -> None:
    folder.mkdir(parents=True)
    for i, rows in enumerate(np.array_split(np.arange(len(table)), FILES)):
        part = table.iloc[rows]
        path = folder / f"part-{i:02d}.{suffix}"
        if suffix == "parquet":
            part.to_parquet(path, index=False)
        else:
            part.to_csv(path, index=False)


@pytest.fixture(scope="module", autouse=True)
def small_samples():
    """The in-memory samples (the search, references, encoder, screening) are the one result
    of a table's size; here a tenth of the table, as on a large table."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(route, "SAMPLE_ROWS", {"train": ROWS // 10, "validation": ROWS // 20})
        patch.setattr(route, "SCREEN_ROWS", ROWS // 10)
        yield


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The table, its Parquet folder and its CSV parts' glob."""
    root = tmp_path_factory.mktemp("table")
    frame = adult_like(ROWS)
    write_parts(frame, root / "parquet", "parquet")
    FOLDER[:] = [root / "parquet"]
    write_parts(frame, root / "csv", "csv")
    return frame, root / "parquet", str(root / "csv" / "part-*.csv")


@pytest.fixture(scope="module")
def cluster(table):
    """Two single-threaded worker processes whose memory limit is half the table's size in
    memory, and each worker's peak of held task results (dask's managed memory).

    The limit is checked on what a worker holds (the partitions and results it keeps):
    the nanny's own policing compares the whole process (the interpreter and its imports,
    ~200 MB) with the limit, which no table of a few thousand rows exceeds, so it is off.
    """
    import dask
    from distributed import Client, LocalCluster, WorkerPlugin

    class PeakHeld(WorkerPlugin):  # defined here: pickled by value to the workers
        def setup(self, worker):
            self.worker, worker.peak_held = worker, 0

        def transition(self, key, start, finish, **kwargs):
            self.worker.peak_held = max(self.worker.peak_held, self.worker.state.nbytes)

    limit = int(table[0].memory_usage(deep=True).sum()) // 2
    with dask.config.set(NO_MEMORY_POLICING), LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit=limit,
        dashboard_address=":0",
    ) as local, Client(local) as client:  # fmt: skip
        client.register_plugin(PeakHeld())
        yield local.scheduler_address, client, limit


def make_config(data, address, tmp_path, **overrides) -> AuditConfig:
    values = {
        "data": data, "label": LABEL, "positive_label": ">50K", "sensitive": SENSITIVE,
        "dask_address": address, "k": 4, "n_bootstrap": 200, "seed": 3,
        "output_dir": tmp_path / "out", "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "model_name": f"fairpca-dask-{tmp_path.name}",
    }  # fmt: skip
    return AuditConfig(**(values | overrides))


def run_route(config, out_dir):
    out_dir.mkdir(parents=True)
    return audit_partitions(config, out_dir, kind="audit", started_at=datetime.now(UTC), tags={})


@pytest.fixture(scope="module")
def audited(table, cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audited")
    config = make_config(table[1], cluster[0], tmp)
    return config, run_route(config, tmp / "run")


def split_parts(folder, seed: int) -> np.ndarray:
    """Each row's part as the route's tasks give it (files in the table's row order)."""
    from pathlib import Path

    files = route.partition_files(folder)
    spec = route._spec(make_config(folder, "local", Path("unused"), seed=seed), files)
    histogram = pd.concat([route._uniform_histogram(f, spec) for f in files])
    spec = dataclasses.replace(spec, cuts=route.stratum_cuts(histogram, spec.shares))
    return np.concatenate([route._rows(f, spec)[3] for f in files])


def in_memory_parts(frame: pd.DataFrame, seed: int) -> np.ndarray:
    return split_parts(FOLDER[0], seed)


def test_split_sizes_add_up_to_the_rows_in_their_shares(table, audited):
    config, result = audited
    sizes = result.record.split_sizes.model_dump()
    assert sum(sizes.values()) == ROWS
    parts = in_memory_parts(table[0], config.seed)
    assert [sizes[p] for p in ("train", "validation", "test")] == np.bincount(parts).tolist()
    assert np.allclose([sizes["train"] / ROWS, sizes["test"] / ROWS], [SHARES[0], SHARES[2]],
                       atol=0.03)  # fmt: skip


def test_no_stage_of_the_in_memory_audit_is_skipped(audited):
    """References, screening, the PCA baseline and the lambda sweep, measured on the rows
    they are reported for; the sample sizes stated."""
    record = audited[1].record
    result = audited[1]
    for stage in ("references", "screening", "pca_baseline", "lambda_sweep", "stratification"):
        assert stage not in (record.skipped or {})
    assert record.selection.baselines.pca is not None
    assert record.selection.baselines.pca.test["balanced_accuracy"] > 0.5
    assert record.screening is not None
    assert record.params["sample_rows"] == str(ROWS // 10)
    names = {reference.name for reference in record.references}
    assert names == {"threshold_optimizer", "exponentiated_gradient", "correlation_remover"}
    for reference in record.references:
        assert reference.test["balanced_accuracy"] > 0.5
        assert "measured on every validation and test row" in reference.config
    lambdas = set(result.table.loc[result.table["variant"] == "fair_pca", "lambda"])
    assert len(lambdas) > 1  # the trade-off block swept
    assert set(result.measured["classifier"]) <= {"logreg", "logreg_tuned"}


@pytest.mark.parametrize("part", ["validation", "test"])
def test_metrics_from_partition_counts_equal_those_of_the_rows(table, audited, part):
    """Every metric and interval the route reports, summed from per-partition counts,
    equals metrics_with_intervals on the same predictions of the same rows in memory."""
    config, result = audited
    frame = table[0]
    rows = frame[in_memory_parts(frame, config.seed) == (1 if part == "validation" else 2)]
    predicted = result.pipeline.predict(rows.drop(columns=[LABEL, *SENSITIVE]))
    expected = metrics_with_intervals(
        (rows[LABEL] == ">50K").to_numpy(int), predicted, rows[SENSITIVE],
        min_group_size=config.evaluation.min_group_size, n_resamples=200, seed=config.seed,
    )  # fmt: skip
    if part == "test":
        reported = result.record.selection.test
    else:
        chosen, measured = result.record.selection.chosen, result.measured
        row = measured[(measured["variant"] == chosen.variant) & (measured["k"] == chosen.k)
                       & (measured["classifier"] == chosen.classifier)
                       & np.isclose(measured["C"], chosen.C)
                       & (np.isclose(measured["lambda"], chosen.lambda_ or 0.0)
                          | (measured["lambda"].isna() & (chosen.lambda_ is None)))]
        reported = {k: v for k, v in row.iloc[0].items() if k in expected}
    assert len(expected) > 40
    assert reported.keys() == expected.keys()
    for name, value in expected.items():
        assert reported[name] == pytest.approx(value, abs=1e-12), name


def test_projection_is_orthonormal_and_equalises_the_training_group_means(table, audited):
    import copy

    from fairpca import FairPCA

    config, result = audited
    frame = table[0]
    train = frame[in_memory_parts(frame, config.seed) == 0]
    encoded = result.pipeline["preprocess"].transform(train.drop(columns=[LABEL, *SENSITIVE]))
    representation = copy.deepcopy(result.pipeline["represent"])
    assert isinstance(representation, FairPCA)
    representation.set_params(tradeoff=0.0)  # the fair block alone
    components = representation.components_
    assert components.shape[0] == 4
    np.testing.assert_allclose(components @ components.T, np.eye(4), atol=1e-10)
    projected = np.asarray(representation.transform(encoded))
    means = [projected[(train["sex"] == g).to_numpy()].mean(axis=0) for g in ("Female", "Male")]
    np.testing.assert_allclose(means[0], means[1], atol=1e-8)
    # the constraint is the projection's doing: the encoded features' means differ
    encoded = np.asarray(encoded)
    raw = [encoded[(train["sex"] == g).to_numpy()].mean(axis=0) for g in ("Female", "Male")]
    assert np.abs(raw[0] - raw[1]).max() > 0.3


def test_a_champion_is_scored_on_the_test_partitions(audited):
    """The promotion's comparison measures a champion on the same test rows, on the
    cluster: the chosen pipeline scores what the record says of it."""
    _, result = audited
    assert result.score(result.pipeline) == result.record.selection.test


def test_no_worker_held_more_than_its_memory_limit(table, audited, cluster):
    _, client, limit = cluster
    assert limit < table[0].memory_usage(deep=True).sum()
    peaks = client.run(lambda dask_worker: dask_worker.peak_held)
    assert len(peaks) == 2 and all(0 < peak <= limit for peak in peaks.values()), peaks


def test_the_same_seed_gives_the_same_audit(table, cluster, audited, tmp_path):
    config, first = audited
    again = run_route(config, tmp_path / "again")
    untimed = [{k: v for k, v in r.record.metrics.items() if not k.startswith("time_")}
               for r in (again, first)]  # fmt: skip
    assert untimed[0] == untimed[1]
    assert again.record.training_data_sha256 == first.record.training_data_sha256
    untimed = [r.table.drop(columns=[c for c in r.table if c.endswith("seconds")])
               for r in (again, first)]  # fmt: skip
    pd.testing.assert_frame_equal(*untimed)
    pd.testing.assert_frame_equal(again.measured, first.measured)
    rows = table[0].drop(columns=[LABEL, *SENSITIVE])
    same = np.testing.assert_array_equal
    same(again.pipeline["represent"].components_, first.pipeline["represent"].components_)
    same(again.pipeline.predict_proba(rows), first.pipeline.predict_proba(rows))


def test_csv_parts_give_the_audit_of_the_parquet_folder(table, cluster, audited, tmp_path):
    _, parquet = audited
    from_csv = run_route(make_config(table[2], cluster[0], tmp_path), tmp_path / "csv")
    assert from_csv.record.split_sizes == parquet.record.split_sizes
    assert from_csv.record.selection.test == parquet.record.selection.test


@pytest.fixture
def shell_cluster(tmp_path, free_port):
    """``dask scheduler`` and ``dask worker`` (two single-threaded workers, 1 GiB each) on
    127.0.0.1, started as a user starts them, in their own process group: yields the
    scheduler's ``tcp://127.0.0.1:PORT``; the whole group is killed after, and none of its
    processes is left."""
    import os
    import signal
    import sys
    import time

    python = [sys.executable, "-m"]
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [*python, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    workers = subprocess.Popen(
        [*python, "distributed.cli.dask_worker", address, "--host", "127.0.0.1", "--nworkers",
         "2", "--nthreads", "1", "--memory-limit", "1GiB", "--no-dashboard",
         "--local-directory", str(tmp_path / "workers")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for process in (workers, scheduler):  # each leads its own process group
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the nanny's worker processes, reaped by init
            if not any(_group_alive(process.pid) for process in (workers, scheduler)):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("a process of the Dask cluster outlived the test")


def _group_alive(pgid: int) -> bool:
    import os

    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e  # a real scheduler and worker processes, driven from the command line
def test_fairpca_audit_on_a_cluster_started_from_the_shell(table, shell_cluster, user_cli,
                                                           tmp_path):  # fmt: skip
    """As a user runs it: ``dask scheduler`` and ``dask worker`` on 127.0.0.1, then
    ``fairpca audit --dask-address tcp://127.0.0.1:PORT``: a sealed output folder and an
    MLflow run of the Dask route, with the references and the PCA baseline measured."""
    from mlflow import MlflowClient

    from fairpca.tasks.trust import verify_output_dir

    fairpca, env = user_cli
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(
        [fairpca, "audit", "--data", str(table[1]), "--label", LABEL, "--positive-label",
         ">50K", "--sensitive", "sex", "--dask-address", shell_cluster, "--k", "4",
         "--tracking-uri", uri, "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (out_dir,) = (tmp_path / "out").iterdir()
    verify_output_dir(out_dir)  # sealed: every file as the audit wrote it
    record = json.loads((out_dir / "audit.json").read_text())
    assert sum(record["split_sizes"].values()) == ROWS
    assert len(record["references"]) == 3 and record["selection"]["baselines"]["pca"]
    status = json.loads((out_dir / "mlflow_status.json").read_text())
    run = MlflowClient(tracking_uri=uri).get_run(status["run_id"])
    assert run.data.tags["fairpca.route"] == "dask"
    assert run.data.params["route"] == "dask"


def test_an_unreachable_scheduler_is_named_with_the_fix(table, user_cli, free_port, tmp_path):
    fairpca, env = user_cli
    address = f"tcp://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [fairpca, "audit", "--data", str(table[1]), "--label", LABEL, "--positive-label",
         ">50K", "--sensitive", "sex", "--dask-address", address, "--output-dir",
         str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert f"no Dask scheduler answered at {address}" in said
    assert "dask scheduler" in said and "Traceback" not in said
    assert not (tmp_path / "out").exists()


def test_bad_sources_are_named_with_the_fix_before_any_work(table, tmp_path):
    frame, folder, _ = table
    with pytest.raises(ValueError, match="pass --dask-address"):
        route.check_partitioned_source(make_config(folder, None, tmp_path))
    with pytest.raises(ValueError, match=r"holds no \.parquet file"):
        route.partition_files(tmp_path)  # a folder of no Parquet file is not partitioned
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    frame.iloc[:10].to_csv(mixed / "a.csv", index=False)
    frame.iloc[10:20].to_parquet(mixed / "b.parquet", index=False)
    with pytest.raises(ValueError, match=matching(route.MIXED_FILES, suffixes=".csv, .parquet")):
        route.check_partitioned_source(make_config(str(mixed / "*"), "local", tmp_path))
    with pytest.raises(ValueError, match=matching(route.MISSING_COLUMNS, missing=["gender"])):
        route.check_partitioned_source(make_config(folder, "local", tmp_path, sensitive=["gender"]))
    classes = matching(route.LABEL_CLASSES_NOT_BINARY, classes=["<=50K", ">50K"])
    with pytest.raises(ValueError, match=classes):
        route.check_partitioned_source(make_config(folder, "local", tmp_path, positive_label=None))
    # what the route does not fit is refused, not replaced by what it fits
    refused = {"variants": "--variants fair_kernel_pca", "classifiers": "--classifiers ['mlp']"}
    for asked in ({"variants": ["fair_pca", "fair_kernel_pca"]}, {"classifiers": ["mlp"]}):
        unfitted = matching(route.UNFITTED_CHOICES, asked=refused[next(iter(asked))])
        with pytest.raises(ValueError, match=unfitted):
            route.check_partitioned_source(make_config(folder, "local", tmp_path, **asked))
    for fitted in ({"variants": ["pca", "fair_pca"]}, {"lambdas": [0.0, 0.5]}):
        route.check_partitioned_source(make_config(folder, "local", tmp_path, **fitted))


def test_a_group_column_is_refused_on_the_route_before_any_work(table, tmp_path):
    """Its split hashes each row, so an entity's rows would land in several parts."""
    _, folder, _ = table
    config = make_config(folder, "local", tmp_path, group_column="age")
    with pytest.raises(ValueError, match=matching(route.GROUP_COLUMN_ON_PARTITIONS, column="age")):
        route.check_partitioned_source(config)


def test_a_scheduler_without_workers_is_named(monkeypatch):
    from distributed import LocalCluster

    monkeypatch.setattr(route, "WORKERS_TIMEOUT_S", 1)
    with (
        LocalCluster(n_workers=0, dashboard_address=":0") as empty,
        pytest.raises(ValueError, match=f"{empty.scheduler_address} has no worker"),
    ):
        route.connect(empty.scheduler_address)


def test_a_part_without_one_of_the_labels_is_named(table, cluster, tmp_path):
    folder = tmp_path / "tiny"
    write_parts(table[0].iloc[:12], folder, "parquet")
    with pytest.raises(ValueError, match=matching(route.ONE_LABEL_IN_A_PART)):
        run_route(make_config(folder, cluster[0], tmp_path), tmp_path / "run")


def test_the_record_is_built_by_the_in_memory_routes_build_record(audited):
    """build_record gives the route what the in-memory record has: the metric steps of the
    candidates' table, the route's parameters beside the config's, the files' SHA-256s."""
    record = audited[1].record
    assert record.metric_steps
    assert record.params["route"] == "dask" and "seed" in record.params
    assert record.provenance.data_source.kind == "file"
    assert len(record.provenance.data_source.sha256) == FILES


def test_the_route_imports_no_private_helper_of_the_record():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(route))
    private = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "fairpca.tasks.record"
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []


def test_every_part_keeps_the_tables_label_and_group_proportions(table):
    """The stratified hash split: each part holds every label x group stratum in the
    table's proportion (in-process: the functions each task runs, one file at a time)."""
    from pathlib import Path

    frame, folder, _ = table
    files = route.partition_files(folder)
    config = make_config(folder, "local", Path("unused"))
    spec = route._spec(config, files)
    histogram = pd.concat([route._uniform_histogram(f, spec) for f in files])
    spec = dataclasses.replace(spec, cuts=route.stratum_cuts(histogram, spec.shares))
    parts = [route._rows(f, spec) for f in files]
    y = np.concatenate([p[1] for p in parts])
    strata = route.strata_of(y, pd.concat([p[2] for p in parts], ignore_index=True))
    part = np.concatenate([p[3] for p in parts])
    table_share = pd.Series(strata).value_counts(normalize=True)
    for code, share in enumerate(SHARES):
        assert (part == code).mean() == pytest.approx(share, abs=0.002)
        in_part = pd.Series(strata[part == code]).value_counts(normalize=True)
        assert np.allclose(in_part[table_share.index], table_share, atol=0.003), code
    # without the cuts (the per-row hash alone) the proportions drift further
    assert route.part_of_rows(frame[COLUMNS], 3, SHARES).tolist() != part.tolist()


def test_the_decision_is_the_in_memory_audits_on_the_measured_candidates(audited):
    """The in-memory audit's choice (select.choose) and its decision after the references
    (the references' veto, dominance, groups not judged), fed the Dask route's candidates
    measured on every validation row and its references, give the record's decision."""
    from fairpca.tasks.select import choose, judge_chosen

    config, result = audited
    record = result.record
    # choose() reads of the labels only the majority class's accuracy
    y_train = np.full(3, int(record.selection.baselines.majority.class_))
    y_validation = _validation_labels(record, record.split_sizes.validation)
    choice = choose(result.measured, y_train, y_validation, config.selection)
    assert choice.chosen["variant"] == record.selection.chosen.variant
    assert choice.chosen["k"] == record.selection.chosen.k
    decided = judge_chosen(choice, result.references, dict(record.selection.test), [],
                           config.selection)  # fmt: skip
    assert decided.decision.promote == record.decision.promote


def _validation_labels(record, validation: int) -> np.ndarray:
    """Validation labels with the record's majority-class accuracy (all choose() reads)."""
    accuracy = record.selection.baselines.majority.validation["accuracy"]
    majority = int(record.selection.baselines.majority.class_)
    n_majority = round(accuracy * validation)
    return np.r_[np.full(n_majority, majority), np.full(validation - n_majority, 1 - majority)]


def test_logistic_regression_on_the_partitions_is_scikit_learns_on_the_rows(table, cluster):
    """Newton's method on the partitions' summed gradients and Hessians gives the weights
    scikit-learn's LogisticRegression(C) finds on the same training rows in memory."""
    from pathlib import Path

    from sklearn.linear_model import LogisticRegression

    from fairpca import FairPCA
    from fairpca.tasks.stages import Stopwatch

    folder = table[1]
    files = route.partition_files(folder)
    config = make_config(folder, cluster[0], Path("unused"))
    passes = route._passes(files, config, Stopwatch())
    parts = [route._encoded(f, passes.spec, passes.preprocessor, ("train",)) for f in files]
    encoded = pd.concat([p[0] for p in parts], ignore_index=True)
    y = np.concatenate([p[1] for p in parts])
    groups = pd.concat([p[2] for p in parts], ignore_index=True)
    representation = FairPCA(n_components=3, tradeoff=0.5).fit(encoded, sensitive_features=groups)
    fitted = route._fit_logistic(passes, {"a": (representation, 0.01), "b": (representation, 1.0)})
    for name, C in (("a", 0.01), ("b", 1.0)):
        expected = LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(
            representation.transform(encoded), y
        )
        np.testing.assert_allclose(fitted[name].coef_, expected.coef_, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(fitted[name].intercept_, expected.intercept_, atol=1e-6)


def test_screened_columns_are_excluded_from_every_partition(tmp_path, cluster):
    """A column that leaks the label and an identifier are excluded on the training sample
    and never read as features from any partition; the record's screening names them."""
    from pathlib import Path

    from fairpca.tasks.stages import Stopwatch

    frame = adult_like(2000, seed=5)
    frame["row_id"] = np.arange(len(frame)) * 7 + 100_003  # distinct on every row
    frame["outcome_code"] = np.where(frame["income"] == ">50K", "A", "B")  # the label again
    folder = tmp_path / "screened"
    write_parts(frame, folder, "parquet")
    files = route.partition_files(folder)
    config = make_config(folder, cluster[0], Path("unused"))
    passes = route._passes(files, config, Stopwatch())
    assert {"row_id", "outcome_code"} <= set(passes.sample.leaking)
    rules = {entry["column"]: entry["rule"] for entry in passes.sample.screening}
    assert "outcome_code" in rules and rules["outcome_code"] == "target leakage"
    for file in files:
        X = route._rows(file, passes.spec)[0]
        assert not {"row_id", "outcome_code"} & set(X.columns)
        assert {"age", "hours_per_week"} <= set(X.columns)


def test_the_route_saves_the_graph_checked_on_its_validation_sample(audited):
    """The partitions' validation rows are not in memory: the route's ONNX graph is checked
    on its sample of validation rows, and the record and the model tags say so."""
    from fairpca.tasks.onnx_export import ONNX_FILE, ONNX_SHA_TAG
    from fairpca.tasks.trust import sha256_file

    config, result = audited
    graph = result.record.onnx
    assert graph.status == "exported" and graph.checked_on == "validation sample"
    assert graph.rows_checked > 0
    saved = Path(config.output.output_dir).parent / "run" / "model" / ONNX_FILE  # run_route's
    assert sha256_file(saved) == graph.sha256 == result.record.model_tags[ONNX_SHA_TAG]
