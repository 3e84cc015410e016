"""How a result or a session shows itself in a notebook: the weights heatmap of one head with
its token labels, as SVG (``_repr_svg_``) or, for front-ends without SVG, as PNG (``_repr_png_``,
the cells alone). No JavaScript and no widget library, so it shows in Jupyter Notebook,
JupyterLab, VS Code and a static HTML export alike (issue 27, item 23).

Pure Python and numpy: the SVG is written as text, the PNG encoded with zlib. Colours are the
viridis map the window uses (0 … 1, dark purple to yellow); a blocked cell is grey. A matrix
larger than ``MAX_CELLS`` a side is max-pooled down to it (the heading says so), and labels are
written only where they fit (up to ``MAX_LABELS``).
"""

from __future__ import annotations

import struct
import zlib
from html import escape

import numpy as np

MAX_CELLS = 128
MAX_LABELS = 40
CELL_PX = 22
# viridis at 0, 1/8, … 1 (matplotlib's table at those points), interpolated between
_VIRIDIS = np.array([
    (68, 1, 84), (71, 44, 122), (59, 81, 139), (44, 113, 142), (33, 144, 141),
    (39, 173, 129), (92, 200, 99), (170, 220, 50), (253, 231, 37)], dtype=np.float64)
BLOCKED = (200, 200, 200)


def viridis(values: np.ndarray) -> np.ndarray:
    """(…, 3) uint8 colours of ``values`` in 0 … 1 (clipped)."""
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    low = np.minimum(np.floor(v).astype(int), len(_VIRIDIS) - 2)
    t = (v - low)[..., None]
    return np.round(_VIRIDIS[low] * (1 - t) + _VIRIDIS[low + 1] * t).astype(np.uint8)


def _pooled(weights: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    n, m = weights.shape
    fy, fx = max(1, -(-n // MAX_CELLS)), max(1, -(-m // MAX_CELLS))
    if fy == 1 and fx == 1:
        return weights, blocked, 1, 1
    rows, cols = -(-n // fy), -(-m // fx)
    padded = np.full((rows * fy, cols * fx), -np.inf)
    padded[:n, :m] = np.where(blocked, -np.inf, weights)
    pooled = padded.reshape(rows, fy, cols, fx).max(axis=(1, 3))
    return np.where(np.isinf(pooled), 0.0, pooled), np.isinf(pooled), fy, fx


def _matrix(result, head: int):
    weights = np.asarray(result.weights[head], dtype=np.float64)
    mask = result.mask
    blocked = np.asarray(mask[:, :] if mask is not None else np.zeros(weights.shape, bool), dtype=bool)
    return _pooled(weights, blocked)


def weights_svg(result, head: int = 0) -> str:
    """The SVG of head ``head``'s weights: queries down, keys across, token labels, a title."""
    cells, blocked, fy, fx = _matrix(result, head)
    rows, cols = cells.shape
    queries, keys = list(result.tokens), list(result.key_tokens)
    labelled = fy == 1 and fx == 1 and max(rows, cols) <= MAX_LABELS
    size = CELL_PX if labelled else max(3, min(CELL_PX, 600 // max(rows, cols)))
    longest = max((len(t) for t in queries + keys), default=1) if labelled else 0
    left, top = (12 + 7 * min(longest, 16), 34) if labelled else (10, 34)
    bottom = 10 + 7 * min(longest, 16) if labelled else 10
    width, height = left + cols * size + 10, top + rows * size + bottom
    colours = viridis(cells)
    title = f"weights — head {head}" + ("" if fy == fx == 1 else f" — max-pooled, {fy}×{fx} cells a cell")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>']
    for i in range(rows):
        for j in range(cols):
            r, g, b = BLOCKED if blocked[i, j] else colours[i, j]
            out.append(f'<rect x="{left + j * size}" y="{top + i * size}" width="{size}" height="{size}" '
                       f'fill="rgb({r},{g},{b})"><title>{escape(_cell_title(queries, keys, i, j, cells, blocked, fy, fx))}'
                       '</title></rect>')
    if labelled:
        for i, token in enumerate(queries):
            out.append(f'<text x="{left - 4}" y="{top + i * size + size * 0.7:.1f}" text-anchor="end">'
                       f'{escape(_short(token))}</text>')
        for j, token in enumerate(keys):
            x, y = left + j * size + size * 0.65, top + rows * size + 4
            out.append(f'<text transform="translate({x:.1f},{y}) rotate(90)">{escape(_short(token))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _short(token: str) -> str:
    return token if len(token) <= 16 else token[:15] + "…"


def _cell_title(queries, keys, i, j, cells, blocked, fy, fx) -> str:
    if fy == fx == 1:
        where = f"{queries[i]} → {keys[j]}"
    else:
        where = f"queries {i * fy}–{min((i + 1) * fy, len(queries)) - 1}, keys {j * fx}–{min((j + 1) * fx, len(keys)) - 1}"
    return f"{where}: blocked" if blocked[i, j] else f"{where}: {cells[i, j]:.4f}"


def weights_png(result, head: int = 0) -> bytes:
    """The PNG of head ``head``'s weights, the cells alone (at most about 512 pixels a side)."""
    cells, blocked, _fy, _fx = _matrix(result, head)
    rows, cols = cells.shape
    scale = max(1, min(CELL_PX, 512 // max(rows, cols)))
    rgb = viridis(cells)
    rgb[blocked] = BLOCKED
    image = np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)
    return encode_png(image)


def encode_png(rgb: np.ndarray) -> bytes:
    """An (h, w, 3) uint8 image as PNG bytes (8-bit RGB, no filter)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
