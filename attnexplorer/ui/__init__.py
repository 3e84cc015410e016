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


def _read_sources_cheaply() -> None:
    """Make PySide6's import hook answer from the bytes of a module's file.

    Once PySide6 is imported, it asks of every module imported afterwards whether its source
    mentions "PySide6" (``shibokensupport.feature._mod_uses_pyside``, for its opt-in
    ``__feature__`` switches) through ``inspect.getsource``: the file is read, decoded, split
    into lines and kept in ``linecache``. torch's import on the compute thread brings in some
    880 modules after PySide6: 0.13-0.2 s of that thread's processor time, on the way to the
    first result, and 16 MB of their source text kept; the window's own modules, pyqtgraph's
    and our own, some 50 ms more before the first paint. The same question answered from the
    file's bytes gives the same answer (the name is ASCII, source files an ASCII-compatible
    encoding) at a fraction of the cost; anything that is not a plain ``.py`` file on disk
    still goes the hook's own way. A PySide6 without that hook is left as it is.
    """
    try:
        import PySide6  # noqa: F401 - its import installs the hook (a window imports it next anyway)
    except ImportError:
        return  # the first Qt import says what is missing
    feature = sys.modules.get("shibokensupport.feature")
    original = getattr(feature, "_mod_uses_pyside", None)
    if original is None or getattr(original, "reads_bytes", False):
        return

    def uses_pyside(module) -> bool:
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            try:
                with open(path, "rb") as source:
                    return b"PySide6" in source.read()
            except OSError:
                pass
        return original(module)

    uses_pyside.reads_bytes = True
    feature._mod_uses_pyside = uses_pyside


_read_sources_cheaply()
