"""The main window: every input and result panel in a dock, the menus and the status bar.

``MainWindow(document)`` builds the inputs and controls docks on the left and one dock per
result panel (``panels.make_panels``) on the right, named ``dock-<panel.kind>`` so that
``saveState``/``restoreState`` find them again. It computes nothing: it shows what the
document publishes, and its File actions live in ``SessionActions``.

Tests and ``run_app`` may rely on:
- ``window.document``, ``window.actions`` (SessionActions), ``window.panels``, ``window.fit``
  (the Fit dock's widget), ``window.docks`` (kind → QDockWidget, including "inputs", "controls"
  and "fit"), the menu actions
  ``undo_action``, ``redo_action``, ``reset_layout_action``, ``export_matrices_action`` …;
- the questions it asks (``ask_unsaved``, ``ask_open_path``, ``ask_save_path``,
  ``ask_new_choice``, ``ask_restore``, ``show_error``) are plain methods to monkeypatch;
- ``last_draw_ms``: the time from a ``result_changed`` to the end of every panel's redraw
  (before the first edit: the time the first show took to draw the panels);
- ``on_screen``: the kinds of the result panels whose docks are on screen (not closed, not
  tabbed away). Their ``needs`` are what the document computes for a large session.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QDockWidget,
    QFileDialog,
    QFrame,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
)

from .autosave import remove_recovery, scan_recoveries
from .session_actions import BLANK, SessionActions
from .settings import LAYOUT_VERSION, AppSettings

# Where each result panel goes by default. The "main" pair sits side by side along the top and
# the "detail" pair side by side beneath it, spanning the same width. A "context" panel (the
# sine signal plot, the 2-D embedding scatter) is a tab beside the last main panel, brought to
# the front by a click on its tab; any other kind is a tab behind the first main panel, so a new
# panel kind always has a place. Two panels per row keeps the panels' minimum widths inside a
# 1280-pixel screen next to the inputs.
MAIN_KINDS = ("weights", "scaled_scores")
CONTEXT_KINDS = ("signal", "embedding_scatter")
DETAIL_KINDS = ("query", "explain")
STATUS_MESSAGE_MS = 5000


# The Inputs dock's default width in px (at least, at most): its tables need about 400 px.
INPUTS_WIDTH = (380, 440)

class MainWindow(QMainWindow):
    def __init__(self, document, settings: AppSettings | None = None, panels=None,
                 inputs=None, controls=None, data_dir: Path | None = None):
        super().__init__()
        self.document = document
        self.settings = settings or AppSettings()
        self._data_dir = data_dir
        self.last_draw_ms = 0.0
        self._draw_started: float | None = None
        self._auto_hidden: set[str] = set()
        self.setObjectName("attnexplorer-main")
        self.setDockNestingEnabled(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                            | QMainWindow.DockOption.AllowNestedDocks)

        # Connected before any panel so it runs first on every result: the start of a redraw.
        document.result_changed.connect(self._on_result_started)
        if inputs is None:
            from .inputs import InputsPanel

            inputs = InputsPanel(document)
        if controls is None:
            from .controls import ControlsPanel

            controls = ControlsPanel(document)
        from .fit_dock import FitDock

        self.fit = FitDock(document)
        if panels is None:
            from .panels import make_panels

            panels = make_panels(document)
        self.inputs, self.controls, self.panels = inputs, controls, list(panels)
        # ... and this one last: every panel has redrawn when it runs.
        document.result_changed.connect(self._on_result_drawn)

        self.docks: dict[str, QDockWidget] = {}
        # Tables and sliders scroll rather than push the window past a 1280×800 screen.
        self._add_dock("inputs", "Inputs", _scrolling(inputs))
        self._add_dock("controls", "Controls", _scrolling(controls))
        self._add_dock("fit", "Fit", _scrolling(self.fit))
        for panel in self.panels:
            # The tab shows the short title (long ones were cut to "Queries …"); the View menu
            # and the tooltip the full one.
            dock = self._add_dock(panel.kind, getattr(panel, "short_title", None) or panel.title, panel)
            dock.toggleViewAction().setText(panel.title)
            dock.setToolTip(panel.title)
        self.on_screen: set[str] = set()
        self._shown_once = False

        self.actions = SessionActions(document, self, self.settings, data_dir=data_dir, parent=self)
        self.model_controller = None   # made on the first File ▸ Open model… (it imports the models package)
        self.actions.modified_changed.connect(self._update_title)
        self.actions.path_changed.connect(self._update_title)
        self._make_status_bar()
        self._make_menus()
        self._install_panel_menus()

        document.session_changed.connect(self._on_session_changed)
        document.message.connect(self._on_message)
        document.compute_failed.connect(self._on_compute_failed)
        self.actions.autosaver.failed.connect(self._on_message)
        if document.last_error is not None:  # the first compute failed before we listened
            QTimer.singleShot(0, lambda: self._on_compute_failed(document.last_error)
                              if document.last_error is not None else None)

        self._arrange_default()
        self.resize(self._default_size())
        restored = self._restore_settings()
        self._sync_applicable(document.session)
        if restored:
            self._sizes_pending = False
        self._update_title()
        self._update_status()
        icon = _app_icon()
        if icon is not None:
            self.setWindowIcon(icon)

    # -- docks -----------------------------------------------------------------------------
    def _add_dock(self, kind: str, title: str, widget) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{kind}")
        dock.setWidget(widget)
        dock.toggleViewAction().setText(title)
        self.docks[kind] = dock
        return dock

    def _arrange_default(self) -> None:
        """Inputs and controls on the left; weights and scaled scores side by side on the
        right, the selected query's bars and the explanation beneath them; the rest as tabs."""
        right = Qt.DockWidgetArea.RightDockWidgetArea
        left = Qt.DockWidgetArea.LeftDockWidgetArea
        for dock in self.docks.values():
            dock.setFloating(False)
            self.removeDockWidget(dock)
        self.addDockWidget(left, self.docks["inputs"])
        self.addDockWidget(left, self.docks["controls"])
        self.splitDockWidget(self.docks["inputs"], self.docks["controls"], Qt.Orientation.Vertical)
        # The Fit dock is a tab behind Controls: a click brings it forward, and its heatmap and
        # loss curve get the whole left column's width.
        self.tabifyDockWidget(self.docks["controls"], self.docks["fit"])
        self.docks["controls"].raise_()
        kinds = [p.kind for p in self.panels]
        main = [k for k in MAIN_KINDS if k in kinds] or kinds[:1]
        detail = [k for k in DETAIL_KINDS if k in kinds and k not in main]
        context = [k for k in CONTEXT_KINDS if k in kinds and k not in main + detail]
        rest = [k for k in kinds if k not in main + detail + context]
        if main:
            first = self.docks[main[0]]
            self.addDockWidget(right, first)
            # The vertical split first, so the detail row spans the whole width below.
            if detail:
                self.splitDockWidget(first, self.docks[detail[0]], Qt.Orientation.Vertical)
                for before, kind in zip(detail, detail[1:]):
                    self.splitDockWidget(self.docks[before], self.docks[kind], Qt.Orientation.Horizontal)
            for before, kind in zip(main, main[1:]):
                self.splitDockWidget(self.docks[before], self.docks[kind], Qt.Orientation.Horizontal)
            for kind in context:
                self.tabifyDockWidget(self.docks[main[-1]], self.docks[kind])
            for kind in rest:
                self.tabifyDockWidget(first, self.docks[kind])
            first.raise_()
        for dock in self.docks.values():
            dock.show()
        self._auto_hidden.clear()
        self._sizes_pending = True
        if self.isVisible():
            self._apply_default_sizes()

    def _apply_default_sizes(self) -> None:
        """Share the width and height out between the default docks. Only meaningful once the
        window has its real size, so it runs on the first show (or right away on a reset)."""
        self._sizes_pending = False
        kinds = [p.kind for p in self.panels]
        main = [self.docks[k] for k in MAIN_KINDS if k in kinds]
        detail = [self.docks[k] for k in DETAIL_KINDS if k in kinds]
        width, height = self.width(), self.height()
        # The inputs get what their tables need (about 400 px), never half a wide screen: the
        # plots take the rest. (Every dock of a row is sized in one call: sizing only the
        # first dock of the right-hand area leaves the left one half the window.)
        inputs = max(INPUTS_WIDTH[0], min(INPUTS_WIDTH[1], int(width * 0.3)))
        rest = max(width - inputs, 1)
        if main:
            self.resizeDocks([self.docks["inputs"], *main], [inputs] + [rest // len(main)] * len(main),
                             Qt.Orientation.Horizontal)
        if main and detail:
            self.resizeDocks([main[0], detail[0]], [55, 45], Qt.Orientation.Vertical)
        if len(detail) == 2:  # the explanation's lines are long; give it nearly half
            self.resizeDocks([self.docks["inputs"], *detail], [inputs, int(rest * 0.55), int(rest * 0.45)],
                             Qt.Orientation.Horizontal)
        # The inputs' tables get the rows they hold (MatrixTableView.sizeHint), up to three
        # quarters of the height; the controls get the rest and scroll.
        wanted = self.inputs.sizeHint().height() + 40  # and the dock's title and tabs
        share = min(0.75, max(0.5, wanted / max(height - 60, 1)))
        self.resizeDocks([self.docks["inputs"], self.docks["controls"]], [int(share * 100), int((1 - share) * 100)],
                         Qt.Orientation.Vertical)

    def setVisible(self, visible: bool) -> None:
        first = visible and not self._shown_once
        start = time.perf_counter()
        super().setVisible(visible)  # the panels draw in their own showEvents, inside this
        if first and self.last_draw_ms == 0.0:
            # Shown as the first draw time, so the status bar has a figure before any edit.
            self.last_draw_ms = (time.perf_counter() - start) * 1000.0
            self._update_status()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self._update_needs()
        if self._sizes_pending:
            QTimer.singleShot(0, self._apply_default_sizes)

    def reset_layout(self) -> None:
        """View ▸ Reset layout: the default arrangement, every applicable panel shown."""
        self._arrange_default()
        self.settings.clear_window_state()
        self._sync_applicable(self.document.session)

    def _default_size(self):
        screen = self.screen() or QGuiApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        width, height = 1260, 760
        if avail is not None and avail.width() > 0:
            # The screen's available area, less the window manager's frame and title bar.
            width, height = avail.width() - 20, avail.height() - 40
        from PySide6.QtCore import QSize

        return QSize(max(width, 640), max(height, 480))

    def _sync_applicable(self, session) -> None:
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
        # The signal plot is the sine walkthrough's picture: when a session starts to have one,
        # bring its tab to the front, beside the attention matrix (after the event loop has
        # laid the docks out; raising a tab before that does not switch it).
        signal = self.docks.get("signal")
        applies_now = signal is not None and not signal.isHidden()
        if applies_now and not getattr(self, "_signal_applied", False):
            QTimer.singleShot(0, signal.raise_)
        self._signal_applied = applies_now

    # -- menus -----------------------------------------------------------------------------
    def _make_menus(self) -> None:
        a = self.actions
        bar = self.menuBar()
        file = bar.addMenu("&File")
        file.addAction(a.new_action)
        file.addAction(a.open_action)
        file.addMenu(a.recent_menu)
        self.open_model_action = file.addAction("Open &model…", self.open_model)
        file.addSeparator()
        file.addAction(a.save_action)
        file.addAction(a.save_as_action)
        file.addSeparator()
        self.export_figure_action = file.addAction("Export &figure…", self.export_figure)
        self.export_matrices_action = file.addAction("Export &matrices…", self.export_matrices)
        self.copy_tsv_menu = file.addMenu("Copy matrix as &TSV")
        self.copy_tsv_menu.aboutToShow.connect(self._rebuild_copy_tsv_menu)
        self.copy_torch_action = file.addAction("Copy as &PyTorch code", self.copy_torch_code)
        file.addSeparator()
        self.quit_action = file.addAction("&Quit", self.close)
        self.quit_action.setShortcut(QKeySequence("Ctrl+Q"))

        edit = bar.addMenu("&Edit")
        self.undo_action = self.document.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcut(QKeySequence("Ctrl+Z"))
        self.redo_action = self.document.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        edit.addAction(self.undo_action)
        edit.addAction(self.redo_action)
        edit.addSeparator()
        self.copy_action = edit.addAction("&Copy selection", self.copy_selection)
        self.copy_action.setShortcut(QKeySequence.StandardKey.Copy)
        # Only while no table has the focus: a table copies its own cells with the same keys.
        self.copy_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)

        presets = bar.addMenu("&Presets")
        from ..core.presets import list_presets

        self.preset_actions = {}
        for preset in list_presets():
            act = presets.addAction(f"{preset.title}", lambda n=preset.name: self.actions.new_session(n))
            act.setStatusTip(preset.description)
            self.preset_actions[preset.name] = act
        presets.addSeparator()
        presets.addAction("Blank session", lambda: self.actions.new_session(BLANK))

        view = bar.addMenu("&View")
        for dock in self.docks.values():
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        self._build_number_menu(view.addMenu("Numbers in &cells"))
        self.auto_weight_colors_action = view.addAction("&Weights coloured up to the largest weight")
        self.auto_weight_colors_action.setCheckable(True)
        self.auto_weight_colors_action.setToolTip("Off: weights coloured 0 to 1. On: 0 to the largest weight "
                                                  "shown, for long sentences whose weights are all small")
        self.auto_weight_colors_action.toggled.connect(self._on_auto_weight_colors)
        self.reset_layout_action = view.addAction("&Reset layout", self.reset_layout)

        help_menu = bar.addMenu("&Help")
        self.how_to_read_action = help_menu.addAction("How to &read this", lambda: self._show_text(
            "How to read this", HOW_TO_READ))
        self.shortcuts_action = help_menu.addAction("&Keyboard shortcuts", lambda: self._show_text(
            "Keyboard shortcuts", _shortcuts_html(self)))
        self.about_action = help_menu.addAction("&About attnexplorer", lambda: self._show_text(
            "About attnexplorer", _about_html()))
        for act in (a.new_action, a.open_action, a.save_action, a.save_as_action, self.quit_action,
                    self.undo_action, self.redo_action):
            self.addAction(act)  # shortcuts work even while the menu bar is hidden (macOS, kiosk)

    def _install_panel_menus(self) -> None:
        """Give each panel its "Export figure…" entry when its dock is first shown, and
        follow which panels are on screen.

        Installing the entry needs the panel's figure item, which draws a stale panel; doing
        that for every panel at start-up drew the ones hidden in tabs too (a quarter of a
        second before the first paint). A panel that is not on screen cannot be right-clicked."""
        self._menus_pending = {panel.kind: panel for panel in self.panels}
        for panel in self.panels:
            self.docks[panel.kind].visibilityChanged.connect(
                lambda visible, kind=panel.kind: self._on_dock_visibility(kind, visible))

    def _on_dock_visibility(self, kind: str, visible: bool) -> None:
        # Qt says this for a dock shown or hidden and for a tab brought to the front or covered.
        if visible:
            self.on_screen.add(kind)
            self._install_panel_menu(kind)
        else:
            self.on_screen.discard(kind)
        self._update_needs()

    def _update_needs(self) -> None:
        """Tell the document what the on-screen panels read (a panel that does not say
        needs everything); a large session computes only that."""
        if not self._shown_once:
            return  # before the first show nothing is on screen yet; showEvent says it
        needs: set[str] = set()
        for panel in self.panels:
            if panel.kind in self.on_screen:
                wanted = _panel_needs(panel)
                if wanted is None:
                    self.document.set_needs(None)
                    return
                needs |= wanted
        self.document.set_needs(needs)

    def _install_panel_menu(self, kind: str) -> None:
        panel = self._menus_pending.pop(kind, None)
        if panel is not None:
            from .figure_dialog import install_export_menu

            install_export_menu(panel, self)

    # -- status bar ------------------------------------------------------------------------
    def _make_status_bar(self) -> None:
        bar = self.statusBar()
        self.device_label = QLabel()
        self.compute_label = QLabel()
        self.draw_label = QLabel()
        for label in (self.device_label, self.compute_label, self.draw_label):
            label.setContentsMargins(6, 0, 6, 0)
            bar.addPermanentWidget(label)
        # The timings change on every edit. A label whose size can change asks the window to
        # lay itself out again, which repaints the whole window; at a fixed size wide enough
        # for any timing, only the label repaints.
        for label, widest in ((self.compute_label, "compute 00000.0 ms"), (self.draw_label, "draw 00000.0 ms")):
            label.setText(widest)
            label.setFixedSize(label.sizeHint())
            label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def _update_device(self) -> None:
        self.device_label.setText(f"{self.document.device} · {self.document.dtype}")

    def _on_result_started(self, _result) -> None:
        self._draw_started = time.perf_counter()

    def _on_result_drawn(self, _result) -> None:
        if self._draw_started is not None:
            self.last_draw_ms = (time.perf_counter() - self._draw_started) * 1000.0
            self._draw_started = None
        self._update_status()

    def _update_status(self) -> None:
        self.compute_label.setText(f"compute {self.document.last_compute_ms:.1f} ms")
        self.draw_label.setText(f"draw {self.last_draw_ms:.1f} ms" if self.last_draw_ms else "draw –")
        self._update_device()

    def _on_message(self, text: str) -> None:
        self.statusBar().showMessage(text, STATUS_MESSAGE_MS)

    def _on_compute_failed(self, text: str) -> None:
        self._update_device()
        self.statusBar().showMessage(text, 3 * STATUS_MESSAGE_MS)
        self.show_warning("Computation failed", text)

    def _on_session_changed(self, session) -> None:
        self._sync_applicable(session)
        self._update_title()

    def _update_title(self, *_):
        # Qt appends the application display name ("— attnexplorer") itself.
        self.setWindowTitle(f"{self.actions.display_name()}[*]")
        self.setWindowModified(self.actions.modified)

    # -- questions (monkeypatched by tests) -------------------------------------------------
    def ask_unsaved(self) -> str:
        """"save", "discard" or "cancel"."""
        box = QMessageBox(QMessageBox.Icon.Warning, "Unsaved changes",
                          f"{self.actions.display_name()} has unsaved changes. Save them first?",
                          QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                          | QMessageBox.StandardButton.Cancel, self)
        box.setDefaultButton(QMessageBox.StandardButton.Save)
        answer = box.exec()
        return {QMessageBox.StandardButton.Save: "save",
                QMessageBox.StandardButton.Discard: "discard"}.get(QMessageBox.StandardButton(answer), "cancel")

    def ask_open_path(self) -> str | None:
        start = str(self.actions.path.parent) if self.actions.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open session", start,
                                              "attnexplorer sessions (*.json);;All files (*)")
        return path or None

    def ask_save_path(self, current: Path | None) -> str | None:
        start = str(current) if current else f"{self.actions.display_name().split(' ')[0]}.json"
        path, _ = QFileDialog.getSaveFileName(self, "Save session", start,
                                              "attnexplorer sessions (*.json);;All files (*)")
        return path or None

    def ask_new_choice(self) -> str | None:
        """A preset name, "blank", or None when cancelled."""
        from ..core.presets import list_presets

        choices = [(p.title, p.name) for p in list_presets()] + [("Blank session", BLANK)]
        label, ok = QInputDialog.getItem(self, "New session", "Start from:", [c[0] for c in choices], 0, False)
        return dict(choices).get(label) if ok else None

    def ask_restore(self, recovery) -> bool:
        answer = QMessageBox.question(
            self, "Recover unsaved work",
            f"attnexplorer did not close normally last time.\n\n{recovery.describe()}\n\nRestore it?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes)
        return answer == QMessageBox.StandardButton.Yes

    def show_error(self, title: str, text: str) -> None:
        QMessageBox.critical(self, title, text)

    def show_warning(self, title: str, text: str) -> None:
        """Non-blocking: an engine fault must never stop the event loop (or a test)."""
        box = getattr(self, "_warning_box", None)
        if box is None:
            box = self._warning_box = QMessageBox(QMessageBox.Icon.Warning, title, text,
                                                  QMessageBox.StandardButton.Ok, self)
        box.setWindowTitle(title)
        box.setText(text)
        box.open()

    def _show_text(self, title: str, html: str) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Information, title, "", QMessageBox.StandardButton.Close, self)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(html)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self._last_text_box = box
        return box

    # -- start-up and recovery -------------------------------------------------------------
    def offer_recovery(self) -> bool:
        """Offer each orphaned recovery file, newest first; restore the first one accepted.
        Each is claimed before it is offered, so two windows never offer the same one. A
        declined file is removed; unreadable ones were set aside (the status bar says where).
        Returns True when something was restored."""
        scan = scan_recoveries(self.actions.autosaver.directory)
        if scan.set_aside:
            more = f" and {len(scan.set_aside) - 1} more there" if len(scan.set_aside) > 1 else ""
            self._on_message(f"An unreadable recovery file was set aside: {scan.set_aside[0]}{more}")
        for found in scan.found:
            recovery = self.actions.autosaver.claim(found)
            if recovery is None:
                continue  # another window took it
            if self.ask_restore(recovery):
                self.actions.restore(recovery)
                return True
            remove_recovery(recovery.file)
        return False

    # -- export and copy -------------------------------------------------------------------
    def open_model(self) -> None:
        """File ▸ Open model…: a real model's attention in a window of its own, a layer in the tables."""
        if self.model_controller is None:
            from .model_window import ModelController

            self.model_controller = ModelController(self, self.document, self.actions)
        self.model_controller.open_dialog()

    def export_figure(self):
        from .figure_dialog import FigureExportDialog

        dialog = FigureExportDialog(self.panels, self)
        dialog.open()
        return dialog

    def export_matrices(self):
        from .matrix_export import MatrixExportDialog

        dialog = MatrixExportDialog(self.document, self)
        dialog.open()
        return dialog

    def _rebuild_copy_tsv_menu(self) -> None:
        from ..core.errors import AttnExplorerError
        from .matrix_export import describe, matrices_by_name

        menu = self.copy_tsv_menu
        menu.clear()
        try:
            names = list(matrices_by_name(self.document))
        except AttnExplorerError as err:
            menu.addAction(str(err)).setEnabled(False)
            return
        for name in names:
            menu.addAction(describe(name), lambda n=name: self.copy_matrix_tsv(n))

    def copy_matrix_tsv(self, name: str) -> None:
        from ..core.errors import AttnExplorerError
        from .matrix_export import copy_matrix_tsv, describe

        try:
            copy_matrix_tsv(self.document, name)
        except AttnExplorerError as err:
            self.statusBar().showMessage(str(err), STATUS_MESSAGE_MS)
            return
        self.statusBar().showMessage(f"{describe(name)} copied as tab-separated text", STATUS_MESSAGE_MS)

    def copy_torch_code(self) -> None:
        from .matrix_export import copy_torch_code

        copy_torch_code(self.document.session)
        self.statusBar().showMessage("PyTorch code for this session copied to the clipboard", STATUS_MESSAGE_MS)

    def copy_selection(self) -> None:
        """Copy the focused table's selected cells as tab-separated text."""
        focus = QApplication.focusWidget()
        if hasattr(focus, "copy_selection"):
            focus.copy_selection()
            return
        if isinstance(focus, QAbstractItemView) and focus.model() is not None:
            indexes = sorted(focus.selectedIndexes(), key=lambda i: (i.row(), i.column()))
            if indexes:
                rows: dict[int, dict[int, str]] = {}
                for i in indexes:
                    rows.setdefault(i.row(), {})[i.column()] = str(i.data(Qt.ItemDataRole.EditRole) or "")
                cols = sorted({i.column() for i in indexes})
                text = "\n".join("\t".join(r.get(c, "") for c in cols) for _, r in sorted(rows.items()))
                QGuiApplication.clipboard().setText(text)
                return
        self.statusBar().showMessage("Select cells in a table to copy them", STATUS_MESSAGE_MS)

    def _build_number_menu(self, menu) -> None:
        """View ▸ Numbers in cells: significant digits (as many as fit) or fixed decimals."""
        from PySide6.QtGui import QActionGroup

        from ..core.display import NUMBER_FORMATS

        group = QActionGroup(self)
        self.number_format_actions = {}
        chosen = self.settings.number_format()
        for key, label in NUMBER_FORMATS.items():
            action = menu.addAction(label[0].upper() + label[1:])
            action.setCheckable(True)
            action.setChecked(key == chosen)
            action.triggered.connect(lambda _checked=False, key=key: self.set_number_format(key))
            group.addAction(action)
            self.number_format_actions[key] = action
        self._apply_number_format(chosen)

    def _on_auto_weight_colors(self, on: bool) -> None:
        for panel in self.panels:
            if hasattr(panel, "set_color_range"):
                panel.set_color_range("auto" if on else "unit")

    def set_number_format(self, number_format: str) -> None:
        self.number_format_actions[number_format].setChecked(True)
        self.settings.set_number_format(number_format)
        self._apply_number_format(number_format)

    def _apply_number_format(self, number_format: str) -> None:
        for panel in self.panels:
            if hasattr(panel, "set_number_format"):
                panel.set_number_format(number_format)

    # -- settings --------------------------------------------------------------------------
    def _restore_settings(self) -> bool:
        """Geometry and dock layout from the last run; True when a layout was restored.

        The layout goes first: the saved geometry was taken with that layout's minimum sizes,
        and restoring it under the default layout could be clamped by the default's."""
        state = self.settings.window_state()
        restored = state is not None and self.restoreState(state, LAYOUT_VERSION)
        if restored:
            # restoreState brings back the visibility the user chose; applicability is
            # re-checked afterwards by the caller.
            self._auto_hidden.clear()
        geometry = self.settings.geometry()
        if geometry is not None:
            self.restoreGeometry(geometry)
        return restored

    def save_settings(self) -> None:
        self.settings.set_geometry(self.saveGeometry())
        # Panels hidden only because they do not apply are saved as shown, so that a later
        # session they apply to finds them where they were.
        hidden = [k for k in self._auto_hidden if k in self.docks]
        for kind in hidden:
            self.docks[kind].show()
        self.settings.set_window_state(self.saveState(LAYOUT_VERSION))
        for kind in hidden:
            self.docks[kind].hide()
        if self.actions.path is not None:
            self.settings.set_last_session(self.actions.path)
        self.settings.sync()

    def closeEvent(self, event) -> None:
        if not self.actions.confirm_discard():
            event.ignore()
            return
        self.fit.runner.shutdown()  # the weights reached so far stay in the session
        self.save_settings()
        self.actions.autosaver.discard()
        event.accept()
        for panel in self.panels:
            panel.dispose()  # while the scenes are whole: see Panel.dispose


