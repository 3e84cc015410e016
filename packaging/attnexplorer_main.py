"""The bundle's entry point: the same as the ``attnexplorer`` console script."""

import sys

from attnexplorer.cli import main

if __name__ == "__main__":
    sys.exit(main())
