"""The result a session shows in a notebook (``Session._repr_svg_`` / ``_repr_png_``): its
weights computed in float32, or nothing for a session too large to compute just to be displayed
(the text repr then shows instead)."""

from __future__ import annotations

from ..compute.engine import compute
from ..errors import AttnExplorerError

# heads × n × n_k cells above which a session is not computed for display (a 1,024-token
# session of 4 heads; a long session is far above it)
MAX_DISPLAY_CELLS = 4 * 1024 * 1024


def session_result(session):
    if session.heads * session.n * session.n_keys > MAX_DISPLAY_CELLS:
        return None
    try:
        return compute(session)
    except AttnExplorerError:
        return None
