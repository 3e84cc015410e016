"""The window asks before an export above 2 GB, as the command line wants --allow-large
(issue 27, item 12): No writes nothing and says why; Yes writes it."""

from PySide6.QtWidgets import QMessageBox
from ui_helpers import close_window, open_window

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.io import export_choice
from attnexplorer.ui.exports.matrix_export import ALL, MatrixExportDialog


def test_the_window_asks_before_a_large_export(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(export_choice, "LARGE_EXPORT_BYTES", 1000)
    document, window = open_window(build_preset("pronoun").session)
    try:
        assert document.compute.wait_idle()
        asked = []
        for answer, written in ((QMessageBox.StandardButton.No, False), (QMessageBox.StandardButton.Yes, True)):
            dialog = MatrixExportDialog(document, window)
            qtbot.addWidget(dialog)
            dialog.set_choice(ALL)
            dialog.set_format("npz")
            dialog.set_path(str(tmp_path / "all.npz"))
            dialog.ask_large = lambda question, answer=answer: asked.append(question) or answer
            dialog.accept()
            assert (tmp_path / "all.npz").exists() is written
            if not written:
                assert dialog.error_label.text().startswith("Not exported: ")
        assert len(asked) == 2 and "would write about" in asked[0] and asked[0].endswith("Write it anyway?")
    finally:
        close_window(document, window)
