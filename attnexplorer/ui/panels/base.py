"""What every result panel provides, so the window, figure export and bench treat them alike.

A panel is a QWidget built on a ``SessionDocument`` (or a ``ResultSource``). It listens to
the document's ``result_changed`` and ``selection.changed`` and redraws itself (reusing its
pyqtgraph items: no new items per frame); it reports clicks back with
``document.selection.set``.

- ``kind``: a short file-name-safe id ("weights", "scores", ...) used for dock object
  names (QSettings layout) and exported figure names.
- ``title``: what an exported figure is titled (and the panel's heading).
- ``short_title``: at most about 16 characters, for a dock's tab.
- ``needs``: the names from ``attnexplorer.core.compute.engine.INTERMEDIATES`` (and
  ``STAGE_INTERMEDIATES``, for a stage's panel) the panel reads from a result, so that a
  document may compute (or copy to the host) only what the visible panels need
  (``compute(keep=...)``). A panel given a result in which an
  intermediate it does not need is None draws normally; one that it needs is None draws
  nothing (it never raises). A panel that leaves ``needs`` None (the default) has said
  nothing, and is given everything.
- ``export_item()``: the pyqtgraph/QGraphics item an exporter renders (a
  ``pg.GraphicsLayout`` or ``pg.PlotItem``, holding titles, ticks and colour bars), or None
  for a panel that is text only. It brings a stale panel up to date first, so exporting a
  hidden panel is safe.
- ``refresh()``: redraw from the document now (the window calls it after a reset).
- ``applies_to(session)``: False hides the panel for sessions it has nothing to show for
  (the signal plot outside 1-D signal presets, the embedding scatter when d != 2).

Hidden panels (a closed dock, or one tabbed away behind another) do not redraw: they
remember that they are stale and catch up when they come on screen again, so only what is
on screen costs time.

Subclasses implement ``redraw()`` (everything) and may implement ``redraw_selection()``
(only what the selected query/key changes; by default a full redraw). ``refresh()`` and the
signal handlers call these; callers use ``refresh()``.

A panel's plots are made in ``build()``, not in ``__init__``: the window makes all fourteen
panels, but only a few are on screen at its first paint (the rest are tabbed away or do not
apply to the session), and making every plot took about half a second before that paint.
``ensure_built()`` makes them once: ``refresh()`` (so the first draw, ``export_item()`` and a
dock coming on screen), and reading any attribute ``build()`` makes (``panel.view``) build
first, so callers never see a half-made panel. Settings given before that (``when_built``:
the number format, the pooling, the weights' colour range) are kept and applied by the build.
"""

from __future__ import annotations

import functools

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QLabel, QWidget

from ..document import SessionDocument


def when_built(method):
    """A panel setting that an unbuilt panel keeps (the last call of each) and applies when
    it is built, instead of building the panel for it (the View menu sets every panel's
    number format and pooling at start-up)."""
    @functools.wraps(method)
    def apply(self, *args, **kwargs):
        if not self.__dict__.get("_built", True):
            self._pending_settings[method.__name__] = (args, kwargs)
            return None
        return method(self, *args, **kwargs)
    return apply


