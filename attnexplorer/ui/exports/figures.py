"""Figures: one panel, or the whole dashboard, as PNG, SVG or PDF.

Every format goes through one route: the panel's pyqtgraph item is painted with a QPainter
(``QGraphicsScene.render``) onto a QImage (PNG), a ``QSvgGenerator`` (SVG) or a
``QPdfWriter`` (PDF). pyqtgraph's own SVG exporter rewrites the scene's XML by hand and has
known trouble with colorbars and gradients, and it has no PDF exporter at all, so it is not
used. What callers may rely on:

- **Looks like the screen.** A panel is drawn from the very items on screen, with the view's
  background, so a figure at scale 1 matches ``panel.grab()``. A panel whose plot does not
  already show its title gets the title drawn above it.
- **Crisp heatmaps.** Smooth pixmap scaling is off, so a heatmap cell is a solid block at
  any scale (PNG); in SVG a small heatmap is one rect per cell (``svg_compat``).
- **Portable SVG.** Qt's SVG output is rewritten (``svg_compat.portable_svg``) so that
  renderers other than Qt's draw it like the PNG: real stroke widths, a generic font stack.
- **Vectors where it matters.** In SVG and PDF the axes, tick labels and titles are vector
  paths and real text; a colorbar's strip is drawn as a vector linear gradient; the heatmap
  itself is an embedded image (one pixel per matrix cell).
- **Size.** With no options a figure has the panel's on-screen size (logical pixels).
  ``scale=s`` multiplies it. ``width`` *or* ``height`` scales it to that size keeping its
  shape. ``width`` *and* ``height`` give exactly that size: the plot is laid out again at
  that shape (fonts keep their size until the figure is larger than the screen one, then
  everything grows together). SVG and PDF pages are the figure's size at 96 px per inch.
- **Whole files only.** Everything is drawn in memory first and then written with a
  temporary file and a rename, so a failed export leaves no partial file and an old file of
  the same name intact.

File names written by ``figure_batch.export_figures``: ``figures/<kind>.<fmt>`` per panel (e.g.
``figures/weights.png``) and ``figures/dashboard.<fmt>``.
"""


from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QWidget

from .figure_paint import (  # noqa: F401  (re-exported: callers and tests read them here)
    DASHBOARD_HEADER,
    FIGURE_SIZE,
    FORMATS,
    MAX_SCALE,
    MAX_SIDE,
    TITLE_BAND,
    FigureError,
    _bytes,
    _check_format,
    _dashboard_figure,
    _panel_figure,
    _render_image,
    _tree,
    _write,
    figure_size,
)


# -- public API --------------------------------------------------------------------------------
def render_panel(panel, *, width=None, height=None, scale=None, with_title: bool = True,
                 selection: bool = True) -> QImage:
    """The panel's figure as a QImage (what ``export_panel`` writes as PNG)."""
    fig = _panel_figure(panel, with_title, selection)
    logical, pixels = figure_size(fig.natural, fig.flexible, width, height, scale)
    return _render_image(fig, logical, pixels)


def export_panel(panel, path, fmt: str | None = None, *, width=None, height=None, scale=None,
                 selection: bool = True) -> Path:
    """Write ``panel``'s figure to ``path`` as ``fmt`` (png/svg/pdf; default: the extension).
    ``selection=False`` leaves out the marks of the selected query and key (orange row box,
    dashed key column, outlined bar).

    Raises FigureError for a bad format, size or a text-only panel, and WriteError (from
    ``attnexplorer.io.atomic``) when the file cannot be written; either way nothing is left
    half-written.
    """
    path = Path(path)
    fmt = _check_format(fmt, path)
    return _write(path, _bytes(_panel_figure(panel, selection=selection), fmt, width, height, scale))


def exportable(panels: Iterable) -> list:
    """The panels a figure can be made of: they apply to their session and have a plot."""
    out = []
    for p in panels:
        doc = getattr(p, "document", None)
        if doc is not None and not p.applies_to(doc.session):
            continue
        if p.export_item() is None:
            continue
        out.append(p)
    return out


def export_dashboard(panels: Sequence, path, fmt: str | None = None, *, width=None, height=None,
                     scale=None, title: str | None = None, cell: tuple[int, int] = FIGURE_SIZE,
                     selection: bool = True) -> Path:
    """Write every exportable panel of ``panels`` as one figure: a grid (up to three columns)
    with each panel's title, under an optional overall ``title``. Each cell is laid out at
    ``cell`` logical pixels unless ``width`` and ``height`` ask for another shape."""
    path = Path(path)
    fmt = _check_format(fmt, path)
    fig = _dashboard_figure(exportable(panels), title, cell, selection)
    return _write(path, _bytes(fig, fmt, width, height, scale))


def panel_size(panel) -> tuple[int, int]:
    """The panel's figure size at scale 1 in pixels (on-screen size, plus a title band if any)."""
    n = _panel_figure(panel).natural
    return round(n.width()), round(n.height())


def dashboard_size(panels: Sequence, title: str | None = None, cell: tuple[int, int] = FIGURE_SIZE) -> tuple[int, int]:
    """The dashboard's size at scale 1 in pixels for these panels."""
    n = _dashboard_figure(exportable(panels), title, cell).natural
    return round(n.width()), round(n.height())


def quiet_offscreen(mode, context, message) -> None:
    """A Qt message handler for the offscreen platform: Qt warns on every window it lays out there
    that it cannot pass size hints on ("This plugin does not support propagateSizeHints()"),
    which says nothing about the figures, so only that line is dropped."""
    if "does not support propagateSizeHints" not in message:
        print(message, file=sys.stderr)


def ensure_app() -> QApplication:
    """The running QApplication, or a new one on the offscreen platform (no display needed)."""
    from PySide6.QtCore import QCoreApplication, qInstallMessageHandler

    app = QCoreApplication.instance()
    if app is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        if os.environ["QT_QPA_PLATFORM"] == "offscreen":
            # import-model --figures drew the model window offscreen and printed that warning
            # between its own two lines
            qInstallMessageHandler(quiet_offscreen)
        app = QApplication(["attnexplorer"])
    elif not isinstance(app, QApplication):
        raise FigureError("figures need a QApplication, but a non-widget Qt application is running")
    return app


def discard(*objects) -> None:
    """Close and delete, now, the widgets (and other QObjects) a command drew its figures with.

    ``deleteLater`` alone deletes nothing in a command: no event loop runs after it, and
    ``processEvents`` does not deliver deferred deletions. What is left is deleted at exit by
    PySide, which deletes every Qt object Python still owns one by one; with PySide6 6.12 one
    deletion there let go of the last hold on a panel (a lambda connected to its own child's
    signal), whose own deletion, run inside the first, freed objects twice, and
    ``import-model --figures`` crashed at exit (-11, "shared QObject was deleted directly")
    after writing its files. Deleted here, in order, nothing of the figures is left for that."""
    from PySide6.QtCore import QCoreApplication, QEvent

    for obj in objects:
        if isinstance(obj, QWidget):
            obj.close()
        obj.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def session_title(session) -> str:
    """The dashboard's heading for a session: the preset (if any) and its sizes."""
    name = session.preset.name if session.preset is not None else "session"
    heads = f"{session.heads} head" + ("s" if session.heads != 1 else "")
    return f"attnexplorer — {name}: {session.n} tokens, d = {session.d}, {heads}"
