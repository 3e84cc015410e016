"""Figure export: pixels, files and the look of one panel and of the dashboard.

The ``HeatmapPanel`` below is built like the real panels (a GraphicsLayoutWidget holding a
titled PlotItem with an ImageItem, token tick labels and a ColorBarItem), so the exporter is
checked on its own; ``test_real_panels_*`` run the same checks on the app's panels.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtGui import QImage

from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.inputs.session import Session
from attnexplorer.ui.exports import figure_batch, figures
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels.base import Panel
from ui_helpers import shown

TOKENS = ("the", "cat", "sat", "on", "mat")
# Five distinct values on a 0..1 scale: each becomes one clearly different colour.
MATRIX = np.array([[0.0, 0.25, 0.5, 0.75, 1.0]] * 5)


def make_session(n=5, d=4, heads=2, seed=0):
    rng = np.random.default_rng(seed)
    return Session(tokens=TOKENS[:n] if n <= 5 else tuple(f"t{i}" for i in range(n)),
                   embeddings=rng.normal(size=(n, d)), w_query=rng.normal(size=(heads, d, 3)),
                   w_key=rng.normal(size=(heads, d, 3)), w_value=rng.normal(size=(heads, d, 2)))


class HeatmapPanel(Panel):
    kind = "heat"
    title = "Attention weights"

    def __init__(self, document, matrix=MATRIX, title=None, show_title=True):
        if title:
            self.title = title
        super().__init__(document)
        self.canvas = pg.GraphicsLayoutWidget(self)
        self.canvas.setBackground("w")
        self.plot = self.canvas.addPlot(title=self.title if show_title else None)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setImage(matrix, autoLevels=False, levels=(0.0, 1.0))
        self.plot.addItem(self.image)
        self.plot.invertY(True)
        ticks = [[(i + 0.5, t) for i, t in enumerate(TOKENS[: matrix.shape[0]])]]
        self.plot.getAxis("left").setTicks(ticks)
        self.plot.getAxis("bottom").setTicks(ticks)
        self.bar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), values=(0, 1), interactive=False)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        from PySide6.QtWidgets import QVBoxLayout

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.canvas)

    def figure_item(self):
        return self.canvas.ci

    def redraw(self):
        pass


class TextPanel(Panel):
    kind = "explain"
    title = "Explain"

    def redraw(self):
        pass


@pytest.fixture
def doc(qtbot):
    d = SessionDocument(make_session())
    yield d
    d.shutdown()




def as_array(image: QImage) -> np.ndarray:
    """(h, w, 3) uint8 RGB of a QImage."""
    img = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h = img.width(), img.height()
    arr = np.frombuffer(img.constBits(), dtype=np.uint8, count=img.bytesPerLine() * h)
    return arr.reshape(h, img.bytesPerLine())[:, : w * 3].reshape(h, w, 3).copy()


def viridis(value):
    return np.array(pg.colormap.get("viridis").map(value, mode="byte")[:3], dtype=int)


# -- PNG ---------------------------------------------------------------------------------------
def test_png_matches_the_panel_on_screen(qtbot, doc):
    panel = shown(qtbot, HeatmapPanel(doc))
    screen = as_array(panel.canvas.grab().toImage())
    exported = as_array(figures.render_panel(panel))
    assert exported.shape == screen.shape
    diff = np.abs(exported.astype(int) - screen.astype(int)).mean()
    assert diff < 3.0, f"mean pixel difference {diff:.2f}"
    # and not trivially: an export of another matrix differs clearly from the screen
    other = shown(qtbot, HeatmapPanel(doc, matrix=MATRIX[::-1, ::-1].copy()))
    moved = as_array(figures.render_panel(other))
    assert np.abs(moved.astype(int) - screen.astype(int)).mean() > 3 * max(diff, 1.0)


def test_png_has_the_requested_pixel_size(qtbot, doc, tmp_path):
    panel = shown(qtbot, HeatmapPanel(doc))
    path = figures.export_panel(panel, tmp_path / "a.png", width=900, height=500)
    assert QImage(str(path)).size().toTuple() == (900, 500)
    path = figures.export_panel(panel, tmp_path / "b.png", scale=2)
    assert QImage(str(path)).size().toTuple() == (840, 640)
    path = figures.export_panel(panel, tmp_path / "c.png", width=210)
    assert QImage(str(path)).size().toTuple() == (210, 160)
    # the wide export was laid out again, and the screen layout came back unchanged
    assert panel.canvas.ci.geometry().size().toTuple() == (420.0, 320.0)


def test_heatmap_cells_are_solid_blocks_when_scaled(qtbot, doc):
    panel = shown(qtbot, HeatmapPanel(doc))
    scale = 3
    image = as_array(figures.render_panel(panel, scale=scale))
    rect = panel.image.sceneBoundingRect()  # the heatmap in logical px; 5 cells across
    cell_w, cell_h = rect.width() / 5 * scale, rect.height() / 5 * scale
    for col in range(5):
        x0 = int(rect.left() * scale + col * cell_w) + 2
        x1 = int(rect.left() * scale + (col + 1) * cell_w) - 2
        y0, y1 = int(rect.top() * scale) + 2, int(rect.top() * scale + cell_h) - 2
        block = image[y0:y1, x0:x1].reshape(-1, 3).astype(int)
        # one colour across the whole cell, right up to its edges: no blur between cells
        assert (block.max(axis=0) - block.min(axis=0)).max() <= 2, f"cell {col} is not one solid colour"
        assert np.abs(block[0] - viridis(MATRIX[0, col])).max() <= 3


def test_a_panel_without_a_visible_title_gets_one(qtbot, doc, tmp_path):
    titled = shown(qtbot, HeatmapPanel(doc))
    bare = shown(qtbot, HeatmapPanel(doc, title="Raw scores", show_title=False))
    assert figures.render_panel(titled).height() == 320
    image = figures.render_panel(bare)
    assert image.height() == 320 + figures.TITLE_BAND
    svg = figures.export_panel(bare, tmp_path / "bare.svg")
    assert "Raw scores" in texts_of(svg)


# -- SVG ---------------------------------------------------------------------------------------
def texts_of(svg_path) -> list[str]:
    root = ET.parse(svg_path).getroot()
    return ["".join(el.itertext()).strip() for el in root.iter() if el.tag.endswith("text")]


def test_svg_parses_and_holds_title_ticks_and_colorbar(qtbot, doc, tmp_path):
    panel = shown(qtbot, HeatmapPanel(doc))
    path = figures.export_panel(panel, tmp_path / "w.svg")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    texts = texts_of(path)
    assert "Attention weights" in texts
    for token in TOKENS:
        assert token in texts, token
    assert {"0", "1.0"} <= set(texts) or {"0.0", "1.0"} <= set(texts), texts  # colorbar values
    body = path.read_text()
    # colorbar strip as a vector gradient, and the heatmap a crisp 5x5 image
    assert "<linearGradient" in body
    # a 5×5 heatmap is 25 crisp rects (one per cell), not a smoothed embedded image
    assert not [el for el in root.iter() if el.tag.endswith("image")]
    crisp = [g for g in root.iter() if g.tag.endswith("g") and g.get("shape-rendering") == "crispEdges"]
    assert len(crisp) == 1 and len([r for r in crisp[0] if r.tag.endswith("rect")]) == 25
    # the vector swap is temporary: the on-screen colorbar keeps its pixmap strip
    assert panel.bar.bar.isVisible()


def test_svg_renders_like_the_png(qtbot, doc, tmp_path):
    """Qt's own SVG renderer draws the file like the PNG (axes in place, not shifted)."""
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgRenderer

    panel = shown(qtbot, HeatmapPanel(doc))
    path = figures.export_panel(panel, tmp_path / "w.svg")
    renderer = QSvgRenderer(str(path))
    image = QImage(420, 320, QImage.Format.Format_ARGB32)
    image.fill(0xFFFFFFFF)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    diff = np.abs(as_array(image).astype(int) - as_array(figures.render_panel(panel)).astype(int)).mean()
    assert diff < 6.0, f"mean pixel difference {diff:.2f}"


