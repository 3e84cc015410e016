"""File ▸ Open model…'s dialog: the model (a packaged one, a folder or a .gguf file), the text
and the layer. It refuses what ``models.resolve`` refuses before anything is loaded, with a
message under the form; ``controller.ModelController`` opens what it accepts."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QSpinBox, QVBoxLayout)

from ...core.errors import AttnExplorerError
from ...models import packaged_models, resolve

DEFAULT_TEXT = "The dog fetched the ball and she was happy"


class OpenModelDialog(QDialog):
    """Model, text, layer. ``accept`` only once the model resolves and the text is not empty."""

    def __init__(self, parent=None, spec: str = "minilm", text: str = DEFAULT_TEXT, layer: int = 0):
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.model_box = QComboBox()
        self.model_box.setEditable(True)
        for name, what, installed in packaged_models():
            self.model_box.addItem(name if installed else f"{name} (not installed)", name)
            self.model_box.setItemData(self.model_box.count() - 1, what, Qt.ItemDataRole.ToolTipRole)
        self.model_box.setCurrentText(spec)
        folder = QPushButton("Folder…")
        folder.clicked.connect(self._browse_folder)
        gguf = QPushButton(".gguf file…")
        gguf.clicked.connect(self._browse_gguf)
        row = QHBoxLayout()
        row.addWidget(self.model_box, 1)
        row.addWidget(folder)
        row.addWidget(gguf)
        self.text_edit = QLineEdit(text)
        self.text_edit.setMaxLength(1 << 24)   # Qt's default, 32,767 characters, is ~7,000 tokens
        self.text_edit.setToolTip("The text the model reads, or repeated:N[:SEED]: N random tokens then the same N "
                                  "again (the induction probe)")
        from_file = QPushButton("Text file…")
        from_file.setToolTip("Read the text from a UTF-8 text file (a long document)")
        from_file.clicked.connect(self._browse_text)
        text_row = QHBoxLayout()
        text_row.addWidget(self.text_edit, 1)
        text_row.addWidget(from_file)
        self.layer_spin = QSpinBox()
        self.layer_spin.setRange(0, 999)
        self.layer_spin.setValue(layer)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #b00020")
        form = QFormLayout()
        form.addRow("Model", row)
        form.addRow("Text", text_row)
        form.addRow("Layer", self.layer_spin)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)
        self.resize(560, self.sizeHint().height())

    def spec(self) -> str:
        index = self.model_box.findText(self.model_box.currentText())
        data = self.model_box.itemData(index) if index >= 0 else None
        return str(data or self.model_box.currentText()).strip()

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A model folder (config.json, *.safetensors)")
        if path:
            self.model_box.setCurrentText(path)

    def _browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A GGUF model file", "", "GGUF models (*.gguf)")
        if path:
            self.model_box.setCurrentText(path)

    def _browse_text(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A text for the model to read", "", "Text (*.txt);;All files (*)")
        if path:
            self.read_text(path)

    def read_text(self, path: str) -> bool:
        """Put the file's text into the box; a message under the form when it cannot be read."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else "not UTF-8 text"
            self.problem.setText(f"{Path(path).name}: cannot read it: {reason}")
            return False
        self.text_edit.setText(" ".join(text.split()))
        self.problem.setText("")
        return True

    def check(self) -> str | None:
        """Why the dialog cannot be accepted as filled in, or None."""
        from ...models.head_scores import is_probe, parse_probe

        if not self.text_edit.text().strip():
            return "the text is empty: type a sentence for the model to read"
        if is_probe(self.text_edit.text()):
            try:
                parse_probe(self.text_edit.text())   # refused in the words `heads --probe` uses
            except AttnExplorerError as err:
                return str(err)
        try:
            resolve(self.spec())
        except AttnExplorerError as err:
            return str(err)
        return None

    def accept(self) -> None:
        problem = self.check()
        if problem:
            self.problem.setText(problem)
            return
        super().accept()
