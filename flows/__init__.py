"""Prefect flows of fairpca (``fairpca.flows.audit.fairness_audit``,
``fairpca.flows.retrain.retrain``) and the ``fairpca`` command line (``fairpca.flows.cli``).
The repository folder ``flows/`` installs as ``fairpca.flows``. Submodules are imported on use
to keep start-up fast."""
