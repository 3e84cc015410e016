"""From attention to behaviour: a real model's prediction, unedited and with the user's
interventions (edited layers and head ablations), Qt-free.

- ``Ablation(layer, head, kind)``: ``zero`` (the head's output is 0), ``mean`` (its output at
  every position replaced by its mean over the text's positions, in the same run) or ``patch``
  (its output taken from the unedited model's run on a second text of the same token length:
  activation patching). "The head's output" is its slice of the concatenated heads that the
  output projection reads (transformers' ``o_proj`` / ``c_proj`` / ``attention.output.dense``
  input), so a zero-ablated head is exactly a hook zeroing that slice.
- ``Interventions``: the ablations, the edited layers (layer → the tables' session, several kept
  at once) and the patch text: an immutable value, one per undo step in the window.
- ``Behaviour(loaded, run)``: the cached unedited run (its residual stream, layers × n × d; no
  n × n weights are needed), what the interventions change in it and the intervened runs, and
  ``predict`` (``prediction.Predictor``): the top-k next tokens at a position, a picked token
  or a pair as a logit difference, and the logit lens, unedited and intervened. An intervention
  recomputes only the layers from the first one it touches (``forward.forward_from``).

A model without an LM head (MiniLM's sentence encoder) has no tokens to predict: ``predict``
says why and compares the mean-pooled embedding (cosine similarity to the unedited one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


from .prediction import Predictor, Scores
from .sources import ModelError

ABLATIONS = ("zero", "mean", "patch")


@dataclass(frozen=True, order=True)
class Ablation:
    layer: int
    head: int
    kind: str = "zero"

    def __post_init__(self):
        if self.kind not in ABLATIONS:
            raise ModelError(f"unknown ablation {self.kind!r}: zero, mean or patch")

    def describe(self) -> str:
        return f"L{self.layer}H{self.head} {self.kind}"


@dataclass(frozen=True)
class Interventions:
    """What the user changed in the model. ``edits`` maps a layer to its edited session (a core
    ``Session``), kept as a tuple of pairs so the value stays hashable and immutable."""

    ablations: tuple[Ablation, ...] = ()
    edits: tuple[tuple[int, Any], ...] = ()
    patch_text: str | None = None

    @property
    def empty(self) -> bool:
        return not self.ablations and not self.edits

    def first_layer(self) -> int | None:
        layers = [a.layer for a in self.ablations] + [layer for layer, _ in self.edits]
        return min(layers) if layers else None

    def edit(self, layer: int):
        return dict(self.edits).get(layer)

    def with_edit(self, layer: int, session) -> "Interventions":
        edits = dict(self.edits)
        if session is None:
            edits.pop(layer, None)
        else:
            edits[layer] = session
        return replace(self, edits=tuple(sorted(edits.items(), key=lambda kv: kv[0])))

    def ablation(self, layer: int, head: int) -> Ablation | None:
        return next((a for a in self.ablations if (a.layer, a.head) == (layer, head)), None)

    def with_ablation(self, layer: int, head: int, kind: str | None) -> "Interventions":
        """``kind`` None removes the head's ablation; otherwise it is set (replacing another kind)."""
        kept = [a for a in self.ablations if (a.layer, a.head) != (layer, head)]
        if kind is not None:
            kept.append(Ablation(layer, head, kind))
        return replace(self, ablations=tuple(sorted(kept)))

    def describe(self) -> list[str]:
        return [f"layer {layer} edited" for layer, _ in self.edits] + [a.describe() for a in self.ablations]


