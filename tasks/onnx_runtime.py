"""The ONNX graph of a registered model: what the fairness gate judges and
:func:`fairpca.tasks.registry.load_champion` serves.

A graph made only of the standard operator sets (``ai.onnx``, ``ai.onnx.ml``) is a pure
function of its inputs: no operator opens a file, reads the process's state or the
environment, or returns text of its own. So the gate judges nothing but that graph (MLflow's
``onnx`` flavour, ``model.onnx`` beside the scikit-learn flavour), and never deserialises or
runs the rest of a version's files.

- :func:`read_graph` reads and checks a graph before anything runs it: the file's size on
  disk against :data:`MAX_GRAPH_BYTES` before it is parsed, then standard operator sets only
  (in ``opset_import`` and in every node, subgraphs and functions included), no tensor stored
  outside the file, and ONNX's checker. A refusal is :class:`GraphRefused`, whose message is
  one of a few fixed sentences: nothing the file holds is quoted.
- :class:`GraphModel` serves a checked graph with onnxruntime in this process (it is pure):
  ``predict(frame)`` feeds each graph input the column it names.
- :func:`predict_isolated` is the gate's evaluation: the graph runs in a child process
  (``python -I -m fairpca.tasks.onnx_runtime``) that holds none of the gate's secrets, runs as
  ``nobody`` when the gate is root (it drops privileges itself, after its imports), in its
  own process group, under an address-space, CPU-time and output-size limit and a wall
  deadline; it is killed and its folder removed on every exit path (:func:`stop_running`
  for the signal handlers that end a command at once). Any failure of the graph is the
  fixed category :data:`GRAPH_FAILED`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
# A graph file larger than this is refused unread, by the gate, the trust rule of a saved
# model and the audit that writes it (the audit's graphs are kilobytes to a few MiB).
MAX_GRAPH_BYTES = 64 * 2**20
ONNX_FILE = "model.onnx"  # the graph file of the onnx flavour the audit writes
MISSING_CATEGORY = "<missing>"  # how a missing categorical value is fed to a graph
_MAX_MLMODEL_BYTES = 2**20

NO_GRAPH = "no ONNX graph: the gate judges pure functions only"
GRAPH_FAILED = "the graph failed on the reference rows"
MISSING_COLUMNS = "the model's graph needs the column(s) {missing}; the data lacks them."
TOO_LARGE = f"the ONNX graph file is larger than {MAX_GRAPH_BYTES // 2**20} MiB; it is not read"
UNREADABLE = "the ONNX graph file is not a readable ONNX model"
FOREIGN_DOMAIN = "the ONNX graph uses an operator set other than ai.onnx and ai.onnx.ml"
EXTERNAL_DATA = "the ONNX graph holds a tensor stored outside its file (external data)"
CHECKER = "the ONNX graph does not pass ONNX's checker"
RANDOM = "the ONNX graph draws random numbers (its labels would differ from run to run)"
BAD_INPUTS = "the ONNX graph's inputs are not columns of the data (one tensor per column)"
NO_OUTPUT = "the ONNX graph has no output (its first output is the predicted label)"


class GraphRefused(ValueError):
    """A graph that is not run or served; the message is a fixed sentence (no model text)."""


class GraphFailed(GraphRefused):
    """The graph failed while it ran (error, memory or time limit, unusable output)."""

    def __init__(self) -> None:
        super().__init__(GRAPH_FAILED)


# ---- reading and checking a graph ------------------------------------------------------------

# ONNX tensor element types the columns of a table are fed as (TensorProto.DataType)
_NUMPY_TYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
                8: "str", 9: "bool", 11: "float64"}  # fmt: skip


@dataclass(frozen=True)
class GraphInput:
    """One input of a graph: its name (a column), NumPy type and rank (1 or 2)."""

    name: str
    dtype: str
    rank: int


@dataclass(frozen=True)
class Graph:
    """A checked graph: its bytes, their SHA-256 (what an attestation binds), its inputs and
    the name of its first output (the predicted label)."""

    data: bytes
    sha256: str
    inputs: tuple[GraphInput, ...]
    output: str


def graph_file(model_dir: Path) -> Path:
    """The graph file MLflow's ``onnx`` flavour names in ``model_dir/MLmodel`` (read as YAML,
    nothing imported): a plain file inside ``model_dir``.

    Raises
    ------
    GraphRefused
        :data:`NO_GRAPH`: no readable MLmodel, no ``onnx`` flavour, or its file is missing,
        a link, or outside the folder.
    """
    import yaml

    model_dir = Path(model_dir)
    mlmodel = model_dir / "MLmodel"
    try:
        if mlmodel.is_symlink() or mlmodel.stat().st_size > _MAX_MLMODEL_BYTES:
            raise ValueError("not a plain MLmodel file")
        flavor = (yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {})["flavors"]["onnx"]
        name = flavor["data"]
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError("not a file name")
        path = model_dir / name
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a plain file")
    except (OSError, ValueError, KeyError, TypeError, RecursionError, yaml.YAMLError,
            UnicodeDecodeError):  # a nesting deeper than the parser's stack is no MLmodel
        raise GraphRefused(NO_GRAPH) from None
    return path


def read_graph(model_dir: Path) -> Graph:
    """The graph of the MLflow model folder ``model_dir``, read once and checked before
    anything runs it: its size on disk first (:data:`MAX_GRAPH_BYTES`), then the bytes read
    are checked by :func:`graph_of`.

    Raises
    ------
    GraphRefused
        With one of the fixed reasons (:data:`NO_GRAPH`, :data:`TOO_LARGE`, ...).
    """
    path = graph_file(model_dir)
    if path.stat().st_size > MAX_GRAPH_BYTES:
        raise GraphRefused(TOO_LARGE)
    with path.open("rb") as handle:
        data = handle.read(MAX_GRAPH_BYTES + 1)
    return graph_of(data)  # refuses it too if it grew since


def graph_of(data: bytes) -> Graph:
    """The checked graph of the bytes ``data``: at most :data:`MAX_GRAPH_BYTES`, parsed (no
    external data loaded), checked by :func:`check_graph`, with a first output and inputs
    a table's columns can be fed to (:func:`graph_inputs`).

    Raises
    ------
    GraphRefused
        With one of the fixed reasons (:data:`TOO_LARGE`, :data:`UNREADABLE`, ...).
    """
    if len(data) > MAX_GRAPH_BYTES:
        raise GraphRefused(TOO_LARGE)
    model = parse_graph(data)
    check_graph(model)
    if not model.graph.output:
        raise GraphRefused(NO_OUTPUT)
    return Graph(data, hashlib.sha256(data).hexdigest(), graph_inputs(model),
                 model.graph.output[0].name)  # fmt: skip


def parse_graph(data: bytes):
    """The ``onnx.ModelProto`` of ``data`` (external data never loaded)."""
    import onnx

    try:
        return onnx.load(io.BytesIO(data), load_external_data=False)
    except Exception:  # protobuf's DecodeError and its kin: the message would quote the file
        raise GraphRefused(UNREADABLE) from None


def _messages(message) -> Iterator[Any]:
    """``message`` and every protobuf message inside it, however deep: of a model, the graph
    and every subgraph and function, their nodes, operator set imports and tensors (of
    initializers, sparse ones and attributes alike). Nothing can hide from a check that
    reads all of them."""
    yield message
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:  # one message, or a repeated field of them
            for item in [value] if hasattr(value, "ListFields") else value:
                yield from _messages(item)


# Operators whose output is a random draw: a graph using one could pass the gate on one draw
# and decide otherwise on the next (Dropout draws only in training mode, its third input).
RANDOM_OPERATORS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal",
                              "RandomNormalLike", "Bernoulli", "Multinomial"})  # fmt: skip


def check_graph(model) -> None:
    """Refuse a graph outside the standard operator sets, that draws random numbers, with
    external data, or that fails ONNX's checker (in that order: the checker runs on a graph
    that is pure).

    Raises
    ------
    GraphRefused
        :data:`FOREIGN_DOMAIN`, :data:`RANDOM`, :data:`EXTERNAL_DATA` or :data:`CHECKER`.
    """
    import onnx

    messages = list(_messages(model))
    named = (onnx.NodeProto, onnx.OperatorSetIdProto, onnx.FunctionProto)
    if not {m.domain for m in messages if isinstance(m, named)} <= STANDARD_DOMAINS:
        raise GraphRefused(FOREIGN_DOMAIN)
    for node in (m for m in messages if isinstance(m, onnx.NodeProto)):
        training = node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]
        if node.op_type in RANDOM_OPERATORS or training:
            raise GraphRefused(RANDOM)
    tensors = [m for m in messages if isinstance(m, onnx.TensorProto)]
    if any(t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data) for t in tensors):
        raise GraphRefused(EXTERNAL_DATA)
    try:
        onnx.checker.check_model(model)
    except Exception:  # ValidationError: its text quotes the graph
        raise GraphRefused(CHECKER) from None


def graph_inputs(model) -> tuple[GraphInput, ...]:
    """The graph's inputs (initializers listed as inputs left out): each a tensor of rank 1
    or 2 (one column) of a type a table column can be fed as.

    Raises
    ------
    GraphRefused
        :data:`BAD_INPUTS`.
    """
    constants = {tensor.name for tensor in model.graph.initializer}
    found = []
    for entry in (entry for entry in model.graph.input if entry.name not in constants):
        tensor = entry.type.tensor_type
        rank, dims = len(tensor.shape.dim), tensor.shape.dim
        wide = rank == 2 and dims[1].HasField("dim_value") and dims[1].dim_value != 1
        typed = entry.type.HasField("tensor_type") and tensor.elem_type in _NUMPY_TYPES
        if not typed or rank not in (1, 2) or wide:
            raise GraphRefused(BAD_INPUTS)
        found.append(GraphInput(entry.name, _NUMPY_TYPES[tensor.elem_type], rank))
    if not found:
        raise GraphRefused(BAD_INPUTS)
    return tuple(found)


def graph_feed(inputs: tuple[GraphInput, ...], frame) -> dict[str, Any]:
    """The arrays a graph is fed: for each input the column of ``frame`` it names, as the
    input's type, shaped ``(rows,)`` or ``(rows, 1)``; text as ``str`` with a missing value
    :data:`MISSING_CATEGORY`, floats with a missing value NaN (as the audit's graph reads
    them: :mod:`fairpca.tasks.onnx_export`).

    Raises
    ------
    ValueError
        A column is missing or its values do not fit the input's type (names the column).
    """
    if missing := [entry.name for entry in inputs if entry.name not in frame.columns]:
        raise ValueError(MISSING_COLUMNS.format(missing=missing))
    feed = {}
    for entry in inputs:
        try:
            values = _column_values(frame[entry.name], entry.dtype)
        except (TypeError, ValueError):
            raise ValueError(
                f"column {entry.name!r} cannot be given to the model's graph as {entry.dtype}; "
                "pass the values the model was trained on (e.g. numbers as floats)."
            ) from None
        feed[entry.name] = values.reshape(-1, 1) if entry.rank == 2 else values
    return feed


def _column_values(column, dtype: str):
    """A column as the NumPy type ``dtype`` (never an object array: the child reads the
    arrays without pickle)."""
    import numpy as np

    if dtype == "str":
        text = column.astype(object).map(str).to_numpy(dtype=object)
        text[column.isna().to_numpy()] = MISSING_CATEGORY
        return text.astype(str)
    if dtype in ("float32", "float64"):
        return column.to_numpy(dtype=dtype, na_value=np.nan)
    return column.to_numpy(dtype=dtype)


def labels_row_by_row(session, output: str, feed: dict[str, Any], rows: int):
    """The graph's label for each row, computed on that row alone (None when an output is not
    one label). A graph sees a batch whole (its size, its means: standard operators read
    them), so run on the gate's reference rows at once it could tell them from a
    production batch; one row at a time it sees the same in both."""
    import numpy as np

    labels = []
    for row in range(rows):
        output_row = session.run([output], {name: v[row : row + 1] for name, v in feed.items()})
        if (label := predicted_labels(output_row[0], 1)) is None:
            return None
        labels.append(label)
    return np.concatenate(labels) if labels else predicted_labels(np.empty(0), 0)


def predicted_labels(output, rows: int):
    """One label per row from a graph's first output, or None when it is not that (a
    sequence, a map, another shape)."""
    import numpy as np

    if not isinstance(output, np.ndarray):
        return None
    if output.ndim == 2 and output.shape[1] == 1:
        output = output[:, 0]
    if output.shape != (rows,) or output.dtype.kind not in "biufUSO":
        return None
    return output.astype(str) if output.dtype.kind in "OS" else output


def _session(data: bytes, threads: int | None):
    """An onnxruntime session of the graph ``data`` on the CPU; ``threads`` (default:
    onnxruntime's) the threads of one operator."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
    return onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])


