"""The documented bounds of a session (README, "Session files").

They keep a hostile or mistaken file from asking for gigabytes, while leaving room for the
16,384-token sessions that the streamed path for long inputs (core/long) computes without
holding n × n per head. The session and its mask check against them, and so do session
files and the window's forms.
"""

from __future__ import annotations

import numpy as np

MAX_TOKENS = 16384
MAX_DIM = 1024  # d, d_k, d_v and d_out
MAX_HEADS = 64
MAX_TOKEN_CHARS = 200


def is_whole(v) -> bool:
    """An int (numpy ints too), but not a bool: True is not a window size or a position."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
