"""``python -m kftrain.cli ARGS`` runs the ``kftrain`` command."""

import sys

from kftrain.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
