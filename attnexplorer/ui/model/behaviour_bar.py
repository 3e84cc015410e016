"""The model window's row of intervention controls: undo and redo of the interventions, Reset
interventions, the second text a patched head reads, what is in effect, Save edited model… and
Export figure…. A bare widget: ``BehaviourControl`` connects it."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget


class BehaviourBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.undo_button = QPushButton("Undo")
        self.redo_button = QPushButton("Redo")
        self.reset_button = QPushButton("Reset interventions")
        self.reset_button.setToolTip("Restore every ablated head and every edited layer (one undo step)")
        self.patch_edit = QLineEdit()
        self.patch_edit.setPlaceholderText("second text for patched heads (same token length)")
        self.patch_edit.setToolTip("A patched head takes its output from the unedited model's run on this text")
        self.state = QLabel("no interventions")
        self.save_button = QPushButton("Save edited model…")
        self.save_button.setToolTip("A Hugging Face folder with the edits and zero ablations in its weights")
        self.export_button = QPushButton("Export figure…")
        self.export_button.setToolTip("The Predictions panel's or the logit lens's figure as PNG, SVG or PDF")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.undo_button, self.redo_button, self.reset_button):
            row.addWidget(w)
        row.addWidget(QLabel("Patch from"))
        row.addWidget(self.patch_edit, 2)
        row.addWidget(self.state, 2)
        row.addWidget(self.save_button)
        row.addWidget(self.export_button)
