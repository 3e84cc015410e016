"""Presenter mode: the lesson full screen and readable from the back of a room.

- **One zoom factor** for every label, tick and number: each plot's graphics view lays its
  scene out at 1/zoom of its size and draws it zoom times larger, so ticks, axis labels,
  titles and the numbers in the cells all grow together (and stay vector-sharp); the lesson
  bar's and the panels' text widgets get the same factor. The default, 2.25, makes an 11 px
  tick label 25 px: at least 24 px on a 1920×1080 projector.
- **Editing chrome hidden**: menu bar, status bar, dock title bars and the Inputs (a step that
  lists "inputs" keeps them). The shortcuts still work; Escape or F5 leaves.
- **A colour-blind-safe palette** option for the heatmaps (CET-CBD1 for signed matrices,
  cividis for the weights), in and out of presenter mode.
- **A second screen**: the teacher's notes, the answer and the next step, on the screen the
  window is not on.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (QAbstractButton, QAbstractSpinBox, QComboBox, QLabel, QPlainTextEdit, QTextEdit,
                               QVBoxLayout, QWidget)

from ...core.errors import AttnExplorerError
from ...core.lessons import fill
from ...core.lessons.runtime import answer

DEFAULT_ZOOM = 2.25
PALETTES = ("default", "colour-blind safe")


def palette_maps(name: str):
    """(signed colour map, weights colour map) of palette ``name``."""
    from ..panels import theme

    if name == "colour-blind safe":
        return pg.colormap.get("CET-CBD1"), pg.colormap.get("cividis")
    return theme.DIVERGING, theme.SEQUENTIAL


def apply_palette(panels, name: str) -> None:
    """Colour every heatmap of ``panels`` with palette ``name`` (panels redraw)."""
    signed, weights = palette_maps(name)
    luts = {True: signed.getLookupTable(nPts=256, alpha=False), False: weights.getLookupTable(nPts=256, alpha=False)}
    for panel in panels:
        changed = False
        for view in getattr(panel, "views", lambda: [])():
            lut = luts[bool(view.signed)]
            if view.lut is lut or (view.lut.shape == lut.shape and (view.lut == lut).all()):
                continue
            view.lut = lut
            view.image.setLookupTable(lut)
            if view.colorbar is not None:
                view.colorbar.setColorMap(signed if view.signed else weights)
            changed = True
        if changed:
            panel.refresh()


class _ViewZoom(QObject):
    """Keeps one graphics view's scene drawn ``zoom`` times larger as the view is resized."""

    def __init__(self, view, zoom: float):
        super().__init__(view)
        self.view, self.zoom = view, zoom
        view.installEventFilter(self)
        self.apply()

    def apply(self) -> None:
        w, h = self.view.width(), self.view.height()
        self.view.setRange(QRectF(0, 0, max(w / self.zoom, 1), max(h / self.zoom, 1)), padding=0)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Resize:
            # Before pyqtgraph's resizeEvent, which lays the scene out at ``range``.
            size = event.size()
            self.view.range = QRectF(0, 0, max(size.width() / self.zoom, 1), max(size.height() / self.zoom, 1))
        return False

    def remove(self) -> None:
        self.view.removeEventFilter(self)
        self.view.autoPixelRange = True
        self.view.setRange(QRectF(0, 0, self.view.width(), self.view.height()), padding=0, disableAutoPixel=False)
        self.setParent(None)


def zoom_numbers(panels, zoom: float) -> None:
    """The numbers in every heatmap's cells drawn ``zoom`` times larger (they are drawn in
    device pixels, so the view's own zoom does not reach them)."""
    for panel in panels:
        views = getattr(panel, "views", lambda: [])()
        for view in views:
            view.numbers.set_zoom(zoom)
        if views:
            panel.refresh()


# The widgets whose text presenter mode enlarges: labels and texts, and the panels' own
# controls (the RoPE panel's pair and offset, check boxes), which stayed at 13 px beside 30-px labels.
_ZOOMED = (QLabel, QTextEdit, QPlainTextEdit, QAbstractButton, QComboBox, QAbstractSpinBox)


def zoom_widgets(root: QWidget, zoom: float, originals: dict) -> None:
    """Text widgets and controls under ``root`` at ``zoom`` times their own font
    (``originals`` keeps the fonts they had, so zoom 1 gives them back)."""
    for widget in root.findChildren(QWidget):
        if not isinstance(widget, _ZOOMED):
            continue
        base = originals.setdefault(widget, QFont(widget.font()))
        font = QFont(base)
        px = base.pixelSize() if base.pixelSize() > 0 else base.pointSizeF() * widget.logicalDpiY() / 72.0
        font.setPixelSize(max(6, round(px * zoom)))
        widget.setFont(font)


