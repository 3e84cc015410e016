"""The documented bounds of a session (README, "Session files").

They keep a hostile or mistaken file from asking for gigabytes, while leaving room for the
16,384-token sessions that the streamed path for long inputs (core/compute/long) computes without
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


# Bounds of the stage settings whose extremes make NaN or a silently wrong number (README,
# "Session files"). Below 1, RoPE's θ and the sinusoidal base turn the higher pairs faster than
# the first (no model does), and a denormal one made θ^(−2i/d) infinite and every angle NaN. An
# eps below 1e-20 rounds to zero in float32 (and 1e-8 in float16, which the norm runs in float32
# for that reason): then a row of zeros is 0 / √0, NaN. Above 1e10 eps swamps any row float32 holds.
MIN_FREQUENCY_BASE = 1.0
MIN_NORM_EPS = 1e-20
MAX_NORM_EPS = 1e10

BOUNDS = {
    "positions.theta": (MIN_FREQUENCY_BASE, None, "RoPE's θ"),
    "positions.base": (MIN_FREQUENCY_BASE, None, "the sinusoidal base"),
    "norm.eps": (MIN_NORM_EPS, MAX_NORM_EPS, "the norm's eps"),
}


def bound_problem(where: str, value: float) -> str | None:
    """Why ``value`` is out of ``BOUNDS[where]`` (one phrase), or None when it is within them."""
    low, high, what = BOUNDS[where]
    if high is None:
        if value < low:
            return f"is {value!r}; {what} must be at least {low:g}"
        return None
    if not low <= value <= high:
        return f"is {value!r}; {what} must be from {low:g} to {high:g}"
    return None