# -- PDF ---------------------------------------------------------------------------------------
def pdf_page_count(data: bytes) -> int:
    """Pages in a PDF by its page objects (Qt writes plain, uncompressed object headers)."""
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", data))


def test_pdf_opens_with_one_page_and_the_labels(qtbot, doc, tmp_path):
    panel = shown(qtbot, HeatmapPanel(doc))
    path = figures.export_panel(panel, tmp_path / "w.pdf")
    data = path.read_bytes()
    assert data.startswith(b"%PDF-")
    assert data.rstrip().endswith(b"%%EOF")
    assert pdf_page_count(data) == 1
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True).stdout
        assert "Attention weights" in text
        for token in TOKENS:
            assert token in text
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
        size = re.search(r"Page size:\s+([\d.]+) x ([\d.]+) pts", info)
        assert size and abs(float(size.group(1)) - 420 * 0.75) < 1 and abs(float(size.group(2)) - 320 * 0.75) < 1


# -- dashboard ---------------------------------------------------------------------------------
def test_dashboard_puts_every_panel_in_one_figure(qtbot, doc, tmp_path):
    panels = [shown(qtbot, HeatmapPanel(doc, title=f"Panel {k}", show_title=k != 2)) for k in range(4)]
    text_only = shown(qtbot, TextPanel(doc))
    path = figures.export_dashboard(panels + [text_only], tmp_path / "dash.svg", title="My session")
    texts = texts_of(path)
    for k in range(4):
        assert f"Panel {k}" in texts
    assert "My session" in texts
    png = QImage(str(figures.export_dashboard(panels, tmp_path / "dash.png", title="My session")))
    cell_w, cell_h = figures.FIGURE_SIZE
    assert png.size().toTuple() == (2 * cell_w, int(figures.DASHBOARD_HEADER) + 2 * cell_h)
    pdf = figures.export_dashboard(panels, tmp_path / "dash.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf_page_count(pdf) == 1
    # the panels are back at their screen size afterwards
    assert all(p.canvas.ci.geometry().size().toTuple() == (420.0, 320.0) for p in panels)


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"fmt": "gif"}, "format 'gif'"),
    ({"scale": 0}, "scale"),
    ({"scale": 2, "width": 10}, "not both"),
    ({"width": 0}, "width"),
    ({"width": 10, "height": 10**6}, "height"),
    ({"height": 16000}, "larger than"),  # keeps the shape: 21000 px wide
])
def test_bad_requests_are_refused_and_write_nothing(qtbot, doc, tmp_path, kwargs, words):
    panel = shown(qtbot, HeatmapPanel(doc))
    fmt = kwargs.pop("fmt", "png")
    with pytest.raises(figures.FigureError, match=re.escape(words)):
        figures.export_panel(panel, tmp_path / f"x.{fmt}", fmt, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_text_only_panel_and_unknown_extension_are_refused(qtbot, doc, tmp_path):
    with pytest.raises(AttnExplorerError, match="text only"):
        figures.export_panel(shown(qtbot, TextPanel(doc)), tmp_path / "e.png")
    with pytest.raises(AttnExplorerError, match="no extension"):
        figures.export_panel(shown(qtbot, HeatmapPanel(doc)), tmp_path / "noext")


def test_failed_write_leaves_the_old_file_intact(qtbot, doc, tmp_path, monkeypatch):
    """A write that fails at the last step (disk full) keeps the old file and leaves no temp."""
    import errno
    import os

    panel = shown(qtbot, HeatmapPanel(doc))
    target = tmp_path / "keep.png"
    target.write_bytes(b"old")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(AttnExplorerError, match="No space left"):
        figures.export_panel(panel, target)
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.png"]


def test_a_folder_in_the_way_is_a_clear_error(qtbot, doc, tmp_path):
    panel = shown(qtbot, HeatmapPanel(doc))
    (tmp_path / "taken.pdf").mkdir()
    with pytest.raises(AttnExplorerError, match="cannot write"):
        figures.export_panel(panel, tmp_path / "taken.pdf")
    assert [p.name for p in tmp_path.iterdir()] == ["taken.pdf"]


def test_missing_folder_is_a_clear_error(qtbot, doc, tmp_path):
    panel = shown(qtbot, HeatmapPanel(doc))
    with pytest.raises(AttnExplorerError, match="cannot write"):
        figures.export_panel(panel, tmp_path / "nope" / "a.svg")


def test_a_layout_heading_counts_as_the_title(qtbot, doc):
    """A panel's own heading in the first row (e.g. "Query 'dog' (#1)") is not doubled."""
    panel = shown(qtbot, HeatmapPanel(doc, title="Selected query", show_title=False))
    assert figures.render_panel(panel).height() == 320 + figures.TITLE_BAND
    panel.canvas.ci.addLabel("Query 'cat' (#1)", row=0, col=0)
    panel.canvas.ci.nextRow()
    assert figures.render_panel(panel).height() == 320


# -- the app's own panels, headless, as `attnexplorer export --figures` makes them ---------------
def run_export_figures(tmp_path, preset, formats):
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.core.inputs.presets import build_preset

    built = build_preset(preset)
    result = compute(built.session)
    written = figure_batch.export_figures(result, tmp_path, formats)
    return built, written


def test_export_figures_writes_every_applicable_panel_and_a_dashboard(qtbot, tmp_path):
    from attnexplorer.ui.panels import PANEL_CLASSES

    built, written = run_export_figures(tmp_path, "pronoun", ["png", "svg", "pdf"])
    folder = tmp_path / "figures"
    assert all(p.parent == folder and p.is_file() for p in written)
    names = {p.name for p in written}
    kinds = {p.stem for p in written} - {"dashboard"}
    assert len(names) == len(written) == 3 * (len(kinds) + 1)
    assert {"weights", "scores", "scaled_scores", "qkv", "output"} <= kinds
    assert kinds <= {cls.kind for cls in PANEL_CLASSES}
    assert "explain" not in kinds  # text only
    assert "signal" not in kinds  # the pronoun preset has no 1-D signal
    for kind in kinds:
        assert QImage(str(folder / f"{kind}.png")).size().toTuple() == figures.FIGURE_SIZE, kind
    texts = texts_of(folder / "weights.svg")
    assert any("Attention weights" in t for t in texts)
    for token in set(built.session.tokens):
        assert token in texts, token
    dash = " ".join(texts_of(folder / "dashboard.svg"))
    assert "pronoun" in dash and "Attention weights" in dash
    data = (folder / "dashboard.pdf").read_bytes()
    assert data.startswith(b"%PDF") and pdf_page_count(data) == 1
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(folder / "weights.pdf"), "-"], capture_output=True,
                              text=True, check=True).stdout
        assert "Attention weights" in text and "fetched" in text