class GraphModel:
    """A checked graph served by onnxruntime in this process (the graph is pure).

    ``predict(X)`` feeds each graph input the column of the DataFrame ``X`` it names
    (:func:`graph_feed`), one row at a time as the gate ran it (:func:`labels_row_by_row`),
    and returns the first output, one label per row. ``sha256`` is the
    graph's digest; ``threads`` (default: onnxruntime's) the threads of one operator."""

    def __init__(self, graph: Graph, threads: int | None = None):
        self.sha256 = graph.sha256
        self._inputs, self._output = graph.inputs, graph.output
        self._session = _session(graph.data, threads)

    def predict(self, X):
        rows = len(X)
        labels = labels_row_by_row(self._session, self._output, graph_feed(self._inputs, X), rows)
        if labels is None:
            raise ValueError(f"the model's graph did not return one label for each of {rows} rows")
        return labels


# ---- the gate's evaluation in a limited child process ---------------------------------------

# What the child inherits of the environment: nothing secret (no key, no token).
_CHILD_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
CHILD_USER = "nobody"  # the user a root gate's child drops to before it reads the graph
MEMORY_BYTES = 2**30  # the child's address space (RLIMIT_AS), imports included
CPU_SECONDS = 120  # the child's CPU time (RLIMIT_CPU)
WALL_SECONDS = 300  # the child's wall-clock deadline
_OUTPUT_BYTES = 64 * 2**20  # the predictions file (RLIMIT_FSIZE)
_REFUSED_START = 2  # the child could not set itself up (not the graph's doing)
_GRAPH_FAILED = 3  # the graph could not be loaded, failed, or returned no label per row

