"""Prefect flows of fairpca (``flows.audit.fairness_audit``, ``flows.retrain.retrain``) and the
``fairpca`` command line (``flows.cli``). Submodules are imported on use to keep start-up fast."""
