"""``python -m attnexplorer`` is the same as the ``attnexplorer`` command."""

from .cli import run

run()
