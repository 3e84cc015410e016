"""``attnexplorer.show(obj)``: open the desktop window on a session, a result, a session file or
a model layer (``model.layer_session(run, L)``'s dict) from a notebook, without blocking it.

The window runs in a process of its own (``python -m attnexplorer FILE``): a notebook's kernel
has no Qt event loop to share, and a window there would stop the kernel until it closed. What
is shown is checked first, here, so that a bad object is an AttnExplorerError in the notebook
rather than a window that never comes; an object that is not a file is written as a session
file in a temporary folder of its own, which the window then opens (and autosaves as usual).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..core.compute.engine import AttentionResult
from ..core.errors import AttnExplorerError
from ..core.inputs.session import Session
from ..io.session_file import load_session, save_session, session_from_dict


def _as_file(obj) -> Path:
    if isinstance(obj, (str, os.PathLike)):
        load_session(obj)   # refused here, in the notebook, if it is not a session file
        return Path(obj).resolve()
    if isinstance(obj, AttentionResult):
        obj = obj.session
    elif isinstance(obj, dict):
        obj = session_from_dict(obj, "the session given to show()")
    if not isinstance(obj, Session):
        raise AttnExplorerError(f"show() opens a Session, an AttentionResult, a session dict (a model layer's) "
                                f"or a session file, not {type(obj).__name__}")
    folder = Path(tempfile.mkdtemp(prefix="attnexplorer-show-"))
    path = folder / "session.json"
    save_session(obj, path)
    return path


def show(obj, *, launch=subprocess.Popen):
    """Open the window on ``obj`` in a new process and return at once (the process handle)."""
    path = _as_file(obj)
    return launch([sys.executable, "-m", "attnexplorer", str(path)], stdin=subprocess.DEVNULL,
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
