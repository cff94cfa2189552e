"""Shared pytest fixtures (keep small; others may add theirs)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported where used: the library's tests need no audit layer
    from fairpca.tasks.record import AuditRecord

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The terminal's width comes from the command's own stream, not from the shell that started
# pytest (a developer's terminal, or pytest-xdist's workers, export COLUMNS): tests that need
# a width pass it to the command they run.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


@pytest.fixture(scope="session", autouse=True)
def private_signing_key(tmp_path_factory):
    """Audits sign their output directory with a per-user key: the tests' own key lives in a
    temporary XDG_CONFIG_HOME (inherited by the CLI subprocesses), never in the user's."""
    os.environ.pop("FAIRPCA_SIGNING_KEY", None)
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    return os.environ["XDG_CONFIG_HOME"]


CHECKOUT = Path(__file__).resolve().parents[1]
# What Python and pytest themselves write into a checkout (all git-ignored).
_CACHES = ("__pycache__", ".pytest_cache")


def _checkout_entries() -> set[str] | None:
    """The untracked and ignored entries of the checkout (``git status``, folders collapsed),
    except caches; None when it is not a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(CHECKOUT), "status", "--porcelain", "--ignored"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    entries = {line[3:] for line in done.stdout.splitlines() if line[:2] in ("??", "!!")}
    return {entry for entry in entries if not any(cache in entry for cache in _CACHES)}


@pytest.fixture(scope="session", autouse=True)
def _tests_run_outside_the_checkout(tmp_path_factory):
    """The session works in a scratch folder, so what a test writes relative to the working
    directory (MLflow's default artifact root ``./mlruns``, ``./mlflow.db``,
    ``fairpca-output/``) never lands in the checkout; at the end, the checkout must hold no
    file it did not hold at the start."""
    before = _checkout_entries()
    previous = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)
    after = _checkout_entries()
    if before is not None and after is not None:
        added = sorted(after - before)
        assert not added, f"the tests wrote {added} into the checkout: write under tmp_path"


@pytest.fixture(autouse=True)
def _stop_signal_handlers_restored():
    """Each test leaves the next one the SIGINT/SIGTERM handlers it found (a command's, a
    server's handler left installed would take a later test's simulated Ctrl-C)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    found = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in found.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _test_adds_nothing_to_the_checkout(request):
    """The checkout's top level is the same after each test (a quick check naming the test;
    the session's check above covers every folder)."""
    before = set(os.listdir(CHECKOUT))
    yield
    added = sorted(set(os.listdir(CHECKOUT)) - before - set(_CACHES))
    assert not added, f"{request.node.nodeid} wrote {added} into the checkout: use tmp_path"


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API (SQLite) for the whole session (~15 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """A real MLflow SQLite store in a temp dir, shared by the session (creating one costs
    ~5 s of schema migrations): ``(tracking_uri, MlflowClient)``. Use unique model names."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    return uri, MlflowClient(tracking_uri=uri, registry_uri=uri)


@pytest.fixture(scope="session")
def _empty_store_file(tmp_path_factory) -> Path:
    """An MLflow SQLite store whose schema was created once for the session."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("empty-store") / "mlflow.db"
    uri = f"sqlite:///{path}"
    MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments()
    return path


@pytest.fixture
def empty_store(tmp_path, _empty_store_file) -> str:
    """The tracking URI of an empty MLflow SQLite store of this test alone,
    ``tmp_path/mlflow.db``: a copy of a store created once, instead of ~5 s of schema
    migrations per test (tests/tasks/test_mlflow_store_creation.py creates stores)."""
    import shutil

    path = tmp_path / "mlflow.db"
    shutil.copyfile(_empty_store_file, path)
    return f"sqlite:///{path}"


# Variables this test session (and .ci/run) set that a user's shell does not have: the
# command line must work without them (it sets its own defaults).
SESSION_ONLY_VARIABLES = (
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
    "PREFECT_SERVER_ANALYTICS_ENABLED",
    "PREFECT_API_URL",
    "DO_NOT_TRACK",
    "MLFLOW_DISABLE_TELEMETRY",
    "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
    "CI",
)


@pytest.fixture
def user_cli(tmp_path):
    """``(fairpca, env)``: the ``fairpca`` script of this environment's bin folder and the
    environment of a user's shell (without :data:`SESSION_ONLY_VARIABLES`; this test's own
    Prefect home; the session's signing key and data folder)."""
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in SESSION_ONLY_VARIABLES}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return str(Path(sys.executable).with_name("fairpca")), env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def free_port():
    """``free_port() -> int``: a TCP port of 127.0.0.1 that no process holds right now (the
    system's choice for port 0), for a server a test starts."""
    return _free_port


