"""The arithmetic behind the model view and the head view, Qt-free and tested without a display.

- ``head_colours(H)``: one distinct colour per head (the head view's "all heads").
- ``head_lines(weights, head, hover)``: the lines the head view draws between a query (left)
  and a key (right): their alpha is the weight (what BertViz users know); with all heads, each
  head's lines in its colour at the weight divided among the heads would vanish, so each keeps
  its own weight and the drawing order puts the strongest on top. Hovering a token keeps only
  the lines that touch it. Lines fainter than ``floor`` are left out: they would cost drawing
  time and show nothing.
- ``max_difference(a, b)`` and ``badge_text``: how far an edited layer is from the model.
- ``long_differences`` and ``long_badge_text``: the same for a long run, which keeps no n × n
  weights: the tables' attention output on the queries the run kept, and each query's
  log Σ exp(score) (which, with the scores, fixes every weight of its row) when the tables were
  computed the streamed way.
"""

from __future__ import annotations

import colorsys

import numpy as np


def head_colours(count: int) -> list[tuple[int, int, int]]:
    """Evenly spaced hues at one saturation and value, so no head stands out by brightness."""
    out = []
    for h in range(count):
        r, g, b = colorsys.hsv_to_rgb((h / max(count, 1) + 0.58) % 1.0, 0.75, 0.85)
        out.append((int(r * 255), int(g * 255), int(b * 255)))
    return out


def head_lines(weights: np.ndarray, head: int | None, hover: tuple[str, int] | None = None,
               floor: float = 0.01) -> np.ndarray:
    """Rows (head, query, key, alpha) to draw, weakest first, for ``weights`` of shape (H, n, n).

    ``head`` None means every head. ``hover`` is ("query", i) or ("key", j) or None.
    """
    w = np.asarray(weights, dtype=np.float64)
    heads = range(w.shape[0]) if head is None else [head]
    rows = []
    for h in heads:
        q, k = np.nonzero(w[h] >= floor)
        a = w[h][q, k]
        if hover is not None:
            side, index = hover
            keep = (q == index) if side == "query" else (k == index)
            q, k, a = q[keep], k[keep], a[keep]
        rows.append(np.column_stack([np.full(len(q), h), q, k, a]))
    lines = np.concatenate(rows) if rows else np.zeros((0, 4))
    return lines[np.argsort(lines[:, 3], kind="stable")]


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over all entries, ignoring cells both sides block (NaN or the same inf)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.nanmax(np.abs(a - b))) if a.size else 0.0


def _short(x: float) -> str:
    """2e-07 → 2e-7: the way people write it."""
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


# Above the tolerance but below this, the tables are the model's layer with float32 rounding
# the check does not allow for (issue 27, item 6: a 793-token Llama text came out 8.1e-5 from
# the model because the engine turns RoPE by angles made in float64 and the model by float32
# ones), not an edit: the badge says which, rather than calling it "edited".
ROUNDING = 1e-3


def badge_text(difference: float, tolerance: float = 1e-5) -> str:
    """The badge under the tables: how close the current weights are to the model's, and to
    what tolerance that was judged."""
    if difference <= tolerance:
        return f"matches the model: max |Δ| = {_short(difference)} (checked to {_short(tolerance)})"
    if difference == float("inf"):
        return "edited: the shape no longer matches the model's layer"
    if difference <= ROUNDING:
        return (f"near the model but not within {_short(tolerance)}: weights max |Δ| = {difference:.2g} "
                "(float32 rounding, e.g. of RoPE's angles on a long text)")
    return f"edited: differs from the model by up to {difference:.3g} (weights)"


