"""Step through generation in the model window: the Generate tab and the job that drives it.

- ``GenerationPanel``: Step, Run N, Back and Stop, a typed token, or one clicked in the
  Next token bars (the prediction the next step picks from), appended in place of the
  model's pick; Tables follow the text; the sampling (greedy, or temperature, top-k,
  top-p and a seed); the prompt and the generated text; for the chosen layer and head, the new
  tokens' attention rows (a row per generated token, over every key), and the **KV cache** of
  that layer's K/V head: the cached K and V as heatmaps that grow a row per step, the newest row
  marked, the cache's size in numbers and bytes and which query heads read that K/V head.
- ``GenerationControl``: every action is a job of a ``JobRunner`` of its own (the GUI thread
  never runs the model); the ``models.generation.Generation`` lives in the runner's state
  between jobs, so each step is one token's work. The user's interventions (``source()``: the
  behaviour and its interventions, as the Predictions tab has them) are read at each action: when
  they changed, the text generated so far is replayed under them (the same tokens, their
  attention and cache recomputed). A newer action supersedes a Run in progress at its next step.
  Each answer also carries every layer × head's attention on the grown text, coloured for the
  model view's thumbnails (``GrownThumbnails``, up to ``GROWN_LIMIT`` tokens), and, with Tables
  follow the text, the tables' layer on it as a session.
"""

from __future__ import annotations

import html
import threading

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer
from PySide6.QtWidgets import (QCheckBox, QDoubleSpinBox, QGridLayout, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QSpinBox, QTextEdit, QVBoxLayout, QWidget)

from ...app.jobs import JobRunner
from ...core.errors import AttnExplorerError
from ..gui_thread import GuiThread
from ..panels.theme import axis_values
from .predictions import TokenBars

NEW_ROW = (235, 130, 40)
SMALL_TITLE = "9pt"
NEXT_SHOWN = 5   # the next-token bars: five rows stay readable in a quarter of the tab at 1280 × 800


def _size(size: int) -> str:
    return f"{size / 1024**2:.1f} MB" if size >= 1024**2 else f"{size / 1024:.1f} KB"


class _WholeAxis(pg.AxisItem):
    """An axis of row or column numbers: ticks only at whole numbers (a tall plot of 3
    generated tokens was ticked 0, 0.5, 1, 1.5 …: there is no token 0.5)."""

    def tickSpacing(self, minVal, maxVal, size):
        return [(max(spacing, 1.0), offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size)]


class _Heatmap(pg.PlotWidget):
    """A matrix drawn row by row downwards (row 0 at the top), its newest row outlined."""

    def __init__(self, title: str, left: str, bottom: str):
        super().__init__(axisItems={"left": _WholeAxis("left"), "bottom": _WholeAxis("bottom")})
        self.setMenuEnabled(False)
        self.setTitle(title, size=SMALL_TITLE)   # four plots share the tab: a full-size title was clipped
        self.setLabel("left", left)
        self.setLabel("bottom", bottom)
        self.getViewBox().invertY(True)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.addItem(self.image)
        # the newest row, outlined: what the last step appended
        self.marker = pg.LinearRegionItem(orientation="horizontal", movable=False, brush=pg.mkBrush(*NEW_ROW, 50),
                                          pen=pg.mkPen(NEW_ROW, width=2))
        self.addItem(self.marker)
        axis_values(self, False)   # nothing generated yet
        self._values_shown = False
        # The axes' room for their numbers only grows: refitted to each step's numbers (8 → 12)
        # it changed as the paint measured them, and the plot laid itself out and painted again.
        for side in ("left", "bottom"):
            self.getAxis(side).setStyle(autoReduceTextSpace=False)
        # The bottom axis' "0" sits on the plot's left edge, its label half past it: drawn (up to
        # 5 px past an end; a wider label on the right end, "20", would be cut by the widget's
        # edge, so it stays hidden) with a few pixels' room on the right.
        self.getAxis("bottom").setStyle(hideOverlappingLabels=5)
        left, top, _right, bottom = self.getPlotItem().layout.getContentsMargins()
        self.getPlotItem().layout.setContentsMargins(left, top, 6, bottom)

    def show_matrix(self, matrix: np.ndarray, marked: int | None, levels=None) -> None:
        if matrix.size == 0:
            if self._values_shown:
                axis_values(self, False)
                self._values_shown = False
            self.image.clear()
            self.marker.hide()
            return
        self.image.setImage(matrix, levels=levels if levels is not None else _levels(matrix), autoLevels=False)
        self.marker.setVisible(marked is not None)
        if marked is not None:
            self.marker.setRegion((marked, marked + 1))
        self.getViewBox().setRange(xRange=(0, room(matrix.shape[1])), yRange=(0, room(matrix.shape[0])), padding=0)
        # The values only as they appear (set at each step, they remade both axes in every
        # paint), and after the range: pyqtgraph reckons the axis' SI scale from the range it
        # has then, and the empty plot's −0.5 … 0.5 wrote the first rows ×1000.
        if not self._values_shown:
            axis_values(self, True)
            self._values_shown = True
        settle(self)


