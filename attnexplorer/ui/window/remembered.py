"""What the window remembers between runs: its geometry, its dock layout and the last session
(in ``AppSettings``, which keeps tests and a second installation away from a user's files)."""

from __future__ import annotations

from ..settings import LAYOUT_VERSION


def restore_window(window) -> bool:
    """Geometry and dock layout from the last run; True when a layout was restored.

    The layout goes first: the saved geometry was taken with that layout's minimum sizes,
    and restoring it under the default layout could be clamped by the default's."""
    settings = window.settings
    state = settings.window_state()
    restored = state is not None and window.restoreState(state, LAYOUT_VERSION)
    if restored:
        # restoreState brings back the visibility the user chose; applicability is
        # re-checked afterwards by the caller.
        window.dock_layout.forget_auto_hidden()
    geometry = settings.geometry()
    if geometry is not None:
        window.restoreGeometry(geometry)
    return restored


def save_window(window) -> None:
    settings = window.settings
    settings.set_geometry(window.saveGeometry())
    # Panels hidden only because they do not apply are saved as shown, so that a later
    # session they apply to finds them where they were.
    hidden = window.dock_layout.auto_hidden()
    for kind in hidden:
        window.docks[kind].show()
    settings.set_window_state(window.saveState(LAYOUT_VERSION))
    for kind in hidden:
        window.docks[kind].hide()
    if window.actions.path is not None:
        settings.set_last_session(window.actions.path)
    settings.sync()