def test_export_figures_includes_the_signal_plot_for_sine(qtbot, tmp_path):
    _built, written = run_export_figures(tmp_path, "sine", ["png"])
    assert "signal.png" in {p.name for p in written}
    assert "dashboard.png" in {p.name for p in written}


def test_export_figures_refuses_an_unknown_format_before_writing(qtbot, tmp_path):
    with pytest.raises(figures.FigureError, match="'tiff'"):
        from attnexplorer.core.compute.engine import compute

        figure_batch.export_figures(compute(make_session()), tmp_path, ["png", "tiff"])
    assert list(tmp_path.iterdir()) == []


class ScatterPanel(Panel):
    kind, title = "scatter", "Many points"

    def __init__(self, document, count):
        super().__init__(document)
        from PySide6.QtWidgets import QVBoxLayout

        self.canvas = pg.GraphicsLayoutWidget(self)
        plot = self.canvas.addPlot(title=self.title)
        rng = np.random.default_rng(0)
        plot.addItem(pg.ScatterPlotItem(x=rng.random(count), y=rng.random(count), size=4))
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.canvas)

    def figure_item(self):
        return self.canvas.ci

    def redraw(self):
        pass


def test_exporting_a_large_scatter_plot_does_not_abort(qtbot, doc, tmp_path):
    """pyqtgraph draws each point with several Qt calls when exporting; under PySide6 6.12 on
    Python < 3.12 each such call loses a reference to None, which used to abort the process
    ("deallocating None") part-way through a big export. That binding now refuses to start
    (attnexplorer/ui/__init__.py); the one installed keeps None's count through 20,000 points."""
    import sys

    panel = shown(qtbot, ScatterPanel(doc, 20000))
    before = sys.getrefcount(None)
    path = figures.export_panel(panel, tmp_path / "many.png")
    assert QImage(str(path)).size().toTuple() == (420, 320)
    assert sys.getrefcount(None) > before - 1000  # not one reference lost per Qt call