def room(n: int) -> int:
    """The extent a heatmap's axis shows for n rows (or columns) that grow a step at a time: n
    rounded up to a multiple of about n/4 (at most a quarter of the plot to grow into, empty).
    An axis whose range changed remakes its ticks and labels in the paint (a third of a
    heatmap's paint); so during a Run it does so every few steps, not at every one."""
    quantum = max(1, (1 << (max(n, 1).bit_length() - 1)) // 4)
    return -(-n // quantum) * quantum


def settle(plot: pg.PlotWidget) -> None:
    """Bring the plot's view up to date now, not in its paint: pyqtgraph moves a changed range
    into place as the paint begins, which marks the plot dirty again, so each step of a Run
    painted every plot twice."""
    QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)   # new tick labels: the axis' width
    plot.scene().prepareForPaint()


def _levels(matrix: np.ndarray) -> tuple[float, float]:
    top = float(np.abs(matrix).max()) or 1.0
    return (-top, top)


class GenerationPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.step_button, self.run_button = QPushButton("Step"), QPushButton("Run")
        self.back_button, self.stop_button = QPushButton("Back"), QPushButton("Stop")
        self.step_button.setToolTip("append one token: the most likely one, or a sample")
        self.back_button.setToolTip("remove the last token (the cache is cut back)")
        self.run_count = QSpinBox()
        self.run_count.setRange(1, 1024)
        self.run_count.setValue(16)
        self.run_count.setSuffix(" tokens")
        self.greedy = QCheckBox("Greedy")
        self.greedy.setChecked(True)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.05, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(1.0)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100000)
        self.top_k.setSpecialValueText("all")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(1.0)
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        for box in (self.temperature, self.top_k, self.top_p, self.seed):
            box.setEnabled(False)
        self.greedy.toggled.connect(lambda on: [b.setEnabled(not on) for b in
                                                (self.temperature, self.top_k, self.top_p, self.seed)])
        self.token_edit = QLineEdit()
        self.token_edit.setPlaceholderText("type a token, e.g. ' Paris'")
        self.append_button = QPushButton("Append")
        self.append_button.setToolTip("append the typed token instead of the model's pick")
        self.layer_spin, self.head_spin = QSpinBox(), QSpinBox()
        actions = QHBoxLayout()
        for w in (self.step_button, self.back_button, self.stop_button):
            actions.addWidget(w)
        actions.addStretch(1)
        # Run N on a row of its own: five buttons in one row made the tab 446 px wide at least
        running = QHBoxLayout()
        running.addWidget(self.run_button)
        running.addWidget(self.run_count)
        running.addStretch(1)
        # Two rows of two settings: in one row they made the tab 590 px wide at the least, so at
        # 1280 px the model view beside it lost its second band of layers and scrolled.
        sampling = QGridLayout()
        sampling.addWidget(self.greedy, 0, 0)
        for i, (name, box) in enumerate((("temperature", self.temperature), ("top-k", self.top_k),
                                         ("top-p", self.top_p), ("seed", self.seed))):
            row, col = divmod(i, 2)
            sampling.addWidget(QLabel(name), row, 1 + 2 * col)
            sampling.addWidget(box, row, 2 + 2 * col)
        # the layer and head the strips show, and a typed token, in one row: the plots need the height
        chosen = QHBoxLayout()
        chosen.addWidget(QLabel("Layer"))
        chosen.addWidget(self.layer_spin)
        chosen.addWidget(QLabel("Head"))
        chosen.addWidget(self.head_spin)
        chosen.addWidget(self.token_edit, 1)
        chosen.addWidget(self.append_button)
        self.follow_button = QPushButton("Tables follow the text")
        self.follow_button.setCheckable(True)
        self.follow_button.setToolTip("After each step, the main window's tables hold the layer on the text as it "
                                      "grows (an undo step in the tables each time); the model's own layer, as "
                                      "File ▸ Open model… gives it")
        running.addWidget(self.follow_button)
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        self.text.setMaximumHeight(80)
        self.state = QLabel("open a decoder (GPT-2, Llama-family) to generate")
        self.state.setWordWrap(True)
        # Room for the step's three lines whatever it says: "generating…" (one line) at each
        # Step or Run shrank it, and the plots below were laid out and painted anew, twice.
        self.state.setMinimumHeight(3 * self.state.fontMetrics().lineSpacing() + 4)
        self.attention = _Heatmap("New tokens' attention", "new token", "key position")
        # the prediction the next step picks from (the interventions in force): click a row to append it
        self.next_tokens = TokenBars("Next token (click)", (("next token", NEW_ROW),), axis_label=False,
                                     clickable=True, title_size=SMALL_TITLE)
        self.next_tokens.setToolTip("Click a token's bar or its name to append it as the next token")
        # The token names' column only widens: fitted to each step's five names, it changed width
        # as the paint measured them, and the chart laid itself out and painted twice more a step.
        self.next_tokens.plot.getAxis("left").setStyle(autoReduceTextSpace=False)
        self.keys = _Heatmap("Cached K", "position", "d_k")
        self.values = _Heatmap("Cached V", "position", "d_v")
        plots = QGridLayout()
        plots.addWidget(self.attention, 0, 0)
        plots.addWidget(self.next_tokens, 0, 1)
        plots.addWidget(self.keys, 1, 0)
        plots.addWidget(self.values, 1, 1)
        plots.setRowStretch(0, 1)
        plots.setRowStretch(1, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(actions)
        layout.addLayout(running)
        layout.addLayout(sampling)
        layout.addLayout(chosen)
        layout.addWidget(self.text)
        layout.addWidget(self.state)
        layout.addLayout(plots, 1)
        self.set_model(None)

    def set_model(self, loaded) -> None:
        """A new run: the layer and head ranges, and nothing generated."""
        decoder = loaded is not None and loaded.family.kind in ("gpt2", "llama")   # every Llama-shaped family: "llama"
        for w in (self.step_button, self.run_button, self.back_button, self.stop_button, self.append_button,
                  self.follow_button):
            w.setEnabled(decoder)
        self.back_button.setEnabled(False)
        if loaded is not None:
            for spin, top in ((self.layer_spin, loaded.num_layers), (self.head_spin, loaded.num_heads)):
                spin.blockSignals(True)
                spin.setRange(0, top - 1)
                spin.blockSignals(False)
        self.text.clear()
        for view in (self.attention, self.keys, self.values):
            view.show_matrix(np.zeros((0, 0)), None)
        self.next_tokens.set_bars([], [], [])
        self.state.setText("Step appends a token; Run appends several; Back takes the last away" if decoder else
                           "only a decoder (GPT-2, Llama, Qwen, Mistral, Gemma, Phi-3…) writes text token by token")

    def show_message(self, text: str) -> None:
        self.state.setText(text)

    def show_snapshot(self, snap: dict) -> None:
        """All of a step at once (``GenerationControl`` draws it in ``PARTS``, a turn each)."""
        for part in self.PARTS:
            getattr(self, part)(snap)

    # A step's drawing in parts, each painted on a turn of the GUI thread's event loop of its
    # own: together with the model view's thumbnails they kept it busy ~35-45 ms on this CPU.
    PARTS = ("show_text", "show_rows", "show_cache")

    def show_text(self, snap: dict) -> None:
        """The text, the state line and the next-token bars."""
        self.text.setHtml(f"{html.escape(snap['prompt'])}<b style='color:rgb{NEW_ROW}'>"
                          f"{html.escape(snap['generated'])}</b>")
        self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())
        self.back_button.setEnabled(snap["steps"] > 0)
        heads = snap["reading_heads"]
        last = f"; last: {snap['last']!r} (p = {snap['last_prob']:.3f})" if snap["last"] is not None else ""
        self.state.setText(
            f"{snap['length']} tokens ({snap['steps']} generated{last}). KV cache: {snap['layers']} layers × 2 × "
            f"{snap['kv_heads']} K/V heads × {snap['length']} × {snap['d_k']} = {snap['numbers']:,} numbers, "
            f"{_size(snap['bytes'])}. Layer {snap['layer']}, K/V head {snap['kv_head']}, read by query heads "
            f"{heads[0]}–{heads[-1]}" + (f"; {snap['ended']}" if snap.get("ended") else "")
            + (f". The model view shows the prompt's thumbnails past {GROWN_LIMIT} tokens"
               if snap["length"] > GROWN_LIMIT and snap["steps"] else ""))
        top = snap["next"][:NEXT_SHOWN]
        self.next_tokens.set_bars([e["token"] for e in top], [e["id"] for e in top], [e["prob"] for e in top])
        settle(self.next_tokens)

    def show_rows(self, snap: dict) -> None:
        """The new tokens' attention rows."""
        rows = snap["rows"]
        # Back to the prompt leaves no generated row (0 × keys): nothing drawn, no max of nothing
        self.attention.show_matrix(rows, rows.shape[0] - 1 if rows.size else None,
                                   levels=(0.0, float(rows.max() or 1)) if rows.size else None)

    def show_cache(self, snap: dict) -> None:
        """The cached K and V of the chosen layer's K/V head."""
        self.keys.show_matrix(snap["k"], snap["length"] - 1)
        self.values.show_matrix(snap["v"], snap["length"] - 1)