_RUNNING: dict[Path, subprocess.Popen | None] = {}  # folder -> its child (None: not yet)
_RUNNING_LOCK = threading.Lock()


class ChildError(RuntimeError):
    """The evaluation child could not be started or set up (the gate's environment)."""


def predict_isolated(
    graph: Graph, frame, *, memory_bytes: int = MEMORY_BYTES, cpu_seconds: int = CPU_SECONDS,
    wall_seconds: float = WALL_SECONDS,
):  # fmt: skip
    """The graph's labels for the rows of the DataFrame ``frame``, computed in a child
    process; only a NumPy file of labels (no pickle) is read back.

    The child (``python -I -m fairpca.tasks.onnx_runtime``) gets the graph and the arrays
    (:func:`graph_feed`) on its standard input and writes the labels to its standard output,
    both files of a private temporary folder it never opens itself. Its environment holds
    none of this process's variables but ``PATH`` and the locale; it runs in a new session
    (its own process group); under root it drops to :data:`CHILD_USER` (no supplementary
    group) after its imports and before it reads anything; it limits its address space,
    CPU time and output size and dies with this process. Past ``wall_seconds`` its group is
    killed; on any exit (an error, a signal turned into an exception) too, and the folder is
    removed.

    Raises
    ------
    GraphRefused
        :data:`BAD_INPUTS`; :class:`GraphFailed`: the graph could not be loaded, failed,
        exceeded a limit, or returned no label per row.
    ChildError
        The child could not start or set itself up.
    """
    import numpy as np

    try:
        feed = graph_feed(graph.inputs, frame)
    except ValueError:  # its message names the graph's inputs: model text
        raise GraphRefused(BAD_INPUTS) from None
    work = Path(tempfile.mkdtemp(prefix="fairpca-graph-"))
    with _RUNNING_LOCK:
        _RUNNING[work] = child = None
    try:
        with (work / "request.npz").open("xb") as handle:
            arrays = {f"input_{i}": values for i, values in enumerate(feed.values())}
            np.savez(handle, graph=np.frombuffer(graph.data, dtype=np.uint8),
                     names=np.array(list(feed), dtype=str), output=np.array(graph.output),
                     **arrays)  # fmt: skip
        del feed, arrays
        (work / "home").mkdir()
        env = {name: os.environ[name] for name in _CHILD_ENV if name in os.environ}
        env |= {"HOME": str(work / "home"), "TMPDIR": str(work / "home")}
        limits = [str(memory_bytes), str(cpu_seconds), str(_OUTPUT_BYTES), str(os.getpid())]
        command = [sys.executable, "-I", "-m", "fairpca.tasks.onnx_runtime", *limits]
        with (work / "request.npz").open("rb") as stdin, (work / "labels.npy").open("xb") as out:
            try:
                child = subprocess.Popen(
                    command, stdin=stdin, stdout=out, stderr=subprocess.DEVNULL, env=env,
                    cwd="/", start_new_session=True, close_fds=True,
                )  # fmt: skip
            except OSError as error:
                raise ChildError(f"the gate's evaluation child did not start ({error})") from None
            with _RUNNING_LOCK:
                _RUNNING[work] = child
            try:
                code = child.wait(timeout=wall_seconds)
            except subprocess.TimeoutExpired:
                raise GraphFailed() from None
        return _labels(work / "labels.npy", code, len(frame))
    finally:
        if child is not None:
            _stop(child)
        shutil.rmtree(work, ignore_errors=True)
        with _RUNNING_LOCK:  # only now: a stop signal before this removes the folder itself
            _RUNNING.pop(work, None)


