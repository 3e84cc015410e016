"""Helpers shared by the panel and figure tests."""

# A main window opened and closed as the bench does it: ``open_window(session, size)`` gives
# ``(document, window)`` shown and painted once; ``close_window`` closes it without asking.
from attnexplorer.bench.harness import close_window, open_window  # noqa: F401


def shown(qtbot, panel, size=(420, 320)):
    """``panel`` registered with qtbot, resized, shown and exposed (so it has painted)."""
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    return panel

