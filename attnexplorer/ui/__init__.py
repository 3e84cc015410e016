"""The Qt user interface (the only package that imports PySide6 and pyqtgraph).

Importing it first protects the process from a reference-count bug: under PySide6 6.12 on
CPython 3.10/3.11, every call of a Qt method that returns ``void`` (``painter.setPen``,
``rect.setWidth``, ...) drops one reference to ``None`` that it never took. On 3.12+ ``None``
is immortal (PEP 683) and nothing happens; before that, after some tens of thousands of such
calls (pyqtgraph makes several per point when it draws a scatter plot for export) ``None``'s
count reaches zero and Python aborts with "Fatal Python error: none_dealloc". Giving ``None``
the same huge reference count 3.12 gives it makes the lost references harmless.
"""

import sys


def _make_none_immortal() -> None:
    import platform

    if sys.version_info >= (3, 12) or platform.python_implementation() != "CPython":
        return
    if hasattr(sys, "getobjects"):  # a trace-refs debug build lays objects out differently
        return
    import ctypes

    # ob_refcnt is the first field of every CPython object; id() is the object's address.
    refcount = ctypes.c_ssize_t.from_address(id(None))
    if refcount.value < 1 << 40:
        refcount.value += 1 << 40


_make_none_immortal()