def snapshot(generation, layer: int, head: int, ended: str | None = None, thumbnails=None) -> dict:
    """What the panel draws, copied on the worker (the generation keeps changing there);
    ``thumbnails``: the runner's ``GrownThumbnails`` (None: coloured afresh)."""
    loaded = generation.loaded
    group = loaded.num_heads // loaded.num_kv_heads
    kv_head = head // group
    steps = list(generation.steps)
    keys = generation.length
    rows = np.zeros((len(steps), keys), dtype=np.float32)
    for i, s in enumerate(steps):
        rows[i, :s.attention.shape[-1]] = s.attention[layer, head]
    k, v = generation.cache.layer(layer, kv_head)
    numbers, size = generation.cache_size()
    upcoming = generation.upcoming(10)
    grown = (thumbnails or GrownThumbnails()).update(generation)
    return {"prompt": generation.behaviour.run.text, "generated": generation.generated_text(), "steps": len(steps),
            "length": keys, "layers": loaded.num_layers, "kv_heads": loaded.num_kv_heads, "d_k": loaded.head_dim,
            "numbers": numbers, "bytes": size, "layer": layer, "head": head, "kv_head": kv_head,
            "reading_heads": list(range(kv_head * group, (kv_head + 1) * group)), "rows": rows, "k": k, "v": v,
            "last": steps[-1].token if steps else None, "last_prob": steps[-1].prob if steps else None,
            "ids": list(generation.ids), "ended": ended, "next": upcoming, "prompt_length": generation.prompt_length,
            "grown": grown}


