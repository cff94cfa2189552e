"""The ONNX graph the gate judges and load_champion serves: the checks before anything runs
it (size before parsing, standard operator sets only, no external data, ONNX's checker, fixed
reasons that quote nothing of the file), and the evaluation child: its predictions, its
limits (address space, CPU time, wall clock), its user, environment and process group, and
that neither it nor its folder outlives the call, however the call ends."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from graphs import allocation_bomb, identity, one_output, slow, write
from messages import matching
from onnx import TensorProto, helper

from fairpca.flows.runtime import descendants
from fairpca.tasks import onnx_runtime
from fairpca.tasks.onnx_runtime import (
    CHECKER,
    EXTERNAL_DATA,
    FOREIGN_DOMAIN,
    GRAPH_FAILED,
    MISSING_COLUMNS,
    NO_GRAPH,
    NO_OUTPUT,
    TOO_LARGE,
    UNREADABLE,
    GraphFailed,
    GraphModel,
    GraphRefused,
    predict_isolated,
    read_graph,
)

FRAME = pd.DataFrame({"x1": np.linspace(-1, 1, 50), "x2": np.linspace(1, -1, 50)})


def _fair_pipeline():
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import DoubleTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(0)
    train = pd.DataFrame({"x1": rng.normal(size=200), "x2": rng.normal(size=200)})
    pipeline = Pipeline([
        ("columns", ColumnTransformer([("x", "passthrough", ["x1", "x2"])])),
        ("model", LogisticRegression()),
    ]).fit(train, (train["x1"] + 0.3 * train["x2"] > 0).astype(int))  # fmt: skip
    types = [(name, DoubleTensorType([None, 1])) for name in ("x1", "x2")]
    graph = to_onnx(pipeline, initial_types=types, options={id(pipeline[-1]): {"zipmap": False}})
    return pipeline, graph


# ---- the checks before anything runs ---------------------------------------------------------


def test_a_fair_pipelines_graph_predicts_as_the_pipeline_in_the_child_and_in_process(tmp_path):
    pipeline, graph = _fair_pipeline()
    checked = read_graph(write(tmp_path / "m", graph))
    assert [entry.name for entry in checked.inputs] == ["x1", "x2"]
    expected = pipeline.predict(FRAME)
    np.testing.assert_array_equal(predict_isolated(checked, FRAME), expected)
    np.testing.assert_array_equal(GraphModel(checked).predict(FRAME[["x2", "x1"]]), expected)
    with pytest.raises(ValueError, match=matching(MISSING_COLUMNS, missing=["x2"])):
        GraphModel(checked).predict(FRAME[["x1"]])


def test_a_folder_without_a_plain_graph_file_has_no_graph(tmp_path):
    folder = write(tmp_path / "m", identity())
    (folder / "MLmodel").write_text("flavors:\n  sklearn:\n    pickled_model: model.skops\n")
    for mlmodel in ("flavors:\n  sklearn: {}\n", "flavors:\n  onnx:\n    data: ../model.onnx\n",
                    "flavors: [", "flavors:\n  onnx:\n    data: gone.onnx\n"):  # fmt: skip
        (folder / "MLmodel").write_text(mlmodel)
        with pytest.raises(GraphRefused) as refused:
            read_graph(folder)
        assert str(refused.value) == NO_GRAPH
    linked = write(tmp_path / "linked", b"")
    (linked / "model.onnx").unlink()
    (linked / "model.onnx").symlink_to(folder / "model.onnx")
    with pytest.raises(GraphRefused, match=NO_GRAPH):
        read_graph(linked)


def test_a_graph_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path):
    folder = write(tmp_path / "m", b"")
    with (folder / "model.onnx").open("wb") as handle:  # sparse: no disk used
        handle.truncate(onnx_runtime.MAX_GRAPH_BYTES + 1)
    with pytest.raises(GraphRefused) as refused:
        read_graph(folder)
    assert str(refused.value) == TOO_LARGE  # zeros are no ONNX model: it was never parsed
    with (folder / "model.onnx").open("r+b") as handle:
        handle.truncate(onnx_runtime.MAX_GRAPH_BYTES)
    with pytest.raises(GraphRefused) as unreadable:
        read_graph(folder)
    assert str(unreadable.value) == UNREADABLE


def test_a_custom_domain_anywhere_is_refused_and_not_named(tmp_path):
    custom = one_output([helper.make_node("Steal", ["x1"], ["label"], domain="secret.domain")],
                    domain="secret.domain")  # fmt: skip
    contrib = one_output([helper.make_node("Gelu", ["x1"], ["label"], domain="com.microsoft")],
                     domain="com.microsoft")  # fmt: skip
    imported_only = identity()
    imported_only.opset_import.append(helper.make_opsetid("secret.domain", 1))
    inner = helper.make_graph(
        [helper.make_node("Steal", ["x1"], ["y"], domain="secret.domain")], "then", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
    )  # fmt: skip
    branch = one_output(
        [helper.make_node("If", ["c"], ["label"], then_branch=inner, else_branch=inner)],
        initializers=[helper.make_tensor("c", TensorProto.BOOL, [], [True])],
    )
    for name, model in [("custom", custom), ("contrib", contrib), ("import", imported_only),
                        ("subgraph", branch)]:  # fmt: skip
        with pytest.raises(GraphRefused) as refused:
            read_graph(write(tmp_path / name, model))
        assert str(refused.value) == FOREIGN_DOMAIN
        assert "secret" not in str(refused.value)


def test_a_tensor_stored_outside_the_file_is_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(np.ones(1, np.float32).tobytes())
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="weights.bin")
    model = one_output([helper.make_node("Add", ["x1", "w"], ["label"])], initializers=[weight])
    with pytest.raises(GraphRefused) as refused:
        read_graph(write(folder, model))
    assert str(refused.value) == EXTERNAL_DATA
    inline = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])
    inline.data_location = TensorProto.EXTERNAL  # in a Constant node's attribute
    constant = one_output([helper.make_node("Constant", [], ["v"], value=inline),
                       helper.make_node("Add", ["x1", "v"], ["label"])])  # fmt: skip
    with pytest.raises(GraphRefused, match="external data"):
        read_graph(write(tmp_path / "constant", constant))


def test_a_graph_that_fails_onnxs_checker_is_refused_without_its_message(tmp_path):
    broken = one_output([helper.make_node("Add", ["x1", "nowhere_SECRET"], ["label"])])
    with pytest.raises(GraphRefused) as refused:
        read_graph(write(tmp_path / "m", broken))
    assert str(refused.value) == CHECKER
    silent = identity()
    del silent.graph.output[:]
    with pytest.raises(GraphRefused) as no_output:
        read_graph(write(tmp_path / "silent", silent))
    assert str(no_output.value) in (CHECKER, NO_OUTPUT)


# ---- the evaluation child --------------------------------------------------------------------


def _child_when_limited(timeout: float = 60.0) -> int:
    """The evaluation child of this process once it has set its limits (and, under root,
    dropped to ``nobody``): it is then about to read the graph."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in descendants(os.getpid()):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                limits = Path(f"/proc/{pid}/limits").read_text()
            except OSError:
                continue
            if b"fairpca.tasks.onnx_runtime" in command and str(2**30) in limits:
                return pid
        time.sleep(0.05)
    raise AssertionError("no evaluation child started")


