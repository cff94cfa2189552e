"""Prefect tasks of the fairness audit: data, representations, sweep, evaluation, report and
MLflow logging. Import the submodules (``tasks.data``, ``tasks.sweep``, ...) directly."""
