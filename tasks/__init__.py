"""Prefect tasks of the fairness audit: data, representations, sweep, evaluation, report and
MLflow logging. The repository folder ``tasks/`` installs as ``fairpca.tasks``; import the
submodules (``fairpca.tasks.data``, ``fairpca.tasks.sweep``, ...) directly.

For your own flows use :mod:`fairpca.tasks.public` (stable names and signatures); the MLflow
evaluator ``fairness`` is :mod:`fairpca.tasks.mlflow_evaluator`."""