def _labels(path: Path, code: int, rows: int):
    import numpy as np

    if code == _REFUSED_START:
        raise ChildError(
            f"the gate's evaluation child could not set itself up (drop to {CHILD_USER!r}, "
            "limits, onnxruntime); see the worker's environment"
        )
    if code not in (0, _GRAPH_FAILED) and code > 0:  # not a limit's signal: its own error
        raise ChildError(f"the gate's evaluation child ended with status {code}")
    if code != 0 or path.stat().st_size > _OUTPUT_BYTES:
        raise GraphFailed()
    try:
        labels = predicted_labels(np.load(path, allow_pickle=False), rows)
    except (ValueError, OSError, EOFError):
        labels = None
    if labels is None:
        raise GraphFailed()
    return labels


def _stop(child: subprocess.Popen) -> None:
    """Kill the child's whole process group (while its leader is not reaped, the group id
    is still its own) and reap it."""
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def stop_running() -> None:
    """Kill every evaluation child of this process and remove its folder: for a signal
    handler that ends the process at once (no ``finally`` runs after ``os._exit``)."""
    with _RUNNING_LOCK:
        running = list(_RUNNING.items())
    for work, child in running:
        if child is not None:
            _stop(child)
        shutil.rmtree(work, ignore_errors=True)


# ---- the child -------------------------------------------------------------------------------


