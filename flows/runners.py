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


def check_task_runner(dask_address: str | None) -> None:
    """Warn in the flow run's log when ``dask_address`` is set but tasks run on threads.

    A flow's task runner is fixed when the run starts: the ``fairpca`` CLI applies
    ``dask_address`` with ``flow.with_options(task_runner=task_runner_for(...))``; a deployment
    or a direct call of the flow must do the same, and this says so instead of silently
    running on threads.
    """
    if dask_address is None:
        return
    from prefect import get_run_logger
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    if runner is not None and type(runner).__name__ != "DaskTaskRunner":
        get_run_logger().warning(
            "dask_address=%r is set but this flow run uses %s: start it with "
            "flow.with_options(task_runner=flows.runners.task_runner_for(%r)) or through the "
            "fairpca CLI to run the tasks on Dask.",
            dask_address,
            type(runner).__name__,
            dask_address,
        )