def parse_heads(text: str, layers: int, heads: int, label: str) -> list[tuple[int, int]]:
    """``"3.1,17.4"`` → [(3, 1), (17, 4)], each checked against the model."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        layer, dot, head = part.partition(".")
        if not dot or not layer.strip().isdigit() or not head.strip().isdigit():
            raise ModelError(f"--ablate {part!r}: give heads as LAYER.HEAD, e.g. 3.1,17.4")
        layer, head = int(layer), int(head)
        if layer >= layers:
            raise ModelError(f"--ablate {part}: layer {layer} is out of range: {label} has layers 0..{layers - 1}")
        if head >= heads:
            raise ModelError(f"--ablate {part}: head {head} is out of range: {label} has heads 0..{heads - 1}")
        if (layer, head) in out:   # as --layer refuses a layer named twice
            raise ModelError(f"--ablate {text!r} names head {layer}.{head} twice")
        out.append((layer, head))
    return out


@dataclass
class Behaviour:
    """The unedited run of ``loaded`` on a text, cached, and predictions with interventions."""

    loaded: Any
    run: Any
    _models: dict = field(default_factory=dict)    # layer → the model's own session of that layer
    _patches: dict = field(default_factory=dict)   # patch text → {layer: heads' outputs}
    _edits: dict = field(default_factory=dict)      # layer → (session, its ``LayerEdit``): the last one read
    _model: Any = None                              # the family's forward (``model``)

    def __post_init__(self):
        from .forward import head_problem

        self.kind = self.loaded.family.kind
        self.problem = head_problem(self.kind, self.loaded.config, self.loaded.weights)
        if self.run.final is None:
            raise ModelError("the run kept no final residual stream")
        self.predictor = Predictor(self)

    # ---- what the interventions change -----------------------------------------------------

    def model_session(self, layer: int):
        if layer not in self._models:
            from ..io.session_file import session_from_dict

            self._models[layer] = session_from_dict(self.loaded.layer_parts(self.run, layer),
                                                    f"{self.loaded.source.label} layer {layer}")
        return self._models[layer]

    def layer_edit(self, layer: int, session):
        from .layer_edits import layer_edit

        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.loaded.num_layers:
            raise ModelError(f"layer {layer} is out of range: {self.loaded.source.label} has layers "
                             f"0..{self.loaded.num_layers - 1}")
        # A prediction reads each edited layer three times (``effective`` twice, ``changes``) and
        # the next one again while the user edits another layer: comparing a session with the
        # model's layer is a few ms of array comparisons each time. Sessions are immutable, so
        # the last one read per layer is kept with its edit (the session itself, not its id).
        kept = self._edits.get(layer)
        if kept is not None and kept[0] is session:
            return kept[1]
        edit = layer_edit(self.kind, self.loaded.config, self.loaded.weights, self.run, layer, session,
                          self.model_session(layer), self.loaded.source.label)
        self._edits[layer] = (session, edit)
        return edit

    def effective(self, interventions: Interventions) -> Interventions:
        """The interventions without the edited layers that are the model's own (a layer loaded
        into the tables and not changed, or changed back)."""
        kept = tuple((layer, s) for layer, s in interventions.edits if self.layer_edit(layer, s).changed)
        return interventions if len(kept) == len(interventions.edits) else replace(interventions, edits=kept)

    def check(self, interventions: Interventions) -> None:
        """ModelError for what cannot be applied to this model and text."""
        L, H = self.loaded.num_layers, self.loaded.num_heads
        for a in interventions.ablations:
            if not 0 <= a.layer < L:
                raise ModelError(f"layer {a.layer} is out of range: {self.loaded.source.label} has layers 0..{L - 1}")
            if not 0 <= a.head < H:
                raise ModelError(f"head {a.head} is out of range: {self.loaded.source.label} has heads 0..{H - 1}")
        if any(a.kind == "patch" for a in interventions.ablations):
            self._patch(interventions.patch_text, {a.layer for a in interventions.ablations if a.kind == "patch"})

    def _patch(self, text: str | None, layers: set[int]):
        """The heads' outputs of ``layers`` on the unedited run of the patch text (n × H·d_v
        each: only the layers a patched head is in, kept for the next request)."""
        if text is None or not str(text).strip():
            raise ModelError("a patched head needs a second text to take its output from (--patch-text)")
        kept = self._patches.get(text, {})
        if not set(layers) <= set(kept):
            import torch

            from .forward import forward_from

            from .head_scores import document

            ids = document(self.loaded, text)[0]   # a text, or a repeated:N[:SEED] probe
            n = len(self.run.ids)
            if len(ids) != n:
                raise ModelError(f"the patch text is {len(ids)} tokens long; the text is {n}: "
                                 "a patched head needs a text of the same token length")
            with torch.no_grad():
                x = self.model.embed(torch.tensor(ids))
            _after, contexts = forward_from(self.kind, self.loaded.config, self.loaded.weights, 0, x,
                                            capture=set(layers) | set(kept), model=self.model)
            self._patches.clear()   # one patch text at a time
            self._patches[text] = contexts
        return self._patches[text]

    def changes(self, interventions: Interventions, held_means: dict | None = None) -> dict:
        """Layer → ``forward.LayerChange`` of the interventions. ``held_means`` (a dict, filled
        on the first run): a mean-ablated head's mean is taken on that run's positions and kept
        for later runs (generation: the prompt's mean, held while new tokens are appended)."""
        from .forward import LayerChange

        self.check(interventions)
        changes = {layer: self.layer_edit(layer, session).change for layer, session in interventions.edits}
        size = self.loaded.head_dim
        by_layer: dict[int, list[Ablation]] = {}
        for a in interventions.ablations:
            by_layer.setdefault(a.layer, []).append(a)
        patched = {a.layer for a in interventions.ablations if a.kind == "patch"}
        patch = self._patch(interventions.patch_text, patched) if patched else {}
        for layer, ablations in by_layer.items():
            cuts = [(slice(a.head * size, (a.head + 1) * size), a.kind) for a in ablations]
            source = patch.get(layer)
            base = changes.get(layer, LayerChange())
            held = None if held_means is None else held_means.setdefault(layer, {})
            changes[layer] = replace(base, heads=_ablate(cuts, source, held))
        return changes

    # ---- runs ------------------------------------------------------------------------------

    @property
    def model(self):
        """The family's forward (``forward.family``), kept: every prediction runs layers and the
        LM head through it, and building it (its recipe, its RoPE tables) took 3-5 ms a time."""
        if self._model is None:
            from .forward import family

            self._model = family(self.kind, self.loaded.config, self.loaded.weights)
        return self._model

    def residuals(self, interventions: Interventions, cancelled=None) -> list:
        """The residual stream after each layer (layers × (n × d) torch), intervened; the
        layers before the first intervention are the cached run's."""
        return self._intervened(interventions, None, cancelled)

    def rows_at(self, interventions: Interventions, position: int, cancelled=None) -> list:
        """The residual stream's row at ``position`` after each layer (layers × (d,) torch),
        intervened: what a prediction and its logit lens read. A decoder reruns rows 0…position
        only (a later row cannot reach an earlier one), unless a head is mean-ablated (its mean is
        over the whole text)."""
        causal = self.kind != "bert" and not any(a.kind == "mean" for a in interventions.ablations)
        after = self._intervened(interventions, position + 1 if causal else None, cancelled, position)
        # the last layer gave the position's row alone when it could (``forward_from``'s ``read``)
        return [a[position] for a in after[:-1]] + [after[-1][position if after[-1].shape[0] > 1 else 0]]

    def _intervened(self, interventions: Interventions, rows: int | None, cancelled, read: int | None = None) -> list:
        import torch

        from .forward import forward_from

        layers = self.loaded.num_layers
        cached = [torch.from_numpy(self.run.residual(layer + 1)) for layer in range(layers)]
        first = interventions.first_layer()
        if first is None:
            return cached
        changes = self.changes(interventions)   # checks the interventions first
        start = torch.from_numpy(self.run.layer_inputs[first])
        after, _ = forward_from(self.kind, self.loaded.config, self.loaded.weights, first, start,
                                changes=changes, cancelled=cancelled, model=self.model, rows=rows, read=read)
        for layer, stream in enumerate(after, start=first):
            check_stream(stream, f"after layer {layer}")
        return cached[:first] + after

    def logits(self, residual):
        from .forward import logits

        return logits(self.kind, self.loaded.config, self.loaded.weights, residual, model=self.model)

    # ---- the prediction (prediction.Predictor) -----------------------------------------------

    def predict(self, interventions: Interventions = Interventions(), position: int | None = None, top: int = 10,
                target: str | None = None, versus: str | None = None, lens: bool = False, cancelled=None,
                on_prediction=None) -> dict:
        """The prediction as ``attnexplorer predict --json`` prints it (``Predictor.predict``)."""
        return self.predictor.predict(interventions, position, top, target, versus, lens, cancelled, on_prediction)

    def default_position(self) -> int:
        return self.predictor.default_position()

    def target_id(self, text: str, what: str = "--target") -> int:
        return self.predictor.target_id(text, what)

    def token(self, token_id: int) -> str:
        return self.predictor.token(token_id)

    def top_tokens(self, scores: Scores, k: int, base: Scores | None = None) -> list[dict]:
        return self.predictor.top_tokens(scores, k, base)


# |x| past this squares past float32's largest number (3.4e38): the next norm's mean(x²) is inf
# and the row comes out as zeros (in the model's arithmetic and transformers' alike), so every
# logit was 0 and the panel showed a uniform guess as the edited model's prediction.
STREAM_LIMIT = 1.8e19


def check_stream(stream, where: str) -> None:
    """ModelError when an intervened residual stream holds NaN, infinity or a value whose square
    float32 cannot hold: what the model would predict from it is its overflow, not its numbers."""
    largest = float(stream.abs().max())   # NaN stays NaN: refused below too
    if not largest < STREAM_LIMIT:
        reached = f"reaches {largest:.3g}" if largest == largest and largest != float("inf") else "holds NaN or infinity"
        raise ModelError(f"with these interventions the residual stream {where} {reached}: past {STREAM_LIMIT:.2g} "
                         "the model's norm squares it beyond float32's range and reads zeros, so it predicts nothing; "
                         "undo the edit that made a value this large")


def _ablate(cuts, source, held=None):
    """The heads' change of one layer: each cut (a head's columns) zeroed, averaged over the
    positions, or taken from the patch run's same columns. ``held`` (a dict): a mean is taken
    on the first run and reused after (keyed by the head's first column)."""

    def change(context):
        context = context.clone()
        for columns, kind in cuts:
            if kind == "zero":
                context[:, columns] = 0.0
            elif kind == "mean":
                mean = context[:, columns].mean(dim=0, keepdim=True)
                context[:, columns] = mean if held is None else held.setdefault(columns.start, mean)
            else:   # the patch run's rows (a prediction may run the text's first rows only)
                context[:, columns] = source[:context.shape[0], columns]
        return context

    return change