def test_real_weights_panel_figure_matches_its_screen(qtbot):
    from PySide6.QtCore import QPointF, QRectF

    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.panels import WeightsPanel

    built = build_preset("pronoun")
    document = SessionDocument(built.session)
    try:
        panel = shown(qtbot, WeightsPanel(document), size=(600, 460))
        # The screen once its axes have settled (the first paint sizes the token axes, and
        # they take that size on the next layout): two grabs in a row alike.
        from PySide6.QtWidgets import QApplication

        grabs = [as_array(panel.canvas.grab().toImage())]

        def settled() -> bool:
            QApplication.processEvents()   # the layout requests the last paint made
            grabs.append(as_array(panel.canvas.grab().toImage()))
            return np.array_equal(grabs[-1], grabs[-2])

        qtbot.waitUntil(settled)
        screen = grabs[-1]
        exported = as_array(figures.render_panel(panel))
        assert exported.shape == screen.shape
        assert np.abs(exported.astype(int) - screen.astype(int)).mean() < 3.0
    finally:
        document.shutdown()


def test_a_2x_png_scales_cell_numbers_and_lines_too(qtbot):
    # Cell numbers and cosmetic pens (axes, outlines, the selection frame) are drawn in device
    # pixels: a 2× PNG had them at 1×, half the size of the SVG's at the same pixels.
    from PySide6.QtCore import QPointF, QRectF

    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.panels import WeightsPanel
    from attnexplorer.ui.panels import theme

    document = SessionDocument(build_preset("pronoun").session)
    try:
        panel = shown(qtbot, WeightsPanel(document), size=(460, 400))
        assert document.compute.wait_idle(30)
        qtbot.waitUntil(lambda: bool(panel.view.numbers.cells))
        mask = document.result.mask
        n = mask.shape[0]
        # the cells' rectangle in the figure's logical pixels
        vb = panel.view.vb
        origin = panel.figure_item().sceneBoundingRect().topLeft()
        rect = QRectF(vb.mapViewToScene(QPointF(0, 0)) - origin, vb.mapViewToScene(QPointF(n, n)) - origin).normalized()

        def number_ink(image, scale):
            """Pixels far from their cell's own colour, over the cells not blocked: the numbers."""
            cw, ch = rect.width() / n * scale, rect.height() / n * scale
            ink = 0
            for r in range(n):
                for c in range(n):
                    if mask[r, c]:
                        continue
                    x0, y0 = int(rect.left() * scale + c * cw) + 2, int(rect.top() * scale + r * ch) + 2
                    block = image[y0:int(y0 + ch) - 4, x0:int(x0 + cw) - 4].reshape(-1, 3).astype(int)
                    assert block.size, (r, c)
                    ink += int((np.abs(block - np.median(block, axis=0)).sum(axis=1) > 150).sum())
            return ink

        def orange(image):
            target = np.array(theme.SELECTION_COLOR.getRgb()[:3])
            return int((np.abs(image.astype(int) - target).sum(axis=2) < 60).sum())

        one = as_array(figures.render_panel(panel, scale=1, with_title=False))
        two = as_array(figures.render_panel(panel, scale=2, with_title=False))
        assert two.shape[0] == 2 * one.shape[0]
        assert number_ink(one, 1) > 100
        # twice as wide and twice as tall: about four times the pixels (1× text gave about one)
        assert number_ink(two, 2) >= 3.0 * number_ink(one, 1), (number_ink(two, 2), number_ink(one, 1))
        assert orange(two) >= 3.0 * orange(one), (orange(two), orange(one))
        # and the screen keeps its own pens and numbers afterwards
        assert as_array(figures.render_panel(panel, scale=1, with_title=False)).tolist() == one.tolist()
    finally:
        document.shutdown()