def _panel_needs(panel) -> frozenset[str] | None:
    """The intermediates ``panel`` reads, or None (everything) for a panel that does not say:
    the base class's empty default is not a statement that it reads nothing."""
    from .panels.base import Panel

    for cls in type(panel).__mro__:
        if "needs" in vars(cls):
            if cls is Panel and cls is not type(panel):
                return None
            return frozenset(getattr(panel, "needs"))
    return None


def _scrolling(widget) -> QScrollArea:
    area = QScrollArea()
    area.setObjectName(f"scroll-{widget.objectName() or type(widget).__name__}")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(widget)
    return area


def _app_icon() -> QIcon | None:
    try:
        from ..paths import app_icon_path

        return QIcon(str(app_icon_path()))
    except (ImportError, OSError, ValueError):
        return None


HOW_TO_READ = """
<p>Each token's embedding (a row of <b>X</b>, in <i>Inputs</i>) is projected three times:
<b>Q</b> = X·W<sub>q</sub>, <b>K</b> = X·W<sub>k</sub>, <b>V</b> = X·W<sub>v</sub> (row vectors).</p>
<p><b>Scores</b> are Q·Kᵀ: row = the query token, column = the key token. <b>Scaled scores</b>
multiply them by 1/√d<sub>k</sub> (or divide by the temperature τ); blocked cells of the mask are
marked, not coloured. <b>Weights</b> are the softmax of each row, so every row sums to 1.
The <b>output</b> of a token is its weight row times V: a weighted average of the value vectors.</p>
<p>Click a token or a cell anywhere to select that query (and key): the <i>Query</i> panel shows
its score and weight rows as bars, and <i>Explain</i> writes out the arithmetic of that cell.</p>
<p>The presets reproduce three walkthroughs: <b>pronoun</b> (“The dog fetched the ball and she was
happy”: where does <i>she</i> look?), <b>dessert</b> (“Life is short, eat dessert first”, every
number printed in the walkthrough) and <b>sine</b> (attention as smoothing of a noisy signal,
with the temperature τ as the bandwidth). Change any input and watch everything follow.</p>
"""


def _shortcuts_html(window: MainWindow) -> str:
    rows = []
    for act in window.findChildren(QAction):
        keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in act.shortcuts())
        if keys and act.text():
            rows.append((act.text().replace("&", ""), keys))
    rows = sorted(set(rows))
    rows.append(("Copy or paste cells in a table", "Ctrl+C / Ctrl+V"))
    body = "".join(f"<tr><td>{name}</td><td>&nbsp;&nbsp;<b>{keys}</b></td></tr>" for name, keys in rows)
    return f"<table>{body}</table>"


def _about_html() -> str:
    from .. import __version__

    return (f"<p><b>attnexplorer {__version__}</b></p><p>Explore transformer self-attention by hand: "
            "edit every token, embedding and weight and watch Q, K, V, the scores, the weights and the "
            "outputs follow. Computed with PyTorch; drawn with pyqtgraph and Qt.</p><p>MIT licence.</p>")
