"""Prefect tasks of the fairness audit: data, representations, sweep, evaluation, report and
MLflow logging. Import the submodules (``tasks.data``, ``tasks.sweep``, ...) directly.

For your own flows use :mod:`tasks.public` (stable names and signatures); the MLflow evaluator
``fairness`` is :mod:`tasks.mlflow_evaluator`."""