def test_a_figure_wider_than_its_panel_draws_flat_token_labels_on_a_flat_axis(qtbot, tmp_path):
    # In a narrow dock the weights' key labels stand upright on a tall axis. A wider figure
    # lays them flat; its axis must then be as short as flat labels need, not keep the
    # window's height (an empty band of ~60 px between the labels and the axis title).
    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.panels import WeightsPanel

    document = SessionDocument(build_preset("pronoun").session)
    try:
        wide = shown(qtbot, WeightsPanel(document), size=(900, 460))
        narrow = shown(qtbot, WeightsPanel(document), size=(230, 460))
        assert document.compute.wait_idle(30)
        axis, flat = narrow.view.col_axis, wide.view.col_axis
        qtbot.waitUntil(lambda: axis.plan.rotated and not flat.plan.rotated and axis.height() > flat.height() + 20)
        flat_height = flat.height()
        drawn = []
        draw = axis.drawPicture

        def recording(p, *args):
            drawn.append((axis.plan.rotated, axis.height()))
            return draw(p, *args)

        axis.drawPicture = recording
        figures.export_dashboard([narrow], tmp_path / "wide.svg")   # laid out in a 640 px cell
        assert drawn and drawn[-1][0] is False
        assert abs(drawn[-1][1] - flat_height) <= 2, (drawn, flat_height)
    finally:
        document.shutdown()
