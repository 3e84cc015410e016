"""``python -m attnexplorer`` is the same as the ``attnexplorer`` command."""

import sys

from .cli import main

sys.exit(main())
