"""The model window: the model view (every layer × head as a thumbnail), the head view, the
side tabs (predictions, logit lens, head scores, generation) and the badge that says how far
the tables' weights are from the model's for the layer they hold.

A long text (``ModelRun.long``) keeps no n × n weights: the thumbnails are max-pooled, the
head view (one line per query-key pair) is not drawn, and the badge compares the tables'
attention output and row normalisers with the model's (``models.views.long_differences``).
``controller.ModelController`` opens models into it and keeps it in step with the
document.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QScrollArea, QSplitter, QTabWidget, QVBoxLayout,
                               QWidget)

from ...models.views import badge_text, long_badge_text, long_differences, max_difference
from .head_view import HeadView
from .views import ModelGrid

# How much of a text the window title and the header quote: a 4,096-token text is a book page.
QUOTED_CHARS, QUOTED_TOKENS = 60, 48


def _quote(text: str, limit: int = QUOTED_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


class ModelWindow(QWidget):
    """The model view and the head view of one model run, and the badge."""

    layer_chosen = Signal(int, int)   # layer, head

    def __init__(self, parent=None):
        super().__init__(parent, Qt.WindowType.Window)
        self.loaded = None
        self.run = None
        self.layer = 0
        self.header = QLabel("")
        self.header.setWordWrap(True)
        self.grid = ModelGrid()
        self.grid.chosen.connect(self.layer_chosen)
        scroll = QScrollArea()
        scroll.setWidget(self.grid)
        scroll.setWidgetResizable(True)
        self.head_view = HeadView()
        from .figures import HeadViewFigure, ModelViewFigure

        # the two views as figures, exported by the window's Export figure… with the side panels
        self.model_view_figure = ModelViewFigure(self.grid)
        self.head_view_figure = HeadViewFigure(self.head_view)
        self.head_box = QComboBox()
        self.head_box.currentIndexChanged.connect(self._on_head_box)
        self.layer_label = QLabel("")
        head_page = QWidget()
        controls = QHBoxLayout()
        controls.addWidget(self.layer_label)
        controls.addStretch(1)
        controls.addWidget(QLabel("Show"))
        controls.addWidget(self.head_box)
        page = QVBoxLayout(head_page)
        page.addLayout(controls)
        page.addWidget(self.head_view, 1)
        self.tabs = QTabWidget()
        self.tabs.addTab(scroll, "Model view")
        self.tabs.addTab(head_page, "Head view")
        self.badge = QLabel("")
        self.badge.setObjectName("modelBadge")
        from .behaviour_bar import BehaviourBar
        from .predictions import LogitLensPanel, PredictionsPanel

        self.predictions = PredictionsPanel()
        self.lens = LogitLensPanel()
        self.behaviour_bar = BehaviourBar()
        side = QTabWidget()
        side.addTab(self.predictions, "Predictions")
        side.addTab(self.lens, "Logit lens")
        from .head_scores_panel import HeadScoresPanel

        self.head_scores = HeadScoresPanel()
        self.head_scores.coloured.connect(self.grid.set_colouring)
        self.head_scores.chosen.connect(self._on_ranked_head)
        side.addTab(self.head_scores, "Heads")
        from .generation_panel import GenerationPanel

        self.generation = GenerationPanel()
        side.addTab(self.generation, "Generate")
        self.side_tabs = side
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tabs)
        split.addWidget(side)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 1)
        split.setSizes([850, 430])   # SmolLM2's 30 × 9 thumbnails still fold into two bands at 1280 wide
        self.splitter = split
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.behaviour_bar)
        layout.addWidget(split, 1)
        layout.addWidget(self.badge)
        self.resize(1280, 800)

    def show_run(self, loaded, run, layer: int, head: int = 0, scores=None) -> None:
        """``scores``: the head scores made during the run (name → layers × heads), for the Heads tab."""
        self.loaded, self.run = loaded, run
        self.setWindowTitle(f"{loaded.source.label}: attention on “{_quote(run.text)}”")
        shown = " ".join(run.tokens[:QUOTED_TOKENS]) + (" …" if len(run.tokens) > QUOTED_TOKENS else "")
        pooled = (" Thumbnails are max-pooled (each pixel the largest weight of its block); the tables "
                  "show the layer exactly.") if run.long else ""
        self.header.setText(f"{loaded.describe()}. {len(run.tokens):,} tokens: {shown}.{pooled} "
                            "Click a thumbnail to load that layer into the tables.")
        self.grid.set_attentions(run.thumbnails)
        self.model_view_figure.heading = f"{loaded.source.label}: model view"
        self.head_scores.set_scores(scores or {})
        # One line per query-key pair: at thousands of tokens that draws nothing readable.
        self.tabs.setTabEnabled(1, not run.long)
        self.tabs.setTabToolTip(1, f"not drawn at {len(run.tokens):,} tokens: one line per query–key pair; "
                                "the tables' heatmaps show this layer" if run.long else "")
        with_all = ["all heads"] + [f"head {h}" for h in range(loaded.num_heads)]
        self.head_box.blockSignals(True)
        self.head_box.clear()
        self.head_box.addItems(with_all)
        self.head_box.blockSignals(False)
        self.set_layer(layer, head)

    def set_layer(self, layer: int, head: int) -> None:
        self.layer = layer
        self.head_view_figure.layer = layer
        self.grid.set_selected(layer, head)
        self.layer_label.setText(f"Layer {layer}: lines from each query (left) to each key (right), "
                                 "opacity = weight; hover a token to isolate its lines")
        if self.run.long:
            self.head_view.set_layer((), np.zeros((0, 0, 0)))
        else:
            self.head_view.set_layer(self.run.tokens, self.run.attentions[layer])
        self.head_box.setCurrentIndex(head + 1)
        self.head_view.set_head(head)

    def _on_ranked_head(self, layer: int, head: int) -> None:
        self.grid.set_selected(layer, head)
        self.layer_chosen.emit(layer, head)

    def _on_head_box(self, index: int) -> None:
        self.head_view.set_head(None if index <= 0 else index - 1)

    def update_badge(self, weights, layer: int, result=None) -> None:
        """Compare the tables' weights (H, n, n) with the model's at ``layer``; for a long run,
        the ``result``'s attention output and row normalisers."""
        if self.run is not None and self.run.long:
            if result is None:
                self.badge.setText("")
                return
            found = long_differences(self.run, layer, getattr(result, "output", None),
                                     getattr(result, "log_sum_exp", None))
            self.badge.setText(f"Tables: layer {layer}: " + long_badge_text(found))
            return
        if self.run is None or weights is None:
            self.badge.setText("")
            return
        self.badge.setText(f"Tables: layer {layer}: "
                           + badge_text(max_difference(weights, self.run.attentions[layer])))
