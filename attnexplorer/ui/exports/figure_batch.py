"""``attnexplorer export --figures``: every panel drawn headlessly from one result.

A long session's heatmaps draw its pooled overview, and say so in their title ("max-pooled,
16×16 cells a pixel"); with ``rows`` (and ``cols``) they are zoomed to that region and show
its exact cells when it is small enough to compute at once (the panels' own rule).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from .figures import FIGURE_SIZE, discard, ensure_app, export_dashboard, export_panel, exportable, session_title
from .figure_paint import _check_format

def zoom_to(panels, session, rows: tuple[int, int] | None, cols: tuple[int, int] | None = None) -> None:
    """Zoom every token × token heatmap of ``panels`` to query rows ``rows`` and key columns
    ``cols`` ([start, stop); None: all), as a user's zoom would; each panel then redraws (a
    long session's heading says whether it shows exact cells or a pooled overview)."""
    if rows is None and cols is None:
        return
    for p in panels:
        for view in getattr(p, "views", lambda: [])():
            if getattr(view, "row_name", None) != "query" or getattr(view, "col_name", None) != "key":
                continue
            n, n_k = session.n, session.n_keys
            r0, r1 = rows if rows is not None else (0, n)
            c0, c1 = cols if cols is not None else (0, n_k)
            view.vb.setRange(xRange=(c0, min(c1, n_k)), yRange=(r0, min(r1, n)), padding=0)
    QApplication.processEvents()
    for p in panels:
        p.refresh()  # the heading follows what the view now shows
    QApplication.processEvents()


def export_figures(result, out_dir, formats: list[str], *, selection: bool = False,
                   rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None,
                   head: int | None = None) -> list[Path]:
    """Headless figures for ``attnexplorer export --figures``, drawn from ``result`` itself.

    Builds the panels on ``result`` offscreen (no document, nothing computed again), each
    laid out at ``FIGURE_SIZE``, and writes ``out_dir/figures/<kind>.<fmt>`` for every panel
    that applies to ``result.session`` and has a plot, and ``out_dir/figures/dashboard.<fmt>``,
    for every format in ``formats``. Returns the paths written, in that order. ``result``
    should hold every intermediate (``compute`` without ``keep``): a panel draws what it
    finds; a long result (``result.tiled``) draws its pooled overviews and exact tiles.
    ``selection`` draws the selected query and key's marks (off: a figure for a slide shows
    the data alone). ``rows``/``cols`` zoom the heatmaps to that region (``zoom_to``);
    ``head`` draws that head (default: the session's selected one).
    """
    wanted = [str(f).strip().lower() for f in formats if str(f).strip()]
    for f in wanted:
        _check_format(f, Path(f"figure.{f}"))
    if not wanted:
        return []
    session = result.session
    with offscreen_panels(result, head=head) as (_source, shown):
        plots = exportable(shown)
        zoom_to(shown, session, rows, cols)
        folder = Path(out_dir) / "figures"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            from ...io.atomic import WriteError

            raise WriteError(f"cannot write to {folder}: {err.strerror or err}") from None
        written = []
        for fmt in wanted:
            for p in plots:
                written.append(export_panel(p, folder / f"{p.kind}.{fmt}", fmt, selection=selection))
            written.append(export_dashboard(plots, folder / f"dashboard.{fmt}", fmt, title=session_title(session),
                                            selection=selection))
        return written


@contextlib.contextmanager
def offscreen_panels(result, head: int | None = None):
    """Every panel that applies to ``result.session``, drawn offscreen from ``result`` itself
    (no document, nothing computed again), each laid out so that its figure is
    ``FIGURE_SIZE``: ``(source, panels)``, where ``source`` is the ``ResultSource`` whose
    ``selection`` the panels show. Closed and disposed on leaving."""
    session = result.session
    ensure_app()
    from ..panels import make_panels
    from .result_source import ResultSource

    source = ResultSource(result)
    if head is not None:
        source.selection.set(head=head)
    panels = []
    try:
        panels = list(make_panels(source))
        shown = []
        for p in panels:
            if not p.applies_to(session):
                continue
            p.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen, True)
            p.resize(*FIGURE_SIZE)
            p.show()
            shown.append(p)
        QApplication.processEvents()
        for p in exportable(shown):
            # The figure is only part of the panel (a read-out line sits below it): grow the
            # panel so that the figure itself gets FIGURE_SIZE.
            got = p.export_item().sceneBoundingRect().size()
            p.resize(p.width() + FIGURE_SIZE[0] - round(got.width()), p.height() + FIGURE_SIZE[1] - round(got.height()))
        QApplication.processEvents()
        for p in shown:
            p.refresh()
        QApplication.processEvents()
        yield source, shown
    finally:
        for p in panels:
            p.close()
            p.dispose()
        discard(*panels, source)
