"""The main window, composed: its docks (``DockLayout``), menus (``build_menus``), status bar
(``StatusLine``), questions and boxes (``dialogs``), and what it remembers (``remembered``).

It computes nothing: it shows what the document publishes, and its File actions on the
session live in ``SessionActions`` (``window.actions``).

Tests and ``run_app`` may rely on:
- ``window.document``, ``window.actions`` (SessionActions), ``window.panels``, ``window.inputs``,
  ``window.controls``, ``window.fit`` (the Fit dock's widget), ``window.docks`` (kind →
  QDockWidget, including "inputs", "controls" and "fit"), the menu actions ``undo_action``,
  ``redo_action``, ``reset_layout_action``, ``export_matrices_action`` … (see ``menus``);
- the questions it asks (``ask_unsaved``, ``ask_open_path``, ``ask_save_path``,
  ``ask_new_choice``, ``ask_restore``, ``show_error``, ``show_warning``) are plain methods to
  monkeypatch;
- ``last_draw_ms``: the time from a ``result_changed`` to the end of every panel's redraw
  (before the first edit: the time the first show took to draw the panels);
- ``on_screen``: the kinds of the result panels whose docks are on screen (not closed, not
  tabbed away). Their ``needs`` are what the document computes for a large session.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QSize, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QMainWindow

from ..session_actions import BLANK, SessionActions
from ..settings import AppSettings
from . import dialogs, exports, menus, recovery, remembered
from .docks import DockLayout
from .status import STATUS_MESSAGE_MS, StatusLine


# Above this many keys the weights are coloured up to the largest one by default (see
# _follow_size_with_weight_colors).
MANY_KEYS = 1024

class MainWindow(QMainWindow):
    def __init__(self, document, settings: AppSettings | None = None, panels=None,
                 inputs=None, controls=None, data_dir: Path | None = None):
        super().__init__()
        self.document = document
        self.settings = settings or AppSettings()
        self._shown_once = False
        self.setObjectName("attnexplorer-main")
        self.setDockNestingEnabled(True)
        self.setDockOptions(QMainWindow.DockOption.AnimatedDocks | QMainWindow.DockOption.AllowTabbedDocks
                            | QMainWindow.DockOption.AllowNestedDocks)

        self.status = StatusLine(self, document)
        self._warnings = dialogs.WarningBox(self)
        # Connected before any panel so it runs first on every result: the start of a redraw.
        document.result_changed.connect(self.status.on_result_started)
        if inputs is None:
            from ..inputs.inputs_panel import InputsPanel

            inputs = InputsPanel(document)
        if controls is None:
            from ..controls.controls_panel import ControlsPanel

            controls = ControlsPanel(document)
        from ..fit.dock import FitDock

        self.fit = FitDock(document)
        if panels is None:
            from ..panels import make_panels

            panels = make_panels(document)
        self.inputs, self.controls, self.panels = inputs, controls, list(panels)
        # ... and this one last: every panel has redrawn when it runs.
        document.result_changed.connect(self.status.on_result_drawn)

        self.dock_layout = DockLayout(self, document, inputs, controls, self.fit, self.panels)

        self.actions = SessionActions(document, self, self.settings, data_dir=data_dir, parent=self)
        self.model_controller = None   # made on the first File ▸ Open model… (it imports the models package)
        self._lesson = None   # made on the first lesson (ui/lesson): nothing of it at start-up
        self.actions.modified_changed.connect(self._update_title)
        self.actions.path_changed.connect(self._update_title)
        self.status.install()
        self.device_label = self.status.device_label
        self.compute_label = self.status.compute_label
        self.draw_label = self.status.draw_label
        menus.build_menus(self)
        # Weights coloured up to the largest weight follows the session's size (on for a long
        # one, whose weights are all small: 0 to 1 drew a blank purple square) until the user
        # chooses in the View menu.
        self.weight_colors_chosen = False
        self.auto_weight_colors_action.triggered.connect(self._on_weight_colors_chosen)
        document.session_changed.connect(self._follow_size_with_weight_colors)
        self._follow_size_with_weight_colors()
        self.dock_layout.follow_panels()

        document.session_changed.connect(self._on_session_changed)
        document.message.connect(self.status.show_message)
        document.compute.failed.connect(self._on_compute_failed)
        self.actions.autosaver.failed.connect(self.status.show_message)
        if document.compute.last_error is not None:  # the first compute failed before we listened
            QTimer.singleShot(0, lambda: self._on_compute_failed(document.compute.last_error)
                              if document.compute.last_error is not None else None)

        self.dock_layout.arrange_default()
        self.resize(self._default_size())
        restored = remembered.restore_window(self)
        self.dock_layout.sync_applicable(document.session)
        if restored:
            self.dock_layout.sizes_pending = False
        self._update_title()
        self.status.refresh()
        icon = _app_icon()
        if icon is not None:
            self.setWindowIcon(icon)

    # -- what others read ------------------------------------------------------------------
    @property
    def docks(self):
        return self.dock_layout.docks

    @property
    def on_screen(self) -> set[str]:
        return self.dock_layout.on_screen

    @property
    def last_draw_ms(self) -> float:
        return self.status.last_draw_ms

    @last_draw_ms.setter
    def last_draw_ms(self, value: float) -> None:
        self.status.last_draw_ms = value

    # -- showing, layout, closing ----------------------------------------------------------
    def setVisible(self, visible: bool) -> None:
        first = visible and not self._shown_once
        start = time.perf_counter()
        super().setVisible(visible)  # the panels draw in their own showEvents, inside this
        if first:
            # Shown as the first draw time, so the status bar has a figure before any edit.
            self.status.first_shown((time.perf_counter() - start) * 1000.0)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.dock_layout.start_needs()
        if self.dock_layout.sizes_pending:
            QTimer.singleShot(0, self.dock_layout.apply_default_sizes)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._shown_once and event.oldSize().width() != event.size().width():
            QTimer.singleShot(0, self.dock_layout.window_resized)  # once the docks are laid out

    def reset_layout(self) -> None:
        """View ▸ Reset layout: the default arrangement, every applicable panel shown."""
        self.dock_layout.arrange_default()
        self.settings.clear_window_state()
        self.dock_layout.sync_applicable(self.document.session)

    def _default_size(self) -> QSize:
        screen = self.screen() or QGuiApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        width, height = 1260, 760
        if avail is not None and avail.width() > 0:
            # The screen's available area, less the window manager's frame and title bar.
            width, height = avail.width() - 20, avail.height() - 40
        return QSize(max(width, 640), max(height, 480))

    def save_settings(self) -> None:
        remembered.save_window(self)

    def closeEvent(self, event) -> None:
        if not self.actions.confirm_discard():
            event.ignore()
            return
        self.fit.runner.shutdown()  # the weights reached so far stay in the session
        if self.model_controller is not None:
            # The model window goes with the window whose tables it feeds: it stayed open, a
            # generation running on, and a load in progress opened it after the app had closed.
            self.model_controller.shutdown()
            self.model_controller.window.close()
        if self.lesson_started():
            self.lesson.end()  # the layout remembered is the window's own, not a step's
        self.save_settings()
        self.actions.autosaver.discard()
        event.accept()
        for panel in self.panels:
            panel.dispose()  # while the scenes are whole: see Panel.dispose

    def _on_session_changed(self, session) -> None:
        self.dock_layout.sync_applicable(session)
        self._update_title()

    def _on_weight_colors_chosen(self, _checked=False) -> None:
        self.weight_colors_chosen = True

    def _follow_size_with_weight_colors(self, *_) -> None:
        if self.weight_colors_chosen:
            return
        from ..exports.matrix_export import is_long_document

        # Not only a streamed session: above MANY_KEYS keys a row's weights average under
        # 0.001, and 0 to 1 drew a dense 4,096-token session's weights as one purple square.
        long = is_long_document(self.document) or self.document.session.n_keys > MANY_KEYS
        if self.auto_weight_colors_action.isChecked() != long:
            self.auto_weight_colors_action.setChecked(long)

    def _on_compute_failed(self, text: str) -> None:
        self.status.refresh_device()
        self.status.show_message(text, 3 * STATUS_MESSAGE_MS)
        self.show_warning("Computation failed", text)

    def _update_title(self, *_):
        # Qt appends the application display name ("— attnexplorer") itself. Set only when it
        # changes: every edit comes here, and setWindowModified, even to the same value, makes
        # the title again and sends the window a ModifiedChange event.
        title = f"{self.actions.display_name()}[*]"
        if self.windowTitle() != title:
            self.setWindowTitle(title)
        modified = self.actions.modified
        if self.isWindowModified() != modified:
            self.setWindowModified(modified)

    # -- menu actions (menus.build_menus connects them) ------------------------------------
    def open_model(self) -> None:
        """File ▸ Open model…: a real model's attention in a window of its own, a layer in the tables."""
        if self.model_controller is None:
            from ..model.controller import ModelController

            self.model_controller = ModelController(self, self.document, self.actions)
        self.model_controller.open_dialog()

    def save_edited_model(self) -> None:
        """File ▸ Save edited model as…: the opened model with its interventions folded in."""
        if self.model_controller is None or self.model_controller.behaviour.behaviour is None:
            self.show_error("Save edited model", "open a model first (File ▸ Open model…)")
            return
        self.model_controller.behaviour.save_dialog()

    def export_figure(self):
        return exports.export_figure(self)

    def export_matrices(self):
        return exports.export_matrices(self)

    def fill_copy_tsv_menu(self) -> None:
        exports.fill_copy_tsv_menu(self.copy_tsv_menu, self.document, self.copy_matrix_tsv)

    def copy_matrix_tsv(self, name: str) -> None:
        exports.copy_matrix_tsv(self.document, self.status, name)

    def copy_torch_code(self) -> None:
        exports.copy_torch_code(self.document, self.status)

    def copy_selection(self) -> None:
        exports.copy_selection(self.status)

    def set_overview_pool(self, pool: str) -> None:
        """View ▸ Zoomed-out heatmaps: max- or mean-pooled (remembered)."""
        self.pool_actions[pool].setChecked(True)
        self.settings.set_overview_pool(pool)
        menus.apply_overview_pool(self.document, self.panels, pool)

    def set_number_format(self, number_format: str) -> None:
        """View ▸ Numbers in cells."""
        self.number_format_actions[number_format].setChecked(True)
        self.settings.set_number_format(number_format)
        menus.apply_number_format(self.panels, number_format)

    def offer_recovery(self) -> bool:
        """At start-up: offer work left by a window that crashed; True when something was restored."""
        return recovery.offer_recovery(self)

    # -- lessons (ui/lesson) -----------------------------------------------------------------
    @property
    def lesson(self):
        """The lesson controller (``ui/lesson/controller.py``), made when first used."""
        if self._lesson is None:
            from ..lesson.controller import LessonController

            self._lesson = LessonController(self)
        return self._lesson

    def lesson_started(self) -> bool:
        return self._lesson is not None and self._lesson.active

    def open_lesson_path(self, path) -> bool:
        from ..lesson.actions import open_lesson_path

        return open_lesson_path(self, path)

    def ask_lesson_path(self) -> str | None:
        from ..lesson.actions import ask_lesson_path

        return ask_lesson_path(self, f"{self.actions.display_name().split(' ')[0]}-lesson.json")

    def ask_handout(self) -> tuple[str, str] | None:
        from ..lesson.actions import ask_handout

        return ask_handout(self, str(self.actions.path.parent) if self.actions.path else "")

    # -- questions and boxes (monkeypatched by tests) --------------------------------------
    def ask_unsaved(self) -> str:
        """"save", "discard" or "cancel"."""
        return dialogs.ask_unsaved(self, self.actions.display_name())

    def ask_open_path(self) -> str | None:
        return dialogs.ask_open_path(self, str(self.actions.path.parent) if self.actions.path else "")

    def ask_save_path(self, current: Path | None) -> str | None:
        start = str(current) if current else f"{self.actions.display_name().split(' ')[0]}.json"
        return dialogs.ask_save_path(self, start)

    def ask_new_choice(self) -> str | None:
        """A preset name, "blank", or None when cancelled."""
        return dialogs.ask_new_choice(self, BLANK)

    def ask_restore(self, recovery) -> bool:
        return dialogs.ask_restore(self, recovery)

    def show_error(self, title: str, text: str) -> None:
        dialogs.show_error(self, title, text)

    def show_warning(self, title: str, text: str) -> None:
        """Non-blocking: an engine fault must never stop the event loop (or a test)."""
        self._warnings.show(title, text)

    def show_text(self, title: str, html: str):
        return dialogs.show_text(self, title, html)


def _app_icon() -> QIcon | None:
    try:
        from ...paths import app_icon_path

        return QIcon(str(app_icon_path()))
    except (ImportError, OSError, ValueError):
        return None