GROWN_LIMIT = 128   # past this many tokens the model view keeps the prompt's thumbnails (layers × H × n × n)


class GrownThumbnails:
    """Every layer × head's attention on the text as it has grown, as the model view's
    thumbnails (``views.thumbnail_rgb``'s viridis bytes): the prompt's weights (the
    unedited run's) and below them each generated token's row over every key (with the
    interventions in force), 0 past a row's keys. Coloured on the worker a row at a time and
    kept between snapshots in the runner's state: a snapshot colours only the rows of the steps
    taken since the last (all 270 of SmolLM2's thumbnails coloured afresh took the worker ~50 ms
    a step at 90 tokens; a row, well under 1). ``update`` gives (layers, H, N, N, 3) uint8, or
    None for a long prompt, a text past ``GROWN_LIMIT`` or nothing generated: nothing layers ×
    heads × n × n is made then."""

    def __init__(self):
        self._run = None
        self._rgb: np.ndarray | None = None   # (layers, H, GROWN_LIMIT, GROWN_LIMIT, 3)
        self._rows: list = []                 # the Step each generated row was coloured from
        self.coloured = 0                     # rows coloured, for tests: a step's snapshot colours one

    def update(self, generation) -> np.ndarray | None:
        from .views import thumbnail_rgb

        run, steps = generation.behaviour.run, list(generation.steps)
        n, total = len(run.ids), generation.length
        if not steps or run.long or run.attentions is None or total > GROWN_LIMIT:
            return None
        if self._run is not run:
            layers, heads = run.attentions.shape[:2]
            self._rgb = np.empty((layers, heads, GROWN_LIMIT, GROWN_LIMIT, 3), dtype=np.uint8)
            self._rgb[...] = thumbnail_rgb(np.zeros(1, dtype=np.float32))[0]   # a weight 0's colour
            self._rgb[:, :, :n, :n] = thumbnail_rgb(np.asarray(run.attentions))
            self._run, self._rows = run, []
        del self._rows[len(steps):]   # taken back
        for i, step in enumerate(steps):
            if i < len(self._rows) and self._rows[i] is step:
                continue
            keys = step.attention.shape[-1]   # n + i + 1: the cells past it keep a weight 0's colour
            self._rgb[:, :, n + i, :keys] = thumbnail_rgb(step.attention)
            self._rows[i:i + 1] = [step]
            self.coloured += 1
        return self._rgb[:, :, :total, :total].copy()   # the worker goes on writing rows


