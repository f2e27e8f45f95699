"""``python -m hive.sidecar.cli``: the CLI where no ``hive`` script is on PATH (configs written by setup use it)."""

import sys

from .main import main

if __name__ == "__main__":
    sys.exit(main())