def _check_useful_registration(out_dir) -> None:
    """A version an audit registered is useful on its test rows: the 95% interval of its
    balanced accuracy lies above 0.5 and it predicts one class for at most 98% of the rows.
    An audit that registered nothing passes."""
    import json
    from pathlib import Path

    out_dir = Path(out_dir)
    status = out_dir / "mlflow_status.json"
    if not status.is_file() or json.loads(status.read_text()).get("model_version") is None:
        return
    test = json.loads((out_dir / "audit.json").read_text())["selection"]["test"]
    assert test["balanced_accuracy.ci95_low"] > 0.5, (out_dir, test["balanced_accuracy"])
    assert test["one_class_share"] <= 0.98, (out_dir, test["one_class_share"])


@pytest.fixture
def assert_useful_registration():
    """``assert_useful_registration(out_dir)``: see :func:`_check_useful_registration`."""
    return _check_useful_registration


@pytest.fixture(autouse=True)
def _every_registered_version_is_useful(request):
    """After each test, every audit under its ``tmp_path`` that registered a version must
    have registered a useful one (no constant or near-constant champion, ever)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")
    yield
    for audit in tmp_path.rglob("audit.json"):
        _check_useful_registration(audit.parent)


# ------------------------------------------------------------------ the audit layers' record
# (tests/tasks, tests/flows): a typed audit record as the audit flow writes it (tests/records.py)


@pytest.fixture
def audit_record() -> AuditRecord:
    """A fresh :func:`build_audit_record` per test (frozen: change it with :func:`replaced`)."""
    from records import build_audit_record

    return build_audit_record()


@pytest.fixture
def dollar_labels() -> tuple[str, str]:
    """Group labels matplotlib would read as mathtext: ``$50k-$100k`` loses its dollars,
    ``$x^$ band`` fails to parse."""
    return ("$50k-$100k", "$x^$ band")


@pytest.fixture
def saved_figures(monkeypatch):
    """Every matplotlib Figure saved during the test, in order (still written to its file)."""
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def _drawn_literally(figure, labels) -> bool:
    """Whether every label is the text of an artist of ``figure`` and no text of it is drawn
    as mathtext or LaTeX."""
    from matplotlib.text import Text

    texts = [t for t in figure.findobj(Text) if t.get_text()]
    literal = all(not t.get_parse_math() and not t.get_usetex() for t in texts)
    return literal and set(labels) <= {t.get_text() for t in texts}


@pytest.fixture
def drawn_literally():
    """``drawn_literally(figure, labels)``: the labels are drawn as written, no text as math."""
    return _drawn_literally


# The files that take longest (whole audits, command-line subprocesses, gate flows), slowest
# first: the two pytest-xdist workers take whole files in collection order, so the long ones
# start first instead of leaving one worker alone with them at the end.
SLOWEST_FILES = (
    "test_hostile_inputs.py",
    "flows/test_audit.py",
    "flows/test_gate.py",
    "tasks/test_trust_models.py",
    "flows/test_retrain.py",
    "test_wheel.py",
    "flows/test_relog.py",
    "flows/test_audit_decisions.py",
    "flows/test_cli.py",
    "tasks/test_registry.py",
    "flows/test_audit_rows.py",
    "tasks/test_public.py",
    "tasks/test_sweep.py",
)


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(SLOWEST_FILES) if path.endswith("/" + name)),
                    len(SLOWEST_FILES))  # fmt: skip

    items.sort(key=rank)  # stable: the order within a file, and of the other files, is kept
