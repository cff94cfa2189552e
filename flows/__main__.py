"""``python -m flows ...`` runs the ``fairpca`` command line."""

from flows.entry import main

if __name__ == "__main__":
    main()
