"""The Qt user interface (the only package that imports PySide6 and pyqtgraph).

Importing it first protects the process from reference-count bugs of PySide6 6.12.0 on
CPython 3.10/3.11: every call of a Qt method that returns ``void`` (``painter.setPen``,
``rect.setWidth``, ...) drops one reference to ``None`` that it never took, and every
``signal.emit()`` from Python drops one reference to ``True``. On 3.12+ both are immortal
(PEP 683) and nothing happens; before that, after some thousands of such calls (pyqtgraph makes
several per point when it exports a scatter plot) the count reaches zero and Python aborts
("Fatal Python error: none_dealloc" / "bool_dealloc"). pyproject.toml excludes that release on
those Pythons; for an environment that has it anyway, giving ``None`` and ``True`` the same
huge reference count 3.12 gives them makes the lost references harmless.
"""

import sys


def _make_singletons_immortal() -> None:
    import platform

    if sys.version_info >= (3, 12) or platform.python_implementation() != "CPython":
        return
    if hasattr(sys, "getobjects"):  # a trace-refs debug build lays objects out differently
        return
    import ctypes

    # ob_refcnt is the first field of every CPython object; id() is the object's address.
    for singleton in (None, True):
        refcount = ctypes.c_ssize_t.from_address(id(singleton))
        if refcount.value < 1 << 40:
            refcount.value += 1 << 40


_make_singletons_immortal()
