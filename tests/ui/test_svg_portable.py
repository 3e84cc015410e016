"""Exported SVGs look the same outside Qt: rendered with cairosvg and compared with the PNG.

The reference is the PNG export of the same panel at the same size; the SVG is rendered by
cairosvg (no Qt involved). Compared: the mean colour of every 16 × 16 px block (catches a
blob over the data, a blur or a shift), the colour at every heatmap cell's centre, and the
text (tick labels and titles as ``<text>``, in a font stack every renderer resolves).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import cairosvg
import numpy as np
import pytest
from PySide6.QtGui import QImage

from attnexplorer.ui.exports import figure_batch, figures
from attnexplorer.ui.exports.svg_compat import FONT_STACK, portable_svg

SVG = "{http://www.w3.org/2000/svg}"


def _rgb(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    return np.frombuffer(bytes(image.constBits()), np.uint8).reshape(h, stride)[:, : 3 * w].reshape(h, w, 3)


def _cairo(svg_path, size) -> np.ndarray:
    png = cairosvg.svg2png(url=str(svg_path), output_width=size[0], output_height=size[1], background_color="white")
    image = QImage()
    assert image.loadFromData(png)
    return _rgb(image)


def _blocks(rgb: np.ndarray, side: int = 16) -> np.ndarray:
    h, w = (rgb.shape[0] // side) * side, (rgb.shape[1] // side) * side
    return rgb[:h, :w].reshape(h // side, side, w // side, side, 3).mean(axis=(1, 3))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.core.inputs.presets import build_preset

    figures.ensure_app()
    out = tmp_path_factory.mktemp("figs")
    built = build_preset("pronoun")
    # With the selection drawn: its frames are the strokes that became blobs outside Qt.
    figure_batch.export_figures(compute(built.session), out, ["png", "svg"], selection=True)
    return built, out / "figures"


@pytest.mark.parametrize("kind", ["weights", "scaled_scores", "qkv", "query", "output", "embedding_scatter",
                                  "dashboard"])
def test_cairosvg_draws_what_the_png_shows(exported, kind):
    _built, folder = exported
    png = QImage(str(folder / f"{kind}.png"))
    reference = _rgb(png).astype(float)
    drawn = _cairo(folder / f"{kind}.svg", (png.width(), png.height())).astype(float)
    blocks = np.abs(_blocks(drawn) - _blocks(reference)).max(axis=2)
    # cairo lays text out itself (a long bold title may end a few pixels off), so a block
    # holding text may differ somewhat; a blob, a blur or a missing heatmap moves many
    # blocks by far more.
    assert blocks.max() < 64, f"{kind}: a 16-px block differs by {blocks.max():.0f} (of 255)"
    assert (blocks > 24).mean() < 0.01, f"{kind}: {(blocks > 24).sum()} blocks differ visibly"
    assert blocks.mean() < 3, f"{kind}: mean block difference {blocks.mean():.1f}"


def test_heatmap_cells_have_the_png_colours_outside_qt(exported, qtbot):
    built, folder = exported
    png = QImage(str(folder / "weights.png"))
    drawn = _cairo(folder / "weights.svg", (png.width(), png.height()))
    reference = _rgb(png)
    # The cells' centres in pixels: from the SVG's own crisp-cell rects (one per cell).
    root = ET.parse(folder / "weights.svg").getroot()
    groups = [g for g in root.iter(f"{SVG}g") if g.get("shape-rendering") == "crispEdges"]
    assert len(groups) == 1
    rects = list(groups[0])
    n = built.session.n
    assert n * (n + 1) // 2 <= len(rects) <= n * n  # causal: the blocked cells are left to the hatch
    for rect in rects:
        x = float(rect.get("x")) + float(rect.get("width")) / 2
        y = float(rect.get("y")) + float(rect.get("height")) / 2
        # Sample beside the centre: the cell's number is written there.
        px, py = int(x), int(y + float(rect.get("height")) * 0.35)
        assert np.abs(drawn[py, px].astype(int) - reference[py, px].astype(int)).max() <= 12, (x, y)


def test_text_is_vector_text_in_a_portable_font(exported):
    built, folder = exported
    for kind in ("weights", "qkv", "dashboard"):
        root = ET.parse(folder / f"{kind}.svg").getroot()
        texts = ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")]
        assert any("Attention weights" in t or "Queries" in t or "pronoun" in t for t in texts), kind
        for token in set(built.session.tokens):
            assert token in texts, (kind, token)
        assert "query" in texts or "token" in texts  # the axis title is text, not a bitmap
        assert not list(root.iter(f"{SVG}image")), f"{kind}: a small figure embeds no bitmap"
        families = {el.get("font-family") for el in root.iter() if el.get("font-family")}
        assert families and all(f.endswith(FONT_STACK) for f in families), families
        assert "non-scaling-stroke" not in (folder / f"{kind}.svg").read_text()


def test_a_cosmetic_stroke_in_a_scaled_group_is_mapped_to_the_page():
    qt = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100"><g>'
          b'<g stroke="#ff8c00" stroke-width="2" transform="matrix(40,0,0,30,10,5)" font-family="Sans Serif">'
          b'<path vector-effect="non-scaling-stroke" d="M0,1 L2,1 L2,2 Z"/>'
          b'<polyline vector-effect="non-scaling-stroke" points="0,0 1,1 "/></g></g></svg>')
    root = ET.fromstring(portable_svg(qt))
    paths = list(root.iter(f"{SVG}path"))
    lines = list(root.iter(f"{SVG}polyline"))
    assert paths[0].get("d").split() == ["M10,35", "L90,35", "L90,65", "Z"]
    assert lines[0].get("points").split() == ["10,5", "50,35"]
    for el in paths + lines:
        assert el.get("vector-effect") is None
    parents = {c: p for p in root.iter() for c in p}
    group = parents[paths[0]]
    assert group.get("transform") is None and group.get("stroke-width") == "2"
    assert group.get("font-family") == FONT_STACK


def test_a_large_image_stays_an_image_but_pixelated():
    from PySide6.QtCore import QBuffer, QIODevice

    image = QImage(100, 100, QImage.Format.Format_ARGB32)
    image.fill(0xFF336699)
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    import base64

    href = "data:image/png;base64," + base64.b64encode(bytes(buffer.data())).decode()
    qt = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><g>'
          f'<image x="0" y="0" width="400" height="400" xlink:href="{href}"/></g></svg>').encode()
    root = ET.fromstring(portable_svg(qt))
    (kept,) = list(root.iter(f"{SVG}image"))
    assert "pixelated" in kept.get("style")