class Panel(QWidget):
    kind: str = "panel"
    title: str = "Panel"
    short_title: str = "Panel"
    needs: frozenset[str] | None = None  # None: not said, so the window asks for everything
    # A panel in a dock tabbed away behind another waits too, like a closed one.
    defer_when_covered: bool = True
    # The session fields the picture is made from, besides the intermediates in ``needs``
    # (which are made from them): a new result whose session holds the very same ones (an
    # edit shares the arrays it did not touch) shows the same picture, so it is not drawn
    # again. None (the default): not said, so every new result is drawn.
    draws_from: tuple[str, ...] | None = None

    def __init__(self, document: SessionDocument, parent=None):
        super().__init__(parent)
        self.document = document
        self.setObjectName(f"panel-{self.kind}")
        self._stale = True
        self._drawn_head: int | None = None
        self._drawn_result = None
        self._watched: list = []
        self._catch_up_pending = False
        self._waiting: QLabel | None = None  # "computing…" over the panel until a result is in
        self._disposed = False
        self._pending_settings: dict[str, tuple] = {}
        self._applying_settings = False
        self._built = False  # build() not run yet; the last attribute set here (see __getattr__)
        document.result_changed.connect(self._on_result_changed)
        document.selection.changed.connect(self._on_selection_changed)
        compute = getattr(document, "compute", None)  # a ResultSource (figures) has none
        if compute is not None:
            compute.failed.connect(self._on_failed)

    # -- building -------------------------------------------------------------------------
    def build(self) -> None:
        """Make the panel's plots and widgets (``ensure_built`` calls it once). Subclasses
        call ``super().build()`` first."""

    @property
    def is_built(self) -> bool:
        return self._built

    def ensure_built(self) -> "Panel":
        """Make the panel's contents now if they are not made yet; returns the panel."""
        if not self._built:
            self._built = True
            self.build()
            pending, self._pending_settings = self._pending_settings, {}
            # A setting that redraws (the weights' colour range) need not here: an unbuilt
            # panel has never drawn, so it is stale and draws once it is shown or exported.
            self._applying_settings = True
            try:
                for name, (args, kwargs) in pending.items():
                    getattr(self, name)(*args, **kwargs)
            finally:
                self._applying_settings = False
        return self

    def __getattr__(self, name: str):
        # Only reached for an attribute that does not exist (yet): on an unbuilt panel, one
        # that build() makes (``panel.view``, ``panel.canvas``). Until ``_built`` is set at
        # the end of __init__, nothing is built here.
        if name.startswith("__") or self.__dict__.get("_built", True):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.ensure_built()
        return getattr(self, name)

    # -- the contract ---------------------------------------------------------------------
    def export_item(self):
        """The item an exporter renders (None for text-only panels), brought up to date."""
        if self._stale:
            self.refresh()
        return self.figure_item()

    def figure_item(self):
        """The item ``export_item`` returns; subclasses with a figure override this."""
        return None

    def applies_to(self, session) -> bool:
        return True

    # The View menu's settings, given to every panel (an unbuilt one keeps them for its build):
    # a panel without heatmaps, or without a colour range to choose, has nothing to change.
    def set_number_format(self, number_format: str) -> None:
        """How the panel's heatmaps write numbers in cells (``core.numbers.display.NUMBER_FORMATS``)."""

    def set_pool(self, pool: str) -> None:
        """How the panel's zoomed-out heatmaps pool cells into pixels ("max" or "mean")."""

    def set_color_range(self, color_range: str) -> None:
        """The colour range of the panel's weights: "unit" (0 to 1) or "auto"."""

    def dispose(self) -> None:
        """Take the panel's plots apart while their scenes are still whole (idempotent).

        When a pyqtgraph view is destroyed with its window, its scene goes first and each
        ViewBox, told that it is leaving the scene, reaches into the half-destroyed scene:
        PySide segfaults there, at exit or whenever the garbage collector gets to a closed
        panel. pyqtgraph's ``GraphicsView.close()`` clears the scene while it is intact. The
        window calls this when it closes, and closing a panel on its own does too.
        """
        if self._disposed:
            return
        self._disposed = True
        for widget in self._watched:
            _CoverWatch.release(widget, self)
        self._watched = []
        pairs = [(self.document.result_changed, self._on_result_changed),
                 (self.document.selection.changed, self._on_selection_changed)]
        compute = getattr(self.document, "compute", None)
        if compute is not None:
            pairs.append((compute.failed, self._on_failed))
        for signal, slot in pairs:
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass  # already gone with the document
        import pyqtgraph as pg

        for view in self.findChildren(pg.GraphicsView):
            if not getattr(view, "closed", False):
                view.close()

    def closeEvent(self, event) -> None:
        super().closeEvent(event)
        if event.isAccepted() and self.isWindow():
            self.dispose()

    def refresh(self) -> None:
        """Redraw everything from ``self.document.result`` and ``.selection`` now."""
        if self._disposed or self._applying_settings:
            return
        self.ensure_built()
        self._stale = False
        if self._watched:
            self._watch_ancestors()  # on screen and drawn: nothing to watch for any more
        self._drawn_head = self.document.selection.current.head
        self._drawn_result = self.document.result
        self._say_waiting()
        self.redraw()
        self.settle_views()

    def settle_views(self) -> None:
        """Bring the panel's views up to date with what ``redraw`` set, before they paint
        (``FigurePanel``: each plot's new range and transform). Nothing here."""

    @property
    def is_stale(self) -> bool:
        """True when the document changed while this panel was hidden."""
        return self._stale

    # -- for subclasses -------------------------------------------------------------------
    def redraw(self) -> None:
        raise NotImplementedError

    def redraw_selection(self) -> None:
        """Redraw what depends on the selected query/key only (same head, same result)."""
        self.redraw()

    @property
    def is_on_screen(self) -> bool:
        """Shown and not covered: a dock tabbed away behind another stays ``isVisible()`` to
        Qt but is moved out of its window, so its visible region is empty."""
        return self.isVisible() and not self.visibleRegion().isEmpty()

    def _should_draw(self) -> bool:
        # A panel that is not on screen waits; showEvent (or, with ``defer_when_covered``, its
        # dock coming back from behind another tab, seen by its ``_CoverWatch``) catches it up.
        return self.is_on_screen if Panel.defer_when_covered else self.isVisible()

    # -- signal handlers ------------------------------------------------------------------
    def _on_result_changed(self, result) -> None:
        if self._should_draw():
            if self._same_picture(result):
                self._drawn_result = result  # e.g. the embeddings' panel after a W_q edit
                return
            self.refresh()
        else:
            self._set_stale()

    def _same_picture(self, result) -> bool:
        """Whether ``result`` shows what this panel drew last (see ``draws_from``)."""
        drawn = self._drawn_result
        if (self.draws_from is None or self._stale or drawn is None or result is None
                or self._drawn_head != self.document.selection.current.head
                or drawn.tiled or result.tiled):
            return False
        for name in self.needs or ():
            a, b = getattr(drawn, name, None), getattr(result, name, None)
            if (a is None) != (b is None) or (a is not None and (a.dtype != b.dtype or a.shape != b.shape)):
                return False  # kept or not, or computed in another precision
        old, new = drawn.session, result.session
        return all(_same(getattr(old, name), getattr(new, name)) for name in self.draws_from)

    def _on_selection_changed(self, selection) -> None:
        if not self._should_draw():
            self._set_stale()
        elif self._stale or selection.head != self._drawn_head or self.document.result is not self._drawn_result:
            self.refresh()
        else:
            self.redraw_selection()
            self.settle_views()

    def _say_waiting(self) -> None:
        """Over a panel with no result yet, say why: "computing…" (the window paints before
        torch has loaded, and the first result comes a second or two later) or the reason the
        compute failed."""
        if self.document.result is not None:
            if self._waiting is not None:
                self._waiting.hide()
            return
        if self._waiting is None:
            self._waiting = QLabel(self)
            self._waiting.setObjectName("panel-waiting")
            self._waiting.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self._waiting.setWordWrap(True)
            self._waiting.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        error = getattr(getattr(self.document, "compute", None), "last_error", None)
        self._waiting.setText(f"No result: {error}" if error else "computing…")
        self._waiting.setGeometry(self.rect())
        self._waiting.raise_()
        self._waiting.show()

    def _on_failed(self, _error: str) -> None:
        if self.document.result is None and self._should_draw():
            self._say_waiting()  # the first compute failed: say why instead of "computing…"

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._waiting is not None:
            self._waiting.setGeometry(self.rect())

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._watch_ancestors()
        if self._stale and self._should_draw():
            self.refresh()
        elif self._stale:
            self._schedule_catch_up()

    def _watch_ancestors(self) -> None:
        """Watch the containers (dock, tab area) whose moves bring this panel back on screen:
        while it is stale only, and through one shared watcher per container
        (``_CoverWatch``), not an event filter of each panel's own. A filter per panel on
        every ancestor had the main window's every event (three paint requests an edit) pass
        through fourteen Python filters, each given a new wrapper of the event."""
        ancestors = []
        if self._stale:
            widget = self.parentWidget()
            while widget is not None:
                ancestors.append(widget)
                widget = widget.parentWidget()
        if ancestors == self._watched:
            return
        for widget in self._watched:
            _CoverWatch.release(widget, self)
        for widget in ancestors:
            _CoverWatch.hold(widget, self)
        self._watched = ancestors

    def _set_stale(self) -> None:
        """The document changed while this panel was not drawing: it catches up when it comes
        on screen (``showEvent``, or its containers moving it back from behind a tab)."""
        if not self._stale:
            self._stale = True
            if self.isVisible():
                self._watch_ancestors()

    def _on_container_moved(self) -> None:
        if self._stale:
            self._schedule_catch_up()

    def _schedule_catch_up(self) -> None:
        # After the layout has placed everything: the visible region is known only then.
        if not self._catch_up_pending:
            self._catch_up_pending = True
            QTimer.singleShot(0, self, self._catch_up)  # dropped if the panel is deleted first

    def _catch_up(self) -> None:
        self._catch_up_pending = False
        if self._stale and self._should_draw():
            self.refresh()


