"""Helpers shared by the panel and figure tests."""


def shown(qtbot, panel, size=(420, 320)):
    """``panel`` registered with qtbot, resized, shown and exposed (so it has painted)."""
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def open_window(session, size=(1280, 800)):
    """A main window on a new document for ``session``, shown at ``size`` and painted once:
    ``(document, window)``. Close it with ``close_window``."""
    from PySide6.QtWidgets import QApplication

    from attnexplorer.ui.document import SessionDocument
    from attnexplorer.ui.main_window import MainWindow

    document = SessionDocument(session)
    window = MainWindow(document)
    window.resize(*size)
    window.show()
    for _ in range(3):
        QApplication.processEvents()
    window.repaint()
    return document, window


def close_window(document, window) -> None:
    """Close a window from ``open_window`` without asking about its edits."""
    from PySide6.QtWidgets import QApplication

    document.undo_stack.setClean()
    window.close()
    window.deleteLater()
    document.shutdown()
    QApplication.processEvents()
