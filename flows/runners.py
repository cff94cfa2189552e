"""Task runners for the flows: threads by default, Dask when the config names a cluster."""

from __future__ import annotations

from prefect.task_runners import ThreadPoolTaskRunner

LOCAL = "local"


def task_runner_for(dask_address: str | None):
    """The Prefect task runner for ``AuditConfig.dask_address``.

    ``None`` gives the flows' thread pool; ``"local"`` a temporary ``LocalCluster`` (two
    single-threaded workers, matching a 2-core machine, that report to this process's
    Prefect API, see :func:`worker_environment`); any other value is the address of a
    running ``dask.distributed`` scheduler (``tcp://host:8786``). The workers need fairpca
    (with ``tasks`` and ``flows``) installed, must reach the MLflow tracking URI and, on a
    remote cluster, have ``PREFECT_API_URL`` set to a Prefect server that this process uses
    too (a temporary server on 127.0.0.1 is not reachable from other machines).
    """
    if dask_address is None:
        return ThreadPoolTaskRunner(max_workers=2)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as error:  # pragma: no cover - the dask extra is part of dev
        raise ImportError(
            "dask_address needs prefect-dask: pip install 'fairpca[dask]'."
        ) from error
    if dask_address == LOCAL:
        cluster = {"n_workers": 2, "threads_per_worker": 1, "env": worker_environment()}
        return DaskTaskRunner(cluster_kwargs=cluster)
    return DaskTaskRunner(address=dask_address)


def worker_environment() -> dict[str, str]:
    """Environment for the worker processes of a local cluster: the Prefect API this process
    talks to, so that the workers report their task runs to it.

    A worker process inherits ``os.environ``, not this process's Prefect settings: without
    ``PREFECT_API_URL`` each worker would start a temporary Prefect server of its own (and
    record its task runs there). A temporary server of this process counts: the URL is the
    one its client uses. Empty when there is no API and none may be started.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    url = PREFECT_API_URL.value()
    if not url and PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        url = str(get_client(sync_client=True).api_url).rstrip("/")  # the temporary server
    return {"PREFECT_API_URL": url} if url else {}


def current_task_runner_name() -> str | None:
    """Class name of the running flow's task runner (``None`` outside a flow run)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    return None if runner is None else type(runner).__name__


def needs_dask_subflow(dask_address: str | None) -> bool:
    """Whether a flow run must hand its work to a Dask subflow to honour ``dask_address``
    (it does unless the run is on Dask already, or no address is given)."""
    return dask_address is not None and current_task_runner_name() != "DaskTaskRunner"


def dask_subflow(flow_fn, dask_address: str | None):
    """The one place that puts a flow on the task runner its config asks for.

    A flow's task runner is fixed when its run starts, and every run (the ``fairpca`` CLI, a
    deployment, a direct call) starts on the flow's thread pool. Each flow calls this first:
    with a ``dask_address`` it gets ``flow_fn`` on :func:`task_runner_for` and returns what
    that subflow returns; ``None`` means the run does its work itself (no address, or it
    is that subflow).
    """
    if not needs_dask_subflow(dask_address):
        return None
    return flow_fn.with_options(task_runner=task_runner_for(dask_address))
