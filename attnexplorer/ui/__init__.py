"""The Qt user interface (the only package that imports PySide6 and pyqtgraph).

Importing it refuses the one known-bad pairing up front: PySide6 6.12.0 on CPython 3.10/3.11
drops a reference to ``None`` on every call of a Qt method that returns ``void`` (and to
``True`` on every ``signal.emit()``), and after some thousands of calls Python aborts
("Fatal Python error: none_dealloc"). pyproject.toml excludes that release on those Pythons;
an environment that has it anyway gets one line naming what to install instead of a crash
minutes later (``cli.main`` prints it and exits with status 2).
"""

import sys

# numpy before any of PySide6: once PySide6 is imported its import hook reads the source of
# every module that imports anything afterwards (to see whether it uses PySide6's
# ``__feature__`` switches), and numpy's hundred-odd modules then cost some 60 ms of CPU before
# the window's first paint. Every window needs numpy anyway (its tables hold numpy arrays).
import numpy  # noqa: F401

from ..core.errors import AttnExplorerError

BAD_PYSIDE6 = "6.12.0"


def _refuse_known_bad_binding() -> None:
    if sys.version_info >= (3, 12):
        return  # None and True are immortal there: the lost references are harmless
    try:
        import PySide6
    except ImportError:
        return  # the first Qt import says what is missing
    if getattr(PySide6, "__version__", "") == BAD_PYSIDE6:
        import platform

        raise AttnExplorerError(
            f"PySide6 {BAD_PYSIDE6} crashes on Python {platform.python_version()}; install another version "
            f"(python3 -m pip install 'PySide6-Essentials!={BAD_PYSIDE6}') or use Python 3.12 or newer")


_refuse_known_bad_binding()
