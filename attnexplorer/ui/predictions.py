"""The model's prediction in the window: the Predictions panel, the logit-lens strip, and the
worker that computes them off the GUI thread.

- ``PredictionsPanel``: at the chosen position, the unedited model's top-k next tokens and the
  same tokens with the interventions, as bars side by side and as a table with Δlogit and Δrank;
  a token the user picks (and a second one: their logit difference); for an encoder without an
  LM head, why there are no tokens and the pooled embedding's cosine similarity. Its figure
  (``export_item``) exports like every panel's.
- ``LogitLensPanel``: per layer, the top token and its probability and the picked token's
  probability, unedited and intervened: a plot and a table.

Both only draw the dict ``Behaviour.predict`` returns (``models/interventions.py``), which
``BehaviourControl`` computes off the GUI thread and hands them; the arithmetic is Qt-free and
tested without a display.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPushButton, QTableView, QVBoxLayout,
                               QWidget)


UNEDITED, INTERVENED = (70, 110, 190), (235, 130, 40)


class _RowsTable(QAbstractTableModel):
    """A read-only table of text rows, refilled whole from each prediction."""

    HEADERS: tuple[str, ...] = ()

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[tuple] = []

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.HEADERS)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or role != Qt.ItemDataRole.DisplayRole:
            return None
        return self._rows[index.row()][index.column()]

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.HEADERS[section]
        return None


class PredictionTable(_RowsTable):
    """The top-k rows of a prediction (the rank is the row's header): the unedited token with its
    probability, the intervened one's, its Δlogit and Δrank (its change against the unedited
    model). The logits themselves are in ``predict``'s output; a panel beside the model view has
    room for these six columns."""

    HEADERS = ("unedited", "prob", "intervened", "prob", "Δlogit", "Δrank")

    def set_result(self, result: dict | None) -> None:
        self.beginResetModel()
        self._rows = []
        if result and result.get("baseline"):
            edited = (result.get("intervened") or {}).get("top") or []
            for i, base in enumerate(result["baseline"]["top"]):
                row = [base["token"], f"{base['prob']:.4f}"]
                if i < len(edited):
                    e = edited[i]
                    row += [e["token"], f"{e['prob']:.4f}", f"{e['delta_logit']:+.3f}", f"{e['delta_rank']:+d}"]
                else:
                    row += [""] * 4
                self._rows.append(tuple(row))
        self.endResetModel()


    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        return self.HEADERS[section] if orientation == Qt.Orientation.Horizontal else str(section + 1)   # the rank


class LensTable(_RowsTable):
    HEADERS = ("layer", "unedited", "p", "p(token)", "intervened", "p", "p(token)")

    def set_result(self, result: dict | None) -> None:
        self.beginResetModel()
        self._rows = []
        for entry in (result or {}).get("logit_lens") or []:
            row = [str(entry["layer"])]
            for side in ("baseline", "intervened"):
                e = entry[side]
                row += ["", "", ""] if e is None else [e["top"]["token"], f"{e['top']['prob']:.3f}",
                                                       "" if e["target_prob"] is None else f"{e['target_prob']:.4f}"]
            self._rows.append(tuple(row))
        self.endResetModel()


def _legend_below(widget: pg.GraphicsLayoutWidget, columns: int) -> pg.LegendItem:
    """A legend in the row under the plot, where it covers no bar or curve."""
    legend = pg.LegendItem(colCount=columns)
    widget.addItem(legend, row=1, col=0)
    return legend


def _table(model) -> QTableView:
    view = QTableView()
    view.setModel(model)
    view.verticalHeader().hide()
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    view.setEditTriggers(QTableView.EditTrigger.NoEditTriggers)
    return view


class PredictionsPanel(QWidget):
    """Top-k next tokens, unedited and intervened, a picked token and a logit difference."""

    kind = "predictions"
    title = "Predictions"
    short_title = "Predictions"
    document = None
    target_changed = Signal(str, str)   # target, versus (empty: none)
    ablate_selected = Signal(object)    # "zero" | "mean" | "patch" | None (restore): the tables' head

    def __init__(self, parent=None, tables_row: bool = False):
        super().__init__(parent)
        self.result: dict | None = None
        self.heading = QLabel("Open a model to see its prediction.")
        self.heading.setWordWrap(True)
        self.target_edit = QLineEdit()
        self.target_edit.setPlaceholderText('a token, e.g. " Mary"')
        self.versus_edit = QLineEdit()
        self.versus_edit.setPlaceholderText('versus, e.g. " John"')
        for edit in (self.target_edit, self.versus_edit):
            edit.textChanged.connect(self._on_target)
        row = QHBoxLayout()
        row.addWidget(QLabel("Token"))
        row.addWidget(self.target_edit, 1)
        row.addWidget(QLabel("vs"))
        row.addWidget(self.versus_edit, 1)
        # Beside the tables (the main window's dock): ablate the head selected there.
        self.tables_row = QWidget()
        head_row = QHBoxLayout(self.tables_row)
        head_row.setContentsMargins(0, 0, 0, 0)
        self.tables_head = QLabel("The tables' head:")
        head_row.addWidget(self.tables_head)
        self.ablate_buttons = {}
        for kind, label in (("zero", "Zero"), ("mean", "Mean"), ("patch", "Patch"), (None, "Restore")):
            button = QPushButton(label)
            button.setToolTip("Restore the head" if kind is None else f"{label}-ablate the head selected in the tables")
            button.clicked.connect(lambda _checked=False, k=kind: self.ablate_selected.emit(k))
            head_row.addWidget(button)
            self.ablate_buttons[kind] = button
        head_row.addStretch(1)
        self.tables_row.setVisible(tables_row)
        self.target_label = QLabel("")
        self.target_label.setWordWrap(True)
        self.plot_widget = pg.GraphicsLayoutWidget()
        self.plot_widget.setBackground("w")
        self.plot = self.plot_widget.addPlot()
        self.plot.setTitle("Next-token probabilities")
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "probability")
        self.plot.showGrid(x=True, alpha=0.3)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.bars_unedited = pg.BarGraphItem(x0=[], y=[], height=0.38, width=[], brush=pg.mkBrush(*UNEDITED))
        self.bars_intervened = pg.BarGraphItem(x0=[], y=[], height=0.38, width=[], brush=pg.mkBrush(*INTERVENED))
        self.plot.addItem(self.bars_unedited)
        self.plot.addItem(self.bars_intervened)
        self.legend = _legend_below(self.plot_widget, 2)
        self.legend.addItem(self.bars_unedited, "unedited")
        self.legend.addItem(self.bars_intervened, "with the interventions")
        self.table_model = PredictionTable(self)
        self.table = _table(self.table_model)
        self.table.verticalHeader().show()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.tables_row)
        layout.addLayout(row)
        layout.addWidget(self.target_label)
        layout.addWidget(self.plot_widget, 3)
        layout.addWidget(self.table, 2)

    def _on_target(self) -> None:
        self.target_changed.emit(self.target_edit.text(), self.versus_edit.text())

    def set_target(self, target: str, versus: str = "") -> None:
        self.target_edit.setText(target)
        self.versus_edit.setText(versus)

    def show_message(self, text: str) -> None:
        self.heading.setText(text)

    def show_result(self, result: dict) -> None:
        self.result = result
        self.table_model.set_result(result)
        embedding = result.get("embedding")
        if embedding is not None:
            cosine = embedding["cosine"]
            why = embedding["why"]
            self.heading.setText(why[:1].upper() + why[1:] + "." + (
                "" if cosine is None else f" Mean-pooled embedding with the interventions: cosine similarity "
                f"{cosine:.6f} to the unedited one."))
            self._draw_bars([], [], [])
            self.target_label.setText("")
            return
        tokens, position = result["tokens"], result["position"]
        edited = result.get("intervened")
        what = "no interventions" if edited is None else "with " + ", ".join(edited["interventions"])
        self.heading.setText(f"After position {position} ({tokens[position]}), {what}. "
                             "Click a query row in the tables to predict from another position.")
        top = result["baseline"]["top"]
        self._draw_bars([e["token"] for e in top], [e["prob"] for e in top],
                        [e["prob"] for e in edited["baseline_top"]] if edited else [])
        self.target_label.setText(_target_text(result))

    def _draw_bars(self, tokens, unedited, intervened) -> None:
        y = np.arange(len(tokens), dtype=float)
        self.bars_unedited.setOpts(x0=np.zeros(len(y)), y=y - 0.2, width=np.asarray(unedited, float))
        self.bars_intervened.setOpts(x0=np.zeros(len(intervened)), y=y[:len(intervened)] + 0.2,
                                     width=np.asarray(intervened, float))
        self.legend.setVisible(bool(tokens))
        self.plot.getAxis("left").setTicks([[(float(i), t) for i, t in enumerate(tokens)]])
        self.plot.setXRange(0, 1, padding=0.02)
        self.plot.setYRange(-0.6, max(len(tokens), 1) - 0.4, padding=0)

    def export_item(self):
        return self.plot_widget.ci if self.result is not None else None

    def figure_item(self):
        return self.export_item()


def _target_text(result: dict) -> str:
    if result.get("target_error"):
        return result["target_error"]
    if result.get("target") is None:
        return "Type a token to follow its probability and rank (a pair: their logit difference, as IOI studies report)."
    from ..models.interventions import target_lines

    return "\n".join(target_lines(result["target"]))


class LogitLensPanel(QWidget):
    """Each layer's residual stream decoded through the final norm and the unembedding."""

    kind = "logit_lens"
    title = "Logit lens"
    short_title = "Logit lens"
    document = None

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: dict | None = None
        self.plot_widget = pg.GraphicsLayoutWidget()
        self.plot_widget.setBackground("w")
        self.plot = self.plot_widget.addPlot()
        self.plot.setTitle("Logit lens: probability after each layer")
        self.plot.setLabel("bottom", "layer")
        self.plot.setLabel("left", "probability")
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.showGrid(x=True, y=True, alpha=0.3)
        self.curves = {
            "top": self.plot.plot([], [], pen=pg.mkPen(*UNEDITED, width=2), name="top token, unedited"),
            "top_edited": self.plot.plot([], [], pen=pg.mkPen(*INTERVENED, width=2), name="top token, intervened"),
            "target": self.plot.plot([], [], pen=pg.mkPen(*UNEDITED, width=2, style=Qt.PenStyle.DashLine),
                                     name="picked token, unedited"),
            "target_edited": self.plot.plot([], [], pen=pg.mkPen(*INTERVENED, width=2, style=Qt.PenStyle.DashLine),
                                            name="picked token, intervened"),
        }
        self.legend = _legend_below(self.plot_widget, 2)
        for name, curve in self.curves.items():
            self.legend.addItem(curve, curve.name())
        self.table_model = LensTable(self)
        self.table = _table(self.table_model)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.note)
        layout.addWidget(self.plot_widget, 2)
        layout.addWidget(self.table, 3)

    def show_result(self, result: dict) -> None:
        self.result = result
        self.table_model.set_result(result)
        lens = result.get("logit_lens") or []
        if not lens:
            self.note.setText("No logit lens: " + (result.get("embedding") or {}).get("why", "no tokens to predict"))
        else:
            self.note.setText("The top token of each layer's residual stream, decoded as if it were the last layer's.")
        layers = np.array([e["layer"] for e in lens], dtype=float)

        def series(side, key):
            values = [None if e[side] is None else (e[side]["top"]["prob"] if key == "top" else e[side]["target_prob"])
                      for e in lens]
            if not values or any(v is None for v in values):
                return [], []
            return layers, np.asarray(values, dtype=float)

        self.curves["top"].setData(*series("baseline", "top"))
        self.curves["top_edited"].setData(*series("intervened", "top"))
        self.curves["target"].setData(*series("baseline", "target"))
        self.curves["target_edited"].setData(*series("intervened", "target"))
        self.plot.setYRange(0, 1, padding=0.02)
        if len(layers):
            self.plot.setXRange(0, layers[-1], padding=0.02)

    def export_item(self):
        return self.plot_widget.ci if self.result is not None and self.result.get("logit_lens") else None

    def figure_item(self):
        return self.export_item()