def _same(a, b) -> bool:
    """Session fields are immutable: the same object, or equal plain values (tokens, sizes)."""
    return a is b or (isinstance(a, (int, float, str, tuple)) and type(a) is type(b) and a == b)


class _CoverWatch(QObject):
    """The one event filter on a container (a dock, a tab area, the window) for every stale
    panel inside it: when the container is moved, resized or shown, those panels check whether
    they came on screen (``Panel._on_container_moved``). It is the container's child, so it
    goes with it; it removes itself once no panel waits on it."""

    _EVENTS = (QEvent.Type.Move, QEvent.Type.Resize, QEvent.Type.Show)

    def __init__(self, widget: QWidget):
        super().__init__(widget)
        self.setObjectName("panel-cover-watch")
        self.panels: list[Panel] = []
        widget.installEventFilter(self)

    @classmethod
    def hold(cls, widget: QWidget, panel: Panel) -> None:
        try:
            watch = widget.findChild(cls, "panel-cover-watch", Qt.FindChildOption.FindDirectChildrenOnly)
            if watch is None:
                watch = cls(widget)
        except RuntimeError:  # the container is already deleted
            return
        if panel not in watch.panels:
            watch.panels.append(panel)

    @classmethod
    def release(cls, widget: QWidget, panel: Panel) -> None:
        try:
            watch = widget.findChild(cls, "panel-cover-watch", Qt.FindChildOption.FindDirectChildrenOnly)
        except RuntimeError:
            return
        if watch is None or panel not in watch.panels:
            return
        watch.panels.remove(panel)
        if not watch.panels:
            widget.removeEventFilter(watch)
            # Deleted later, not now: this may run while Qt walks the container's children
            # (a panel drawn in its showEvent); renamed so that ``hold`` makes a new one.
            watch.setObjectName("")
            watch.deleteLater()

    def eventFilter(self, watched, event) -> bool:
        if event.type() in self._EVENTS:
            for panel in list(self.panels):
                try:
                    panel._on_container_moved()
                except RuntimeError:  # a panel deleted without being disposed
                    self.panels.remove(panel)
        return False