def grid_layout(layers: int, heads: int, width: float, height: float, label_width: float, label_height: float,
                gap: float, min_cell: int, max_cell: int) -> tuple[int, int]:
    """(bands, cell) for the model view: the layers folded into ``bands`` side-by-side columns
    (layers 0…k−1 in the first, k… in the next), each with its own layer labels, and the
    thumbnails' side in pixels.

    The fold that gives the largest thumbnails while every layer × head fits the room wins
    (fewer bands on a tie, so a model that fits in one column reads top to bottom): SmolLM2's
    30 × 9 fits a 1280×800 window in two bands of 15 layers at 40 px, where one band showed
    half the layers and left two thirds of the width empty. When nothing fits at ``min_cell``
    (smaller shows no pattern), the widest fold at ``min_cell`` is taken and the rest scrolls.
    """
    if layers <= 0 or heads <= 0:
        return 1, min_cell
    best: tuple[int, float] | None = None
    widest = 1
    for bands in range(1, layers + 1):
        rows = -(-layers // bands)
        if bands > 1 and -(-layers // (bands - 1)) == rows:
            continue   # as many rows as one band fewer: only wider
        cell_w = (width - bands * label_width - gap) / (heads * bands) - gap
        cell_h = (height - label_height - gap) / rows - gap
        if cell_w >= min_cell:
            widest = bands
        cell = min(cell_w, cell_h, max_cell)
        if cell >= min_cell and (best is None or cell > best[1]):
            best = (bands, cell)
    if best is None:
        return widest, min_cell
    return best[0], int(best[1])


def long_differences(run, layer: int, output: np.ndarray | None, log_sum_exp: np.ndarray | None) -> dict:
    """How far the tables are from a long run's ``layer``: ``output`` (max |Δ| of the attention
    output on ``run.output_rows``) and ``output_scale`` (the model's largest |output| there);
    ``lse`` (max |Δ| of each query's log Σ exp, None when not given) and ``lse_scale``."""
    reference = np.asarray(run.attention_outputs[layer], dtype=np.float64)
    found = {"output": float("inf"), "output_scale": float(np.abs(reference).max()) if reference.size else 0.0,
             "lse": None, "lse_scale": 0.0, "rows": reference.shape[0]}
    if output is not None:
        rows = run.output_rows if run.output_rows is not None else slice(None)
        found["output"] = max_difference(np.asarray(output, dtype=np.float64)[rows], reference)
    if log_sum_exp is not None and run.log_sum_exp is not None:
        a, b = np.asarray(log_sum_exp, dtype=np.float64), np.asarray(run.log_sum_exp[layer], dtype=np.float64)
        if a.shape != b.shape or (np.isfinite(a) != np.isfinite(b)).any():
            found["lse"] = float("inf")
        else:
            both = np.isfinite(a)
            found["lse"] = float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0
            found["lse_scale"] = float(np.abs(b[both]).max()) if both.any() else 0.0
    return found


# float32 sums over thousands of keys and hundreds of dimensions agree to about 1e-5 of the
# values' size (SmolLM2, 4,096 tokens, layer 12: 1.6e-4 on outputs up to about 20); an edit
# moves them by far more.
LONG_TOLERANCE = 1e-4


def long_badge_text(found: dict) -> str:
    """The badge for a long run, from ``long_differences``."""
    out, lse = found["output"], found["lse"]
    if out == float("inf") or lse == float("inf"):
        return "edited: the shape no longer matches the model's layer"
    out_ok = out <= LONG_TOLERANCE * max(1.0, found["output_scale"])
    lse_ok = lse is None or lse <= LONG_TOLERANCE * max(1.0, found["lse_scale"])
    if out_ok and lse_ok:
        text = f"matches the model: attention output max |Δ| = {_short(out)} on {found['rows']:,} queries"
        if lse is not None:
            text += f", every row's log Σ exp max |Δ| = {_short(lse)}"
        return text + f" (checked to {_short(LONG_TOLERANCE)} of the values' size)"
    text = f"edited: the attention output differs from the model's by up to {out:.3g}"
    if not lse_ok:
        text += f", the rows' normalisers by up to {lse:.3g}"
    return text
