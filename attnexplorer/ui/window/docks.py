"""The window's docks: one per input widget and per result panel, where each goes by default,
which apply to the session, which are on screen, and what those on screen need computed.

Every dock is named ``dock-<kind>`` so that ``saveState``/``restoreState`` find it again.
A new result panel needs nothing here: ``panels.make_panels`` lists it and it lands as a tab
behind the first main panel unless its kind is named in one of the rows below.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QTabBar

from ..inputs.widgets import scrolling
from ..wheel_guard import guard_wheel

# Where each result panel goes by default. The "main" pair sits side by side along the top and
# the "detail" pair side by side beneath it, spanning the same width. A "context" panel (the
# sine signal plot, the 2-D embedding scatter) is a tab beside the last main panel, brought to
# the front by a click on its tab; any other kind is a tab behind the first main panel, so a new
# panel kind always has a place. Two panels per row keeps the panels' minimum widths inside a
# 1280-pixel screen next to the inputs.
MAIN_KINDS = ("weights", "scaled_scores")
CONTEXT_KINDS = ("signal", "embedding_scatter")
DETAIL_KINDS = ("query", "explain")
# A preset's own picture: when a session starts to have one, its tab comes to the front (the
# sine signal beside the weights; RoPE's pair plane and offset beside the scaled scores, which
# the offset leaves unchanged).
FRONT_KINDS = ("signal", "rope")
# The height the Fit dock grows to when its tab comes forward (its rows, the target and the
# loss curve); at most two thirds of the left column, so the inputs' tables stay in view.
FIT_HEIGHT = 470

# The Inputs dock's default width in px (at least, at most): its tables need about 400 px.
INPUTS_WIDTH = (380, 440)


class WholeTabTitles(QObject):
    """The tab bars of tabbed docks write their titles whole and scroll when they do not fit:
    Qt elides them by default, and a row of six at 1280 px read "Wei…", "Q · K…", "Raw sc…".
    Installed on the main window, whose layout makes a tab bar whenever docks are tabbed."""

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.ChildPolished and isinstance(event.child(), QTabBar):
            event.child().setElideMode(Qt.TextElideMode.ElideNone)
            event.child().setUsesScrollButtons(True)
        return False


class DockLayout:
    """The docks of ``window`` and their arrangement.

    ``docks`` maps a kind ("inputs", "controls", "fit", or a panel's ``kind``) to its
    QDockWidget, in the order they were added (the View menu lists them in that order).
    ``on_screen`` holds the kinds of the result panels whose docks are on screen (not closed,
    not tabbed away); their ``needs`` are what the document computes for a large session.
    """

    def __init__(self, window, document, inputs, controls, fit, panels):
        self.window, self.document = window, document
        self.inputs, self.panels = inputs, panels
        self.docks: dict[str, QDockWidget] = {}
        self.on_screen: set[str] = set()
        self.sizes_pending = False
        self._auto_hidden: set[str] = set()
        self._started = False
        self._whole_titles = WholeTabTitles(window)
        window.installEventFilter(self._whole_titles)
        self._fronted: set[str] = set()  # FRONT_KINDS that applied at the last sync
        # Tables and sliders scroll rather than push the window past a 1280×800 screen (the
        # Inputs page by page, under its tabs); a wheel turn over them scrolls, it changes a
        # control only once that has focus.
        self._add("inputs", "Inputs", inputs)
        self._add("controls", "Controls", scrolling(controls))
        self._add("fit", "Fit", scrolling(fit))
        for kind in ("inputs", "controls", "fit"):
            guard_wheel(self.docks[kind].widget())
        self.docks["fit"].visibilityChanged.connect(self._on_fit_visibility)
        for panel in panels:
            # The tab shows the short title (long ones were cut to "Queries …"); the View menu
            # and the tooltip the full one.
            dock = self._add(panel.kind, getattr(panel, "short_title", None) or panel.title, panel)
            dock.toggleViewAction().setText(panel.title)
            dock.setToolTip(panel.title)

    def _add(self, kind: str, title: str, widget) -> QDockWidget:
        dock = QDockWidget(title, self.window)
        dock.setObjectName(f"dock-{kind}")
        dock.setWidget(widget)
        dock.toggleViewAction().setText(title)
        self.docks[kind] = dock
        return dock

    # -- the default arrangement ---------------------------------------------------------
    def arrange_default(self) -> None:
        """Inputs and controls on the left; weights and scaled scores side by side on the
        right, the selected query's bars and the explanation beneath them; the rest as tabs."""
        window = self.window
        right = Qt.DockWidgetArea.RightDockWidgetArea
        left = Qt.DockWidgetArea.LeftDockWidgetArea
        for dock in self.docks.values():
            dock.setFloating(False)
            window.removeDockWidget(dock)
        window.addDockWidget(left, self.docks["inputs"])
        window.addDockWidget(left, self.docks["controls"])
        window.splitDockWidget(self.docks["inputs"], self.docks["controls"], Qt.Orientation.Vertical)
        # The Fit dock is a tab behind Controls: a click brings it forward, and its heatmap and
        # loss curve get the whole left column's width.
        window.tabifyDockWidget(self.docks["controls"], self.docks["fit"])
        self.docks["controls"].raise_()
        kinds = [p.kind for p in self.panels]
        main = [k for k in MAIN_KINDS if k in kinds] or kinds[:1]
        detail = [k for k in DETAIL_KINDS if k in kinds and k not in main]
        context = [k for k in CONTEXT_KINDS if k in kinds and k not in main + detail]
        rest = [k for k in kinds if k not in main + detail + context]
        if main:
            first = self.docks[main[0]]
            window.addDockWidget(right, first)
            # The vertical split first, so the detail row spans the whole width below.
            if detail:
                window.splitDockWidget(first, self.docks[detail[0]], Qt.Orientation.Vertical)
                for before, kind in zip(detail, detail[1:]):
                    window.splitDockWidget(self.docks[before], self.docks[kind], Qt.Orientation.Horizontal)
            for before, kind in zip(main, main[1:]):
                window.splitDockWidget(self.docks[before], self.docks[kind], Qt.Orientation.Horizontal)
            for kind in context:
                window.tabifyDockWidget(self.docks[main[-1]], self.docks[kind])
            for kind in rest:
                window.tabifyDockWidget(first, self.docks[kind])
            first.raise_()
        for dock in self.docks.values():
            dock.show()
        self._auto_hidden.clear()
        self.sizes_pending = True
        if window.isVisible():
            self.apply_default_sizes()

    def apply_default_sizes(self) -> None:
        """Share the width and height out between the default docks. Only meaningful once the
        window has its real size, so it runs on the first show (or right away on a reset)."""
        window = self.window
        self.sizes_pending = False
        kinds = [p.kind for p in self.panels]
        main = [self.docks[k] for k in MAIN_KINDS if k in kinds]
        detail = [self.docks[k] for k in DETAIL_KINDS if k in kinds]
        height = window.height()
        self._share_width(main, detail)
        if main and detail:
            window.resizeDocks([main[0], detail[0]], [55, 45], Qt.Orientation.Vertical)
        # The inputs' tables get the rows they hold (MatrixTableView.sizeHint), up to three
        # quarters of the height; the controls get the rest and scroll.
        wanted = self.inputs.sizeHint().height() + 40  # and the dock's title and tabs
        share = min(0.75, max(0.5, wanted / max(height - 60, 1)))
        window.resizeDocks([self.docks["inputs"], self.docks["controls"]], [int(share * 100), int((1 - share) * 100)],
                           Qt.Orientation.Vertical)

    def _share_width(self, main, detail) -> None:
        """The inputs get what their tables need (about 400 px), never half a wide screen: the
        plots take the rest. (Every dock of a row is sized in one call: sizing only the first
        dock of the right-hand area leaves the left one half the window.)"""
        window = self.window
        width = window.width()
        inputs = max(INPUTS_WIDTH[0], min(INPUTS_WIDTH[1], int(width * 0.3)))
        rest = max(width - inputs, 1)
        if main:
            window.resizeDocks([self.docks["inputs"], *main], [inputs] + [rest // len(main)] * len(main),
                               Qt.Orientation.Horizontal)
        if len(detail) == 2:  # the explanation's lines are long; give it nearly half
            window.resizeDocks([self.docks["inputs"], *detail], [inputs, int(rest * 0.55), int(rest * 0.45)],
                               Qt.Orientation.Horizontal)

    def window_resized(self) -> None:
        """After the window grew (maximised by the window manager after its first show), Qt
        gave the extra width to every column alike: the Inputs took 947 of 1,900 px. Where
        the Inputs now hold more than a third of the window and more than their widest
        default, the plots get the width back; where the window shrank back and left them too
        narrow for their tables, the Inputs get theirs (only the widths change)."""
        inputs = self.docks["inputs"]
        if self.sizes_pending or inputs.isFloating() or not inputs.isVisible():
            return
        too_wide = inputs.width() > max(INPUTS_WIDTH[1] + 40, self.window.width() / 3)
        too_narrow = inputs.width() < INPUTS_WIDTH[0] - 60 and self.window.width() >= 1000  # shrunk back
        if too_wide or too_narrow:
            kinds = [p.kind for p in self.panels]
            self._share_width([self.docks[k] for k in MAIN_KINDS if k in kinds],
                              [self.docks[k] for k in DETAIL_KINDS if k in kinds])

    # -- which panels apply, which are on screen ------------------------------------------
    def sync_applicable(self, session) -> None:
        """Hide panels with nothing to show for this session and bring them back when they
        apply again, without overriding a panel the user hid by hand."""
        for panel in self.panels:
            dock = self.docks[panel.kind]
            applies = bool(panel.applies_to(session))
            dock.toggleViewAction().setEnabled(applies)
            if not applies and not dock.isHidden():
                self._auto_hidden.add(panel.kind)
                dock.hide()
            elif applies and panel.kind in self._auto_hidden:
                self._auto_hidden.discard(panel.kind)
                dock.show()
                panel.refresh()
        # A FRONT_KINDS panel that starts to apply comes to the front of its tabs (after the
        # event loop has laid the docks out; raising a tab before that does not switch it).
        for kind in FRONT_KINDS:
            dock = self.docks.get(kind)
            applies_now = dock is not None and not dock.isHidden()
            if applies_now and kind not in self._fronted:
                QTimer.singleShot(0, dock.raise_)
                self._fronted.add(kind)
            elif not applies_now:
                self._fronted.discard(kind)

    def forget_auto_hidden(self) -> None:
        """A restored layout brings back the visibility the user chose; applicability is
        re-checked afterwards with ``sync_applicable``."""
        self._auto_hidden.clear()

    def auto_hidden(self) -> list[str]:
        """The kinds hidden only because they do not apply to the session."""
        return [k for k in self._auto_hidden if k in self.docks]

    def follow_panels(self) -> None:
        """Give each panel its "Export figure…" entry when its dock is first shown, and
        follow which panels are on screen.

        Installing the entry needs the panel's figure item, which draws a stale panel; doing
        that for every panel at start-up drew the ones hidden in tabs too (a quarter of a
        second before the first paint). A panel that is not on screen cannot be right-clicked."""
        self._menus_pending = {panel.kind: panel for panel in self.panels}
        for panel in self.panels:
            self.docks[panel.kind].visibilityChanged.connect(
                lambda visible, kind=panel.kind: self._on_dock_visibility(kind, visible))

    def start_needs(self) -> None:
        """The window is shown: from now on, tell the document what the panels on screen read."""
        self._started = True
        self.update_needs()

    def _on_fit_visibility(self, visible: bool) -> None:
        """The Fit tab brought forward gets the height its target and loss curve need.

        It shares the left column with the inputs, which keep most of it; a fit's heatmap
        and loss curve were then a few pixels high. Only a Fit dock shorter than it needs
        grows, so a height the user chose is kept."""
        fit, inputs = self.docks["fit"], self.docks["inputs"]
        if not visible or fit.isFloating() or not inputs.isVisible() or not self.window.isVisible():
            return
        if self.window.dockWidgetArea(fit) != self.window.dockWidgetArea(inputs):
            return
        total = fit.height() + inputs.height()
        wanted = min(FIT_HEIGHT, int(total * 0.66))
        if fit.height() < wanted:
            self.window.resizeDocks([inputs, fit], [total - wanted, wanted], Qt.Orientation.Vertical)

    def _on_dock_visibility(self, kind: str, visible: bool) -> None:
        # Qt says this for a dock shown or hidden and for a tab brought to the front or covered.
        if visible:
            self.on_screen.add(kind)
            self._install_panel_menu(kind)
        else:
            self.on_screen.discard(kind)
        self.update_needs()

    def update_needs(self) -> None:
        """Tell the document what the on-screen panels read (a panel that does not say
        needs everything); a large session computes only that."""
        if not self._started:
            return  # before the first show nothing is on screen yet; start_needs says it
        needs: set[str] = set()
        for panel in self.panels:
            if panel.kind in self.on_screen:
                wanted = panel_needs(panel)
                if wanted is None:
                    self.document.compute.set_needs(None)
                    return
                needs |= wanted
        self.document.compute.set_needs(needs)

    def _install_panel_menu(self, kind: str) -> None:
        panel = self._menus_pending.pop(kind, None)
        if panel is not None:
            from ..exports.figure_dialog import install_export_menu

            install_export_menu(panel, self.window)


def panel_needs(panel) -> frozenset[str] | None:
    """The intermediates ``panel`` reads, or None (everything) for a panel that does not say:
    ``Panel.needs`` is None until a panel class names what it reads."""
    needs = getattr(panel, "needs", None)
    return None if needs is None else frozenset(needs)


