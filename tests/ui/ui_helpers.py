"""Helpers shared by the panel and figure tests."""


def shown(qtbot, panel, size=(420, 320)):
    """``panel`` registered with qtbot, resized, shown and exposed (so it has painted)."""
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    return panel