class NotesWindow(QWidget):
    """The presenter's second screen: the step, its notes, the answer, and the next step."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("attnexplorer — presenter notes")
        self.step = QLabel()
        self.notes = QLabel()
        self.answer = QLabel()
        self.next_step = QLabel()
        layout = QVBoxLayout(self)
        for label, px, bold in ((self.step, 26, True), (self.notes, 22, False), (self.answer, 22, False),
                                (self.next_step, 20, False)):
            label.setWordWrap(True)
            font = QFont()
            font.setPixelSize(px)
            font.setBold(bold)
            label.setFont(font)
            layout.addWidget(label)
        layout.addStretch(1)

    def show_step(self, run, result) -> None:
        step = run.step
        self.step.setText(run.counter(result))
        self.notes.setText(fill(step.notes, result).text if step.notes else "(no notes for this step)")
        if step.ask is not None:
            try:
                self.answer.setText(f"Answer: {answer(step.ask, result).shown}")
            except AttnExplorerError as err:  # a quote the class edited away: say so
                self.answer.setText(f"Answer: ? ({err})")
        else:
            self.answer.setText("")
        nxt = run.next_step
        self.next_step.setText("Last step." if nxt is None else f"Next: {fill(nxt.title, result).text} — "
                               f"{nxt.formula}")


class Presenter:
    def __init__(self, window, controller):
        self.window, self.controller = window, controller
        self.active = False
        self.zoom = DEFAULT_ZOOM
        self.palette = "default"
        self.notes_window: NotesWindow | None = None
        self._view_zooms: list[_ViewZoom] = []
        self._fonts: dict = {}
        self._was = None

    # -- on and off ------------------------------------------------------------------------
    def toggle(self) -> None:
        self.leave() if self.active else self.enter()

    def enter(self, screens=None) -> None:
        """Presenter mode on; ``screens`` (tests) overrides the screens Qt reports."""
        if self.active:
            return
        window = self.window
        self.active = True
        self._was = (window.saveGeometry(), window.isFullScreen())
        window.menuBar().hide()
        window.statusBar().hide()
        for dock in window.docks.values():
            dock.setTitleBarWidget(QWidget(dock))
        window.showFullScreen()
        self._apply_zoom()
        if self.controller.active:
            self.controller.show_step()
        screens = QGuiApplication.screens() if screens is None else screens
        here = window.screen()
        others = [s for s in screens if s is not here]
        if others:
            self.show_notes(others[0])

    def leave(self) -> None:
        # The notes window goes whether or not presenter mode is on (it can be shown on its own):
        # left open, it outlived the lesson and the main window as a top-level window of its own.
        if self.notes_window is not None:
            self.notes_window.close()
            self.notes_window = None
        if not self.active:
            return
        window = self.window
        self.active = False
        for zoom in self._view_zooms:
            zoom.remove()
        self._view_zooms = []
        zoom_widgets(window, 1.0, self._fonts)
        zoom_numbers(window.panels, 1.0)
        self._fonts.clear()
        self.controller.bar.set_zoom(1.0)
        for dock in window.docks.values():
            old = dock.titleBarWidget()
            dock.setTitleBarWidget(None)
            if old is not None:
                old.deleteLater()
        window.menuBar().show()
        window.statusBar().show()
        geometry, full = self._was
        if not full:
            window.showNormal()
            window.restoreGeometry(geometry)
        if self.controller.active:
            self.controller.show_step()

    # -- zoom and palette --------------------------------------------------------------------
    def set_zoom(self, zoom: float) -> None:
        self.zoom = max(1.0, min(float(zoom), 5.0))
        if self.active:
            self._apply_zoom()

    def _apply_zoom(self) -> None:
        for zoom in self._view_zooms:
            zoom.remove()
        self._view_zooms = []
        zoom_numbers(self.window.panels, self.zoom)
        for panel in self.window.panels:
            for view in panel.findChildren(pg.GraphicsView):
                self._view_zooms.append(_ViewZoom(view, self.zoom))
            zoom_widgets(panel, self.zoom, self._fonts)
        self.controller.bar.set_zoom(self.zoom)

    def view_zoom(self, view) -> float:
        """The factor ``view`` draws its scene at (1 outside presenter mode)."""
        return float(view.transform().m11())

    def set_palette(self, name: str) -> None:
        if name not in PALETTES:
            raise ValueError(f"palette {name!r}; choose one of {', '.join(PALETTES)}")
        self.palette = name
        apply_palette(self.window.panels, name)

    # -- the second screen -------------------------------------------------------------------
    def show_notes(self, screen) -> NotesWindow:
        if self.notes_window is None:
            self.notes_window = NotesWindow()
        self.notes_window.setScreen(screen)
        self.notes_window.setGeometry(screen.availableGeometry())
        self.notes_window.show()
        self.refresh_notes(self.window.document.result)
        return self.notes_window

    def refresh_notes(self, result) -> None:
        if self.palette != "default":
            apply_palette(self.window.panels, self.palette)   # views made since (a new head) too
        if self.notes_window is not None and self.controller.active and result is not None:
            self.notes_window.show_step(self.controller.run, result)

    def step_changed(self) -> None:
        if self.notes_window is not None:
            self.refresh_notes(self.window.document.result)