def _confine(memory_bytes: int, cpu_seconds: int, output_bytes: int, parent: int) -> None:
    """The child's set-up, in this order: under root, no supplementary group, then the group
    and user :data:`CHILD_USER`; SIGKILL when the gate dies (Linux ``PR_SET_PDEATHSIG``, set
    after the privilege drop, which clears it), and stop at once if it is gone already; then
    the limits. The modules it needs are imported first, before the privilege drop."""
    import ctypes
    import pwd
    import resource

    if os.geteuid() == 0:
        account = pwd.getpwnam(CHILD_USER)
        os.setgroups([])
        os.setgid(account.pw_gid)
        os.setuid(account.pw_uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise OSError("still root")
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise OSError("the gate is gone")
    for limit, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_CPU, cpu_seconds),
                         (resource.RLIMIT_FSIZE, output_bytes)):  # fmt: skip
        resource.setrlimit(limit, (value, value))


class _NoMoreImports:
    """Refuses every import once the child has dropped its privileges: whatever it needs is
    loaded before (under a root gate the interpreter's files may be unreadable to
    ``nobody``), so no lazy import can depend on them."""

    def find_spec(self, name, path=None, target=None):
        raise ImportError(f"{name} imported after the privilege drop")


def _child_main(argv: list[str]) -> int:
    """The child: set up, read the request from standard input, run the graph, write the
    labels to standard output. Exit status 0, :data:`_REFUSED_START` (set-up failed) or
    :data:`_GRAPH_FAILED`; nothing else is said."""
    import numpy as np
    import onnxruntime  # noqa: F401 (loaded before the privilege drop; _session uses it)

    warm = io.BytesIO()
    np.savez(warm, a=np.zeros(1))
    np.load(io.BytesIO(warm.getvalue()), allow_pickle=False)["a"]  # numpy's lazy imports
    try:
        _confine(*(int(value) for value in argv))
    except (OSError, ValueError, KeyError):
        return _REFUSED_START
    sys.meta_path.insert(0, _NoMoreImports())
    try:
        with open(0, "rb", closefd=False) as stdin, np.load(stdin, allow_pickle=False) as request:
            names = [str(name) for name in request["names"]]
            feed = {name: request[f"input_{i}"] for i, name in enumerate(names)}
            rows = len(next(iter(feed.values())))
            session = _session(request["graph"].tobytes(), threads=1)
            labels = labels_row_by_row(session, str(request["output"]), feed, rows)
        if labels is None:
            return _GRAPH_FAILED
        with open(1, "wb", closefd=False) as stdout:
            np.save(stdout, labels, allow_pickle=False)
    except BaseException:  # the graph's errors, MemoryError: one fixed category
        return _GRAPH_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