def _key(behaviour, interventions) -> tuple:
    """Sessions are replaced, never changed in place: their identities tell an edit apart."""
    return (id(behaviour), interventions.ablations, tuple((layer, id(s)) for layer, s in interventions.edits))


def current_generation(state: dict, behaviour, interventions, sampling):
    """The generation kept in the runner's state, made anew for another run, and replayed (the
    same tokens) under interventions that changed."""
    from ...models.generation import Generation

    interventions = behaviour.effective(interventions)   # a layer loaded into the tables unchanged is no edit
    key = _key(behaviour, interventions)
    old = state.get("generation")
    if old is None or state.get("key") != key:
        new = Generation(behaviour, interventions, sampling,
                         layout=None if old is None else old.layout)   # the step's weight copies kept
        if old is not None and old.behaviour is behaviour:
            for token in old.ids[old.prompt_length:]:
                new.step(token)
        state.update(generation=new, key=key, held=(behaviour, interventions))   # held: the ids stay theirs
    generation = state["generation"]
    generation.sampling = sampling
    return generation


def layer_on_text(generation, layer: int):
    """``layer`` of the model's own run on the text as it has grown, as a session (what File ▸
    Open model… would give for that text): the tokens are the generation's ids, not the decoded
    text read again, which may split differently."""
    from ...io.session_file import session_from_dict

    loaded = generation.loaded
    ids = list(generation.ids)
    run = loaded.run_ids(ids, [loaded.tokenizer.piece(i) for i in ids], generation.text())
    return session_from_dict(loaded.layer_parts(run, layer), f"{loaded.source.label} layer {layer}")


