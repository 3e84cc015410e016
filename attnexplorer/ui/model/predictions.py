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
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPoint, QPointF, Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPushButton, QSplitter, QTableView,
                               QTabWidget, QVBoxLayout, QWidget)

from ..panels import theme


UNEDITED, INTERVENED = (70, 110, 190), (235, 130, 40)
TARGET_HINT = "A token to follow its probability and rank (a pair: their logit difference, as IOI studies report)"
# Ten rows of bars at ~15 px each with their axis and legend; the table scrolls below that.
BARS_MIN_HEIGHT, TABLE_MIN_HEIGHT = 190, 56
DOCK_BARS, DOCK_BARS_MIN_HEIGHT = 6, 150   # with a picked pair's three lines the dock still fits 800 px


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


def _legend_entries(legend: pg.LegendItem, entries: list[tuple]) -> None:
    """The legend lists ``entries`` ((item, name) pairs) only: a series with nothing drawn (the
    interventions' bars when there are none, a picked token's curve when none is picked) has no
    entry. Rebuilt only when the entries change (a prediction redraws on every edit)."""
    names = tuple(name for _item, name in entries)
    if getattr(legend, "shown_names", None) == names:
        return
    legend.clear()
    for item, name in entries:
        legend.addItem(item, name)
    legend.shown_names = names


def _key_text(series) -> str:
    """The dock's legend, a line of coloured squares and names."""
    return " ".join(f"<span style='color:rgb{colour}'>■</span> {name}" for name, colour in series)


def _table(model) -> QTableView:
    view = QTableView()
    view.setModel(model)
    view.verticalHeader().hide()
    view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    view.setEditTriggers(QTableView.EditTrigger.NoEditTriggers)
    return view


