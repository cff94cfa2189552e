"""``python -m fairpca.flows ...`` runs the ``fairpca`` command line."""

from fairpca.flows.entry import main

if __name__ == "__main__":
    main()
