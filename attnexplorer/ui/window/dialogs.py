"""The questions the window asks and the boxes it shows.

Each is a plain function of a parent widget. The window exposes them as its own methods
(``ask_unsaved``, ``ask_open_path``, …, ``show_error``, ``show_warning``) so that tests answer
them by monkeypatching the window, and so that ``SessionActions`` asks through the window.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

SESSION_FILES = "attnexplorer sessions (*.json);;All files (*)"


def ask_unsaved(parent, name: str) -> str:
    """"save", "discard" or "cancel" for the unsaved changes of the session called ``name``."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Unsaved changes",
                      f"{name} has unsaved changes. Save them first?",
                      QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                      | QMessageBox.StandardButton.Cancel, parent)
    box.setDefaultButton(QMessageBox.StandardButton.Save)
    answer = box.exec()
    return {QMessageBox.StandardButton.Save: "save",
            QMessageBox.StandardButton.Discard: "discard"}.get(QMessageBox.StandardButton(answer), "cancel")


def ask_open_path(parent, start: str) -> str | None:
    path, _ = QFileDialog.getOpenFileName(parent, "Open session", start, SESSION_FILES)
    return path or None


def ask_save_path(parent, start: str) -> str | None:
    path, _ = QFileDialog.getSaveFileName(parent, "Save session", start, SESSION_FILES)
    return path or None


def ask_new_choice(parent, blank: str) -> str | None:
    """A preset name, ``blank``, or None when cancelled."""
    from ...core.inputs.presets import list_presets

    choices = [(p.title, p.name) for p in list_presets()] + [("Blank session", blank)]
    label, ok = QInputDialog.getItem(parent, "New session", "Start from:", [c[0] for c in choices], 0, False)
    return dict(choices).get(label) if ok else None


def ask_restore(parent, recovery) -> bool:
    answer = QMessageBox.question(
        parent, "Recover unsaved work",
        f"attnexplorer did not close normally last time.\n\n{recovery.describe()}\n\nRestore it?",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes)
    return answer == QMessageBox.StandardButton.Yes


def show_error(parent, title: str, text: str) -> None:
    QMessageBox.critical(parent, title, text)


class WarningBox:
    """One non-blocking warning box per window, reused: an engine fault must never stop the
    event loop (or a test), and a burst of faults shows the latest, not a pile of boxes."""

    def __init__(self, parent):
        self.parent = parent
        self.box: QMessageBox | None = None

    def show(self, title: str, text: str) -> None:
        if self.box is None:
            self.box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok,
                                   self.parent)
        self.box.setWindowTitle(title)
        self.box.setText(text)
        self.box.open()


def show_text(parent, title: str, html: str) -> QMessageBox:
    """A non-blocking box of rich text (the Help menu's pages), deleted when closed."""
    box = QMessageBox(QMessageBox.Icon.Information, title, "", QMessageBox.StandardButton.Close, parent)
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(html)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box
