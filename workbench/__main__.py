"""``python -m workbench …``: the ``workbench`` command line (``workbench.cli.main``)."""

from workbench.cli import main

if __name__ == "__main__":
    main()