class GenerationControl(QObject):
    """Drives a ``GenerationPanel``; ``source()`` gives (behaviour or None, interventions).

    With the panel's *Tables follow the text* on, each action ends by making the tables' layer
    (``follow_layer()``, None: nothing to follow) of the grown text, handed to ``follow(layer,
    session)`` on the GUI thread (the model controller makes it a document edit; False when the
    user kept the tables' unsaved work, which turns following off). ``grown(snapshot)`` after
    every step: the model view's thumbnails grow with the text (``snapshot["grown"]``)."""

    def __init__(self, parent, panel: GenerationPanel, source, follow_layer=lambda: None,
                 follow=lambda layer, session: None, grown=lambda snap: None):
        super().__init__(parent)
        self.panel, self.source = panel, source
        self.follow_layer, self.follow, self.grown = follow_layer, follow, grown
        self.jobs = JobRunner("attnexplorer-generation", GuiThread(self).post, progress_s=0.05)
        self.last: dict | None = None
        self.last_error: str | None = None
        self._generated = False   # a generation is kept: the layer and head choices redraw it
        # A Run's steps are drawn at the pace the GUI thread keeps: a step's snapshot waits here
        # for the next turn of the event loop, and a newer one replaces it (a loaded machine
        # drew every queued snapshot in turn, painting each, and the window froze behind them).
        self._pending: dict | None = None
        self._draw_timer = QTimer(self)
        self._draw_timer.setSingleShot(True)
        self._draw_timer.setInterval(0)
        self._draw_timer.timeout.connect(self._draw_pending)
        # The snapshot being drawn and its parts still to draw (the panel's PARTS, then the
        # model view's thumbnails), one a turn: the event loop paints each before the next.
        self._drawing: dict | None = None
        self._parts: list[str] = []
        self._part_timer = QTimer(self)
        self._part_timer.setSingleShot(True)
        self._part_timer.setInterval(0)
        self._part_timer.timeout.connect(self._draw_part)
        self.drawn = 0   # snapshots drawn, for tests: a Run draws at most one per turn of the loop
        # A Run's worker makes a step's snapshot (copies, the thumbnails' new rows) only when the
        # GUI thread has drawn the last one (set here) and the throttle would pass it on: one
        # the GUI would skip is never made. Made for every step, they took the worker as long
        # as the steps themselves, holding the GIL the GUI thread waits on for much of it.
        self.wanted = threading.Event()
        self.wanted.set()
        panel.step_button.clicked.connect(lambda: self.submit("step"))
        panel.run_button.clicked.connect(lambda: self.submit("run", panel.run_count.value()))
        panel.back_button.clicked.connect(lambda: self.submit("back"))
        panel.append_button.clicked.connect(lambda: self.submit("append", text=panel.token_edit.text()))
        panel.next_tokens.token_clicked.connect(lambda token_id, _token: self.submit("append", token_id=token_id))
        panel.follow_button.toggled.connect(lambda on: on and self._generated and self.submit("follow"))
        panel.token_edit.returnPressed.connect(panel.append_button.click)
        panel.stop_button.clicked.connect(self.jobs.stop)
        panel.layer_spin.valueChanged.connect(lambda _v: self.submit("show"))
        panel.head_spin.valueChanged.connect(lambda _v: self.submit("show"))

    def shutdown(self) -> None:
        self.jobs.shutdown()

    def start(self, loaded) -> None:
        """A new run was opened: what was generated on the old one goes."""
        self.jobs.cancel()
        state = self.jobs.state   # the old generation, its copies of the weights and thumbnails: freed
        self.jobs.submit(lambda _job: state.clear())
        self._pending = self._drawing = None   # the old run's step is not drawn over the new one
        self._parts = []
        self.wanted.set()
        self.last, self._generated = None, False
        self.panel.set_model(loaded)
        if loaded is not None:   # imported with the model, not on the GUI thread at the first Step
            from ...models.generation import Sampling  # noqa: F401

    def sampling(self):
        from ...models.generation import Sampling

        p = self.panel
        if p.greedy.isChecked():
            return Sampling()
        return Sampling(greedy=False, temperature=p.temperature.value(), top_k=p.top_k.value() or None,
                        top_p=None if p.top_p.value() >= 1.0 else p.top_p.value(), seed=p.seed.value())

    def submit(self, action: str, count: int = 1, text: str = "", token_id: int | None = None) -> int | None:
        """``action``: step, run (``count`` tokens), append (``token_id``, or the ``text`` typed),
        back, show (the layer and head chosen), follow (the tables take the text as it is)."""
        behaviour, interventions = self.source()
        if behaviour is None:
            return None
        if action in ("show", "follow") and not self._generated:
            return None
        state, layer, head = self.jobs.state, self.panel.layer_spin.value(), self.panel.head_spin.value()
        sampling = self.sampling()
        follow = self.follow_layer() if self.panel.follow_button.isChecked() and action != "show" else None

        wanted = self.wanted
        wanted.set()

        def work(job):
            generation = current_generation(state, behaviour, interventions, sampling)
            thumbnails = state.setdefault("thumbnails", GrownThumbnails())
            ended = None
            if action == "step":
                generation.step()
            elif action == "append":
                generation.step(token_id if token_id is not None else behaviour.target_id(text, "the typed token"))
            elif action == "back" and generation.steps:
                generation.back()
            elif action == "run":
                for _ in range(count):
                    if job.cancelled:
                        ended = "stopped"
                        break
                    if generation.length >= generation.loaded.max_positions:
                        ended = f"the model reads at most {generation.loaded.max_positions} positions"
                        break
                    if generation.step().stop:
                        ended = "a stop token ended the run"
                        break
                    if wanted.is_set() and job.progress_due():
                        wanted.clear()
                        job.progress(snapshot(generation, layer, head, thumbnails=thumbnails))
            snap = snapshot(generation, layer, head, ended, thumbnails)
            if follow is not None:
                snap["follow"] = (follow, layer_on_text(generation, follow))
            return snap

        self.panel.show_message("generating…" if action in ("step", "run", "append") else "…")
        return self.jobs.submit(work, self._on_done, self._on_failed, self.show_step).generation

    def show_step(self, snap: dict) -> None:
        """A Run's step (the worker's progress; a snapshot as ``snapshot`` makes it): drawn at
        the next turn of the event loop, unless a newer one comes first."""
        self._pending = snap
        if not self._draw_timer.isActive():
            self._draw_timer.start()

    def _draw_pending(self) -> None:
        snap, self._pending = self._pending, None
        if snap is not None:
            self._on_done(snap)

    def _on_done(self, snap: dict) -> None:
        self._pending = None   # the answer is newer than any step still waiting
        self._draw_timer.stop()
        self.last_error, self._generated = None, True
        # a newer snapshot takes the place of one still being drawn, from its first part
        self._drawing, self._parts = snap, [*self.panel.PARTS, "thumbnails"]
        self._draw_part()

    def _draw_part(self) -> None:
        snap = self._drawing
        if snap is None or not self._parts:
            return
        part = self._parts.pop(0)
        if part != "thumbnails":
            getattr(self.panel, part)(snap)
            self._part_timer.start()
            return
        # the model view's 270 thumbnails last, on a turn of their own
        self._drawing = None
        self.grown(snap)
        self.drawn += 1
        self.last = snap
        self.wanted.set()   # drawn: the worker may make the next
        if snap.get("follow") is not None and self.panel.follow_button.isChecked():
            if self.follow(*snap["follow"]) is False:   # the user kept the tables' unsaved work
                self.panel.follow_button.setChecked(False)

    def _on_failed(self, err: BaseException) -> None:
        self._pending = None
        self.wanted.set()
        self.last_error = str(err) if isinstance(err, AttnExplorerError) else f"generation failed: {err}"
        self.panel.show_message(self.last_error)