class TokenBars(pg.GraphicsLayoutWidget):
    """Next tokens as horizontal bars, one row per token (its piece the row's label), one or two
    series side by side. A click on a row (its bars or its label) emits ``token_clicked(id,
    token)``: the Generate tab appends that token."""

    token_clicked = Signal(int, str)

    def __init__(self, title: str | None, series: tuple[tuple[str, tuple], ...], axis_label: bool = True,
                 clickable: bool = False, legend: bool = True, title_size: str | None = None, parent=None):
        super().__init__(parent)
        self.setBackground("w")
        if clickable:
            self.setCursor(Qt.CursorShape.PointingHandCursor)
            self.setToolTip("Click a token (its bar or its label) to append it to the text")
        self.plot = self.addPlot()
        if title:
            self.plot.setTitle(title, **({"size": title_size} if title_size else {}))
        self.plot.invertY(True)
        if axis_label:
            self.plot.setLabel("bottom", "probability")
        self.plot.showGrid(x=True, alpha=0.3)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setMenuEnabled(False)
        self.ids: list[int] = []
        self.tokens: list[str] = []
        step = 0.8 / len(series)
        self._offsets = [-0.4 + step * (i + 0.5) for i in range(len(series))]
        self.bars = []
        for _name, colour in series:
            item = pg.BarGraphItem(x0=[], y=[], height=step * 0.95, width=[], brush=pg.mkBrush(*colour))
            self.plot.addItem(item)
            self.bars.append(item)
        self.names = [name for name, _colour in series]
        self.legend = theme.legend_below(self, 1, len(series)) if legend and len(series) > 1 else None
        self.scene().sigMouseClicked.connect(self._on_click)

    def set_bars(self, tokens, ids, *values) -> None:
        """``values``: one list of probabilities per series (a shorter or empty one draws fewer bars)."""
        self.tokens, self.ids = list(tokens), [int(i) for i in ids]
        y = np.arange(len(self.tokens), dtype=float)
        for item, offset, probs in zip(self.bars, self._offsets, values):
            probs = np.asarray(probs, float)
            item.setOpts(x0=np.zeros(len(probs)), y=y[:len(probs)] + offset, width=probs)
        if self.legend is not None:
            self.legend.setVisible(bool(self.tokens))
            _legend_entries(self.legend, [(item, name) for item, name, probs in zip(self.bars, self.names, values)
                                          if len(probs)])
        self.plot.getAxis("left").setTicks([[(float(i), t) for i, t in enumerate(self.tokens)]])
        # Room beside 0 and 1 for their labels: at the axis' very ends (padding 0.02) they reached
        # past the plot and pyqtgraph hid them, so the origin went unlabelled.
        self.plot.setXRange(0, 1, padding=0.07)
        self.plot.setYRange(-0.6, max(len(self.tokens), 1) - 0.4, padding=0)

    def row_at(self, scene_pos) -> int | None:
        """The token row under a point of the scene (on the bars or on the labels), or None."""
        if not self.plot.sceneBoundingRect().contains(scene_pos):
            return None
        view = self.plot.getViewBox()
        if scene_pos.y() < view.sceneBoundingRect().top() or scene_pos.y() > view.sceneBoundingRect().bottom():
            return None
        row = int(round(view.mapSceneToView(scene_pos).y()))
        return row if 0 <= row < len(self.ids) else None

    def row_point(self, row: int, x: float = 0.0) -> QPoint:
        """Where row ``row`` is drawn at probability ``x``, in the viewport's pixels (for a click)."""
        scene = self.plot.getViewBox().mapViewToScene(QPointF(x, row))
        return self.mapFromScene(scene)

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        row = self.row_at(event.scenePos())
        if row is not None:
            self.token_clicked.emit(self.ids[row], self.tokens[row])


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
        self.beside_tables = tables_row
        self.target_label = QLabel("")
        self.target_label.setWordWrap(True)
        for edit in (self.target_edit, self.versus_edit):
            edit.setToolTip(TARGET_HINT)
        # Beside the tables (the dock) the panel shares a corner with Explain: no title (the dock
        # has one), and the bars keep room for ten readable rows while the table gives way.
        self.plot_widget = TokenBars(None if tables_row else "Next-token probabilities",
                                     (("unedited", UNEDITED), ("with the interventions", INTERVENED)),
                                     axis_label=not tables_row, legend=not tables_row)
        self.plot_widget.setMinimumHeight(DOCK_BARS_MIN_HEIGHT if tables_row else BARS_MIN_HEIGHT)
        # the dock shares a corner at 1280 × 800: six rows of bars stay readable there, ten did not
        self.bars_shown = DOCK_BARS if tables_row else None
        self.plot = self.plot_widget.plot
        self.legend = self.plot_widget.legend
        self.table_model = PredictionTable(self)
        self.table = _table(self.table_model)
        self.table.verticalHeader().show()
        self.table.setMinimumHeight(TABLE_MIN_HEIGHT)
        self.key = None
        if tables_row:
            # the dock: the bars or the table, each with the whole height (both squeezed the bars)
            split = QTabWidget()
            split.setDocumentMode(True)
            split.addTab(self.plot_widget, "Bars")
            split.addTab(self.table, "Table")
            # the legend in the tab bar's corner: inside the plot it took a third of the bars' height
            self.key = QLabel(_key_text((("unedited", UNEDITED),)))
            split.setCornerWidget(self.key, Qt.Corner.TopRightCorner)
        else:
            split = QSplitter(Qt.Orientation.Vertical)
            split.setChildrenCollapsible(False)
            split.addWidget(self.plot_widget)
            split.addWidget(self.table)
            split.setStretchFactor(0, 3)
            split.setStretchFactor(1, 2)
        self.views = split
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.tables_row)
        layout.addLayout(row)
        layout.addWidget(self.target_label)
        layout.addWidget(split, 1)

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
            self._draw_bars([], [], [], [])
            self._say_target("")
            return
        tokens, position = result["tokens"], result["position"]
        edited = result.get("intervened")
        what = "no interventions" if edited is None else "with " + ", ".join(edited["interventions"])
        hint = "Click a query row in the tables to predict from another position."
        # beside the tables the hint is the heading's tooltip: a line the dock's bars need
        self.heading.setText(f"After position {position} ({tokens[position]}), {what}." +
                             ("" if self.beside_tables else " " + hint))
        self.heading.setToolTip(hint)
        top = result["baseline"]["top"]
        self._draw_bars([e["token"] for e in top], [e["id"] for e in top], [e["prob"] for e in top],
                        [e["prob"] for e in edited["baseline_top"]] if edited else [])
        if self.key is not None:   # the dock's legend: the interventions' colour only when they are drawn
            self.key.setText(_key_text((("unedited", UNEDITED),) + ((("with the interventions", INTERVENED),)
                                                                     if edited else ())))
        self._say_target(_target_text(result))

    def _say_target(self, text: str) -> None:
        self.target_label.setText(text)
        self.target_label.setVisible(bool(text))   # an empty line is room the bars need

    def _draw_bars(self, tokens, ids, unedited, intervened) -> None:
        shown = self.bars_shown   # the table below lists all ten
        self.plot_widget.set_bars(tokens[:shown], ids[:shown], unedited[:shown], intervened[:shown])

    def export_item(self):
        return self.plot_widget.ci if self.result is not None else None

    def figure_item(self):
        return self.export_item()


def _target_text(result: dict) -> str:
    if result.get("target_error"):
        return result["target_error"]
    if result.get("target") is None:
        return ""   # the hint is the boxes' tooltip: two lines here squeezed the bars in the dock
    from ...models.prediction import target_lines

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
        self.legend = theme.legend_below(self.plot_widget, 1, 2)
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
        _legend_entries(self.legend, [(curve, curve.name()) for curve in self.curves.values()
                                      if curve.xData is not None and len(curve.xData)])
        self.plot.setYRange(0, 1, padding=0.02)
        if len(layers):
            self.plot.setXRange(0, layers[-1], padding=0.02)
        # whole layers only: a 3-layer model's axis read 0, 0.5, 1, 1.5 (no layer 0.5)
        step = max(1, -(-len(layers) // 10))
        self.plot.getAxis("bottom").setTicks([[(float(layer), str(int(layer))) for layer in layers[::step]]] or None)

    def export_item(self):
        return self.plot_widget.ci if self.result is not None and self.result.get("logit_lens") else None

    def figure_item(self):
        return self.export_item()