def _in_background(function, *args, **kwargs):
    box: dict = {}

    def run():
        try:
            box["value"] = function(*args, **kwargs)
        except BaseException as error:
            box["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The temporary folder the evaluation's folder is made in, watched by the test."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return tmp_path


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("fairpca-graph-*"))


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads Linux /proc")
def test_the_child_runs_limited_without_secrets_in_its_own_group(own_tmp, monkeypatch):
    monkeypatch.setenv("FAIRPCA_GATE_KEY", "s" * 64)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "hunter2")
    checked = read_graph(write(own_tmp / "m", slow()))
    thread, box = _in_background(predict_isolated, checked, FRAME)
    pid = _child_when_limited()
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    limits = Path(f"/proc/{pid}/limits").read_text()
    assert b"FAIRPCA_GATE_KEY" not in environ and b"hunter2" not in environ
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session and group
    assert f"Max address space         {2**30}" in limits
    assert f"Max cpu time              {onnx_runtime.CPU_SECONDS}" in limits
    if os.geteuid() == 0:  # a root gate's child is nobody: the 0600 key is not its to read
        status = Path(f"/proc/{pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uid_line.split()[1:]) == {"65534"}
        assert next(line for line in status.splitlines() if line.startswith("Groups:")).split() \
            == ["Groups:"]  # fmt: skip
    os.kill(pid, 9)
    thread.join(30)
    assert isinstance(box.get("error"), GraphFailed)
    assert str(box["error"]) == GRAPH_FAILED
    assert _left(own_tmp) == []


def test_a_graph_that_allocates_past_the_limit_fails_with_the_fixed_reason(own_tmp):
    checked = read_graph(write(own_tmp / "m", allocation_bomb()))
    started = time.monotonic()
    with pytest.raises(GraphFailed) as failed:
        predict_isolated(checked, FRAME)
    assert str(failed.value) == GRAPH_FAILED
    assert time.monotonic() - started < 60
    assert _left(own_tmp) == []


def test_the_cpu_limit_and_the_wall_deadline_stop_a_graph_that_never_ends(own_tmp):
    checked = read_graph(write(own_tmp / "m", slow()))
    for limits in ({"cpu_seconds": 3}, {"wall_seconds": 3}):
        started = time.monotonic()
        with pytest.raises(GraphFailed):
            predict_isolated(checked, FRAME, **limits)
        assert time.monotonic() - started < 30, limits
        assert _left(own_tmp) == []
        assert not [p for p in descendants(os.getpid())
                    if b"onnx_runtime" in Path(f"/proc/{p}/cmdline").read_bytes()]  # fmt: skip


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads Linux /proc")
def test_an_interrupted_evaluation_kills_its_child_and_removes_its_folder(own_tmp):
    """Ctrl-C (KeyboardInterrupt in the waiting thread) while the graph runs: the child's
    group is killed and the folder removed before the interrupt goes on."""
    checked = read_graph(write(own_tmp / "m", slow()))

    def interrupt_when_running():
        interrupt_when_running.pid = _child_when_limited()
        _thread.interrupt_main(signal.SIGINT)

    # Ctrl-C as a plain Python process takes it (``interrupt_main`` calls the installed
    # handler, whatever an earlier test in this worker left); a lost interrupt fails in 20 s
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    watcher = threading.Thread(target=interrupt_when_running)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            predict_isolated(checked, FRAME, cpu_seconds=20)
    finally:
        watcher.join()
        signal.signal(signal.SIGINT, previous)
    pid = interrupt_when_running.pid
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped
    assert _left(own_tmp) == []


def test_a_graph_sees_one_row_at_a_time_in_the_gate_and_when_served(tmp_path):
    """Review of issue 53: a graph reading its batch (its size, its statistics: standard
    operators do) could answer one way on the gate's reference rows, run as one batch, and
    another on a production batch. Run one row at a time, it sees the same in both."""
    from graphs import batch_reader

    checked = read_graph(write(tmp_path / "m", batch_reader()))
    frame = FRAME[["x1"]].astype("float32")
    assert set(predict_isolated(checked, frame).tolist()) == {0.0}
    assert set(GraphModel(checked).predict(frame).tolist()) == {0.0}
    assert set(GraphModel(checked).predict(frame.iloc[:1]).tolist()) == {0.0}


@pytest.mark.parametrize("op_type", ["RandomUniformLike", "RandomNormalLike", "Bernoulli"])
def test_a_graph_that_draws_random_numbers_is_refused(tmp_path, op_type):
    """Review of issue 53: a graph that draws at random could pass on one draw and decide
    otherwise in production; refused with a fixed reason, also in a subgraph."""
    from graphs import random_draw

    from fairpca.tasks.onnx_runtime import RANDOM

    model = random_draw(op_type)
    inner = helper.make_graph(list(model.graph.node), "then", [],
                              [helper.make_tensor_value_info("label", TensorProto.FLOAT,
                                                             [None, 1])])  # fmt: skip
    nested = one_output(
        [helper.make_node("If", ["c"], ["label"], then_branch=inner, else_branch=inner)],
        initializers=[helper.make_tensor("c", TensorProto.BOOL, [], [True])],
    )
    for name, graph in (("top", model), ("nested", nested)):
        with pytest.raises(GraphRefused) as refused:
            read_graph(write(tmp_path / name, graph))
        assert str(refused.value) == RANDOM


def test_an_mlmodel_nested_past_the_parsers_stack_has_no_graph(tmp_path):
    """Review of issue 53: a deeply nested MLmodel raised RecursionError (an ``error``
    verdict judged again every deadline) instead of the fixed refusal."""
    folder = write(tmp_path / "m", identity())
    (folder / "MLmodel").write_text("flavors: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(GraphRefused) as refused:
        read_graph(folder)
    assert str(refused.value) == NO_GRAPH
