"""torch's shared libraries loaded ahead of ``import torch``, off Python's lock: ``preload()``.

The window's first compute imports torch on the compute's thread after the first paint, and
every panel waits for it. Part of that import is the dynamic loader mapping torch's C++
libraries (libtorch_cpu alone is over 400 MB) and running their static initialisers (the
registration of every operator): about 0.2-0.3 s of processor time, all of it with Python's
lock held, because the import machinery calls ``dlopen`` under the lock (ctypes' own
``CDLL`` does too). Called through ctypes as a foreign function, ``dlopen`` runs without
the lock, so the window's thread keeps building on the other core meanwhile; the later
``import torch`` finds the libraries loaded and only counts a reference (measured in a
fresh process: the compute thread's import 1.56 -> 1.32 s of processor time).

The libraries are loaded as torch itself loads them, in the same order with the same flags
(``torch._load_global_deps``: ``libtorch_global_deps`` with ``RTLD_GLOBAL``; then its
extension module ``torch._C`` with Python's ``sys.getdlopenflags()``), so the process ends
in the same state. Only on Linux, and only for a CPU build: a CUDA build's import first
puts its own copies of the CUDA libraries in place of any others the loader could find
(``torch._preload_cuda_deps``), which loading ``torch._C`` ahead of it would defeat.
Anything unexpected (no torch, another layout, a loader error) loads nothing: the import
then does all of it, as it did before.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading

_started: threading.Thread | None = None


def _library_paths() -> list[str] | None:
    """The files to load, in order, or None where a preload does not apply."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    here = os.path.dirname(spec.origin)
    lib = os.path.join(here, "lib")
    try:
        names = os.listdir(lib)
    except OSError:
        return None
    if any(name.startswith(("libtorch_cuda", "libtorch_hip", "libcudart")) for name in names):
        return None  # a GPU build: its import orders the CUDA libraries itself
    global_deps = os.path.join(lib, "libtorch_global_deps.so")
    extension = next((os.path.join(here, "_C" + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES
                      if os.path.isfile(os.path.join(here, "_C" + suffix))), None)
    if extension is None or not os.path.isfile(global_deps):
        return None
    return [global_deps, extension]


def _load(paths: list[str]) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        dlopen = libc.dlopen
    except (OSError, AttributeError):
        return
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    # torch's own flags: ctypes.CDLL(global_deps, RTLD_GLOBAL) (ctypes adds RTLD_NOW), then
    # the import of torch._C with the interpreter's dlopen flags.
    modes = [os.RTLD_GLOBAL | os.RTLD_NOW, sys.getdlopenflags()]
    for path, mode in zip(paths, modes):
        if not dlopen(os.fsencode(path), mode):
            return  # torch's import will say what is wrong, as before
    # The handles are kept open on purpose: torch's import takes its own references.


def preload() -> threading.Thread | None:
    """Start loading torch's libraries on a thread of their own (once per process); the thread,
    or None when there is nothing to do (torch imported already, not a Linux CPU build)."""
    global _started
    if _started is not None or "torch" in sys.modules:
        return _started
    paths = _library_paths()
    if paths is None:
        return None
    # Not a daemon: an exit while it loads waits for it (under a second) rather than tearing
    # down the interpreter around a thread still inside the loader.
    _started = threading.Thread(target=_load, args=(paths,), name="attnexplorer-torch-libraries")
    _started.start()
    return _started
