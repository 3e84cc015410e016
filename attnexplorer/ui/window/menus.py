"""The menu bar: File, Edit, Presets, View and Help.

``build_menus(window)`` makes every menu action and keeps the ones tests and other code use as
attributes of the window (``undo_action``, ``export_matrices_action``, ``preset_actions`` …).
A new user action goes here: an entry whose handler is a method of the window (or of
``window.actions`` for a File action on the session), and, when it has a shortcut, also in
the window-wide list at the end so it works while the menu bar is hidden.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QActionGroup, QKeySequence

from ..session_actions import BLANK
from . import help as help_pages


def build_menus(window) -> None:
    a = window.actions
    bar = window.menuBar()
    file = bar.addMenu("&File")
    file.addAction(a.new_action)
    file.addAction(a.open_action)
    file.addMenu(a.recent_menu)
    window.open_model_action = file.addAction("Open &model…", window.open_model)
    window.save_model_action = file.addAction("Save edited m&odel as…", window.save_edited_model)
    window.save_model_action.setToolTip("The opened model with its edited layers and zero-ablated heads in its "
                                        "weights, as a Hugging Face folder")
    file.addSeparator()
    file.addAction(a.save_action)
    file.addAction(a.save_as_action)
    file.addSeparator()
    window.export_figure_action = file.addAction("Export &figure…", window.export_figure)
    window.export_matrices_action = file.addAction("Export &matrices…", window.export_matrices)
    window.copy_tsv_menu = file.addMenu("Copy matrix as &TSV")
    window.copy_tsv_menu.aboutToShow.connect(window.fill_copy_tsv_menu)
    window.copy_torch_action = file.addAction("Copy as &PyTorch code", window.copy_torch_code)
    file.addSeparator()
    window.quit_action = file.addAction("&Quit", window.close)
    window.quit_action.setShortcut(QKeySequence("Ctrl+Q"))

    edit = bar.addMenu("&Edit")
    window.undo_action = window.document.undo_stack.createUndoAction(window, "&Undo")
    window.undo_action.setShortcut(QKeySequence("Ctrl+Z"))
    window.redo_action = window.document.undo_stack.createRedoAction(window, "&Redo")
    window.redo_action.setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
    edit.addAction(window.undo_action)
    edit.addAction(window.redo_action)
    edit.addSeparator()
    window.copy_action = edit.addAction("&Copy selection", window.copy_selection)
    window.copy_action.setShortcut(QKeySequence.StandardKey.Copy)
    # Only while no table has the focus: a table copies its own cells with the same keys.
    window.copy_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)

    presets = bar.addMenu("&Presets")
    from ...core.inputs.presets import list_presets

    window.preset_actions = {}
    for preset in list_presets():
        act = presets.addAction(f"{preset.title}", lambda n=preset.name: a.new_session(n))
        act.setStatusTip(preset.description)
        window.preset_actions[preset.name] = act
    presets.addSeparator()
    presets.addAction("Blank session", lambda: a.new_session(BLANK))

    view = bar.addMenu("&View")
    for dock in window.docks.values():
        view.addAction(dock.toggleViewAction())
    view.addSeparator()
    _build_number_menu(window, view.addMenu("Numbers in &cells"))
    _build_pool_menu(window, view.addMenu("&Zoomed-out heatmaps"))
    window.auto_weight_colors_action = view.addAction("&Weights coloured up to the largest weight")
    window.auto_weight_colors_action.setCheckable(True)
    window.auto_weight_colors_action.setToolTip("Off: weights coloured 0 to 1. On: 0 to the largest weight "
                                                "shown, for long sentences whose weights are all small (on by "
                                                "default for a long session, until you choose)")
    window.auto_weight_colors_action.toggled.connect(lambda on: apply_weight_colors(window.panels, on))
    window.reset_layout_action = view.addAction("&Reset layout", window.reset_layout)
    from ..lesson.actions import build_lesson_menus

    build_lesson_menus(window, file, view)

    help_menu = bar.addMenu("&Help")
    window.how_to_read_action = help_menu.addAction("How to &read this", lambda: window.show_text(
        "How to read this", help_pages.HOW_TO_READ))
    window.shortcuts_action = help_menu.addAction("&Keyboard shortcuts", lambda: window.show_text(
        "Keyboard shortcuts", help_pages.shortcuts_html(window)))
    window.about_action = help_menu.addAction("&About attnexplorer", lambda: window.show_text(
        "About attnexplorer", help_pages.about_html()))
    for act in (a.new_action, a.open_action, a.save_action, a.save_as_action, window.quit_action,
                window.undo_action, window.redo_action):
        window.addAction(act)  # shortcuts work even while the menu bar is hidden (macOS, kiosk)


def _build_number_menu(window, menu) -> None:
    """View ▸ Numbers in cells: significant digits (as many as fit) or fixed decimals."""
    from ...core.numbers.display import NUMBER_FORMATS

    group = QActionGroup(window)
    window.number_format_actions = {}
    chosen = window.settings.number_format()
    for key, label in NUMBER_FORMATS.items():
        action = menu.addAction(label[0].upper() + label[1:])
        action.setCheckable(True)
        action.setChecked(key == chosen)
        action.triggered.connect(lambda _checked=False, key=key: window.set_number_format(key))
        group.addAction(action)
        window.number_format_actions[key] = action
    apply_number_format(window.panels, chosen)


# View ▸ Zoomed-out heatmaps: how a heatmap with more cells than pixels pools them.
POOL_LABELS = {"max": "Largest value of each pixel's cells (max-pooled)",
               "mean": "Mean of each pixel's cells (mean-pooled)"}


def _build_pool_menu(window, menu) -> None:
    group = QActionGroup(window)
    window.pool_actions = {}
    chosen = window.settings.overview_pool()
    for key, label in POOL_LABELS.items():
        action = menu.addAction(label)
        action.setCheckable(True)
        action.setChecked(key == chosen)
        action.triggered.connect(lambda _checked=False, key=key: window.set_overview_pool(key))
        group.addAction(action)
        window.pool_actions[key] = action
    apply_overview_pool(window.document, window.panels, chosen)


def apply_overview_pool(document, panels, pool: str) -> None:
    """Pool zoomed-out heatmaps by ``pool``: the panels redraw a dense matrix's overview; a
    long session's (core/compute/long) overview is made by its streamed pass, so a result pooled the
    other way is computed again."""
    document.compute.set_pool(pool)
    for panel in panels:
        if hasattr(panel, "set_pool"):
            panel.set_pool(pool)
    result = document.result
    if result is not None and result.pooled_by not in (None, pool):
        document.compute.request()


def apply_number_format(panels, number_format: str) -> None:
    for panel in panels:
        if hasattr(panel, "set_number_format"):
            panel.set_number_format(number_format)


def apply_weight_colors(panels, auto: bool) -> None:
    """Weights coloured 0 to 1, or (``auto``) 0 to the largest weight shown."""
    for panel in panels:
        if hasattr(panel, "set_color_range"):
            panel.set_color_range("auto" if auto else "unit")
