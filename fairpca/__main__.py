"""``python -m fairpca ...`` runs the ``fairpca`` command line (flows.cli, loaded lazily so
that importing fairpca never imports Prefect or MLflow)."""


def main() -> None:
    from flows.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
