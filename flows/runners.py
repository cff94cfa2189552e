"""Task runners for the flows: threads by default, Dask when the config names a cluster."""

from __future__ import annotations

from prefect.task_runners import ThreadPoolTaskRunner

LOCAL = "local"


def task_runner_for(dask_address: str | None):
    """The Prefect task runner for ``AuditConfig.dask_address``.

    ``None`` gives the flows' thread pool; ``"local"`` a temporary ``LocalCluster`` (two
    single-threaded workers, matching a 2-core machine); any other value is the address of a
    running ``dask.distributed`` scheduler (``tcp://host:8786``). The workers need fairpca
    (with ``tasks`` and ``flows``) installed and must reach the MLflow tracking URI.
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
        return DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1})
    return DaskTaskRunner(address=dask_address)


def current_task_runner_name() -> str | None:
    """Class name of the running flow's task runner (``None`` outside a flow run)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    return None if runner is None else type(runner).__name__


def needs_dask_subflow(dask_address: str | None) -> bool:
    """Whether a flow run must hand its work to a Dask subflow to honour ``dask_address``.

    A flow's task runner is fixed when its run starts. The ``fairpca`` CLI applies
    ``dask_address`` up front (``flow.with_options(task_runner=task_runner_for(...))``); a
    deployment run or a direct call starts on the flow's thread pool instead, and then runs
    the same flow once more as a subflow on :func:`task_runner_for` (see the flows).
    """
    return dask_address is not None and current_task_runner_name() != "DaskTaskRunner"
