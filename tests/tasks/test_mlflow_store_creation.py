"""The default local store is created safely by commands started together, and a broken one
is named with its fix (fairpca.tasks.mlflow_store.mlflow_client)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairpca.tasks.mlflow_store import BrokenStoreError, mlflow_client

# One command's first use of the default store (``sqlite:///mlflow.db`` in its folder),
# everything imported before it waits at the barrier, so both migrate at the same moment.
FIRST_USE = """
import sys, time
from pathlib import Path
import mlflow.store.model_registry.sqlalchemy_store, mlflow.store.tracking.sqlalchemy_store
from fairpca.tasks.mlflow_store import mlflow_client
Path(sys.argv[1]).touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
client = mlflow_client("sqlite:///mlflow.db")
client.create_experiment(sys.argv[3])
"""


def test_two_commands_creating_the_default_store_at_once_both_succeed(tmp_path):
    go = tmp_path / "go"
    commands = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_USE, str(tmp_path / f"ready-{n}"), str(go), f"e{n}"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 300  # the barrier: both are ready (imports done), then go
    while not all((tmp_path / f"ready-{n}").exists() for n in range(2)):
        assert all(c.poll() is None for c in commands) and time.monotonic() < deadline
        time.sleep(0.05)
    go.touch()
    said = [command.communicate(timeout=300) for command in commands]
    assert [command.returncode for command in commands] == [0, 0], said
    client = mlflow_client(f"sqlite:///{tmp_path / 'mlflow.db'}")  # works afterwards
    client.create_registered_model("after-the-race")
    assert {e.name for e in client.search_experiments()} == {"Default", "e0", "e1"}
    assert [m.name for m in client.search_registered_models()] == ["after-the-race"]


def _half_migrated(healthy: Path, target: Path) -> None:
    """What two concurrent migrations leave: a schema version short of the head and
    alembic's temporary table."""
    shutil.copyfile(healthy, target)
    with sqlite3.connect(target) as db:
        db.execute("UPDATE alembic_version SET version_num = '7f2a7d5fae7d'")
        db.execute("CREATE TABLE _alembic_tmp_model_versions (name VARCHAR(256))")


@pytest.mark.parametrize("damage", ["half-migrated", "not a database"])
def test_a_broken_store_is_named_with_its_fix(tmp_path, damage):
    healthy, broken = tmp_path / "healthy.db", tmp_path / "broken.db"
    if damage == "half-migrated":
        mlflow_client(f"sqlite:///{healthy}")
        _half_migrated(healthy, broken)
    else:
        broken.write_bytes(b"not a database\n" * 100)
    with pytest.raises(BrokenStoreError) as refused:
        mlflow_client(f"sqlite:///{broken}")
    assert str(broken) in str(refused.value) and "move it aside" in str(refused.value)


def test_an_audit_into_a_broken_store_says_so_before_it_runs(tmp_path):
    from cli_invoke import invoke

    broken = tmp_path / "mlflow.db"
    broken.write_bytes(b"not a database\n" * 100)
    args = ["audit", "--dataset", "german", "--output-dir", str(tmp_path / "out"),
            "--tracking-uri", f"sqlite:///{broken}"]  # fmt: skip
    done = invoke(args, env={"COLUMNS": "300"})
    assert done.exit_code == 1, done.output
    assert "MLflow store unusable (nothing was run)" in done.output
    assert str(broken) in "".join(done.output.split())  # however the console wraps it
    assert not list((tmp_path / "out").glob("*"))
