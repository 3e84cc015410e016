"""File ▸ Export … and Copy …: figures and matrices to files, matrices, code and table cells
to the clipboard. Each reports to the status bar; none raises to the user."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QAbstractItemView, QApplication

from ...core.errors import AttnExplorerError


def export_figure(window):
    from ..exports.figure_dialog import FigureExportDialog

    dialog = FigureExportDialog(window.panels, window)
    dialog.open()
    return dialog


def export_matrices(window):
    from ..exports.matrix_export import MatrixExportDialog

    dialog = MatrixExportDialog(window.document, window)
    dialog.open()
    return dialog


def fill_copy_tsv_menu(menu, document, copy) -> None:
    """One entry per matrix of the current result (``copy(name)`` when chosen), or the reason
    there is none."""
    from ..exports.matrix_export import describe, matrices_by_name

    menu.clear()
    try:
        names = list(matrices_by_name(document))
    except AttnExplorerError as err:
        menu.addAction(str(err)).setEnabled(False)
        return
    for name in names:
        menu.addAction(describe(name), lambda n=name: copy(n))


def copy_matrix_tsv(document, status, name: str) -> None:
    from ..exports.matrix_export import copy_matrix_tsv as copy, describe

    try:
        copy(document, name)
    except AttnExplorerError as err:
        status.show_message(str(err))
        return
    status.show_message(f"{describe(name)} copied as tab-separated text")


def copy_torch_code(document, status) -> None:
    from ..exports.matrix_export import copy_torch_code as copy

    copy(document.session)
    status.show_message("PyTorch code for this session copied to the clipboard")


def copy_selection(status) -> None:
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
    status.show_message("Select cells in a table to copy them")
