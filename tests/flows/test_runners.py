"""Task runners: the flows choose them in one place, and Dask workers report to this
process's Prefect API instead of starting temporary servers of their own."""

from __future__ import annotations

import os

import pytest


def test_workers_get_the_api_this_process_uses(prefect_harness):
    from prefect.settings import PREFECT_API_URL

    from fairpca.flows.runners import worker_environment

    assert PREFECT_API_URL.value().startswith("http://127.0.0.1:")
    assert worker_environment() == {"PREFECT_API_URL": PREFECT_API_URL.value()}


@pytest.mark.slow
def test_without_an_api_the_workers_get_this_process_temporary_server():
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from fairpca.flows.runners import worker_environment

    server = SubprocessASGIServer()  # the process's one temporary server (a harness's too)
    was_running = server.running
    try:
        with temporary_settings(restore_defaults={PREFECT_API_URL}):
            assert not PREFECT_API_URL.value()
            environment = worker_environment()
        assert server.running
        assert environment == {"PREFECT_API_URL": server.api_url}
    finally:
        if not was_running:
            server.stop()


@pytest.mark.slow
def test_tasks_on_a_local_dask_cluster_are_recorded_by_this_process_api(prefect_harness):
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL

    from fairpca.flows.runners import task_runner_for

    @task
    def where(i: int) -> tuple[int, str | None]:
        return os.getpid(), os.environ.get("PREFECT_API_URL")

    @flow(task_runner=task_runner_for("local"))
    def on_dask() -> list:
        return [future.result() for future in where.map(range(4))]

    state = on_dask(return_state=True)
    answers = state.result()
    pids = {pid for pid, _ in answers}
    assert os.getpid() not in pids  # the tasks ran in the worker processes
    assert {url for _, url in answers} == {PREFECT_API_URL.value()}
    # A worker with a server of its own would have recorded its task runs there instead.
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    assert sorted(run.name.split("-")[0] for run in runs) == ["where"] * 4
    assert all(run.state.is_completed() for run in runs)


def test_a_flow_on_threads_hands_a_dask_address_to_one_subflow(prefect_harness):
    from prefect import flow
    from prefect_dask import DaskTaskRunner

    from fairpca.flows.runners import dask_subflow, task_runner_for

    @flow(task_runner=task_runner_for(None))
    def audit_like(address):
        return dask_subflow(audit_like, address)

    assert audit_like(None) is None
    subflow = audit_like("tcp://127.0.0.1:8786")
    assert isinstance(subflow.task_runner, DaskTaskRunner)
    assert subflow.task_runner.address == "tcp://127.0.0.1:8786"
