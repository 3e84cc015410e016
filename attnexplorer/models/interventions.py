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
  n × n weights are needed) and ``predict``: the top-k next tokens at a position, a picked token
  or a pair as a logit difference, and the logit lens, unedited and intervened. An intervention
  recomputes only the layers from the first one it touches (``forward.forward_from``).

A model without an LM head (MiniLM's sentence encoder) has no tokens to predict: ``predict``
says why and compares the mean-pooled embedding (cosine similarity to the unedited one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

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
        out.append((layer, head))
    return out


@dataclass
class Behaviour:
    """The unedited run of ``loaded`` on a text, cached, and predictions with interventions."""

    loaded: Any
    run: Any
    _models: dict = field(default_factory=dict)    # layer → the model's own session of that layer
    _patches: dict = field(default_factory=dict)   # patch text → {layer: heads' outputs}
    _lens_probs: Any = None                          # (position, the unedited lens's probabilities)
    _base: dict = field(default_factory=dict)       # position → the unedited prediction's ``Scores``
    _edits: dict = field(default_factory=dict)      # layer → (session, its ``LayerEdit``): the last one read
    _tokens: dict = field(default_factory=dict)     # token id → its readable piece

    def __post_init__(self):
        from .forward import head_problem

        self.kind = self.loaded.family.kind
        self.problem = head_problem(self.kind, self.loaded.config, self.loaded.weights)
        if self.run.final is None:
            raise ModelError("the run kept no final residual stream")

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
            from .forward import family

            with torch.no_grad():
                x = family(self.kind, self.loaded.config, self.loaded.weights).embed(torch.tensor(ids))
            _after, contexts = forward_from(self.kind, self.loaded.config, self.loaded.weights, 0, x,
                                            capture=set(layers) | set(kept))
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

    def residuals(self, interventions: Interventions, cancelled=None) -> list:
        """The residual stream after each layer (layers × (n × d) torch), intervened; the
        layers before the first intervention are the cached run's."""
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
                                changes=changes, cancelled=cancelled)
        return cached[:first] + after

    def logits(self, residual):
        from .forward import logits

        return logits(self.kind, self.loaded.config, self.loaded.weights, residual)

    # ---- the prediction --------------------------------------------------------------------

    def default_position(self) -> int:
        """The last token for a decoder; a masked-LM's first [MASK] (ModelError when there is none)."""
        if self.kind != "bert" or self.problem:
            return len(self.run.ids) - 1
        masks = [i for i, piece in enumerate(self.run.pieces) if piece in ("[MASK]", "<mask>")]   # BERT, RoBERTa
        if not masks:
            raise ModelError("the text has no [MASK] token for the masked-LM head to fill: put [MASK] in it, "
                             "or give --position")
        return masks[0]

    def target_id(self, text: str, what: str = "--target") -> int:
        ids = self.loaded.tokenizer.encode_plain(text)
        if len(ids) != 1:
            shown = " + ".join(repr(self.loaded.tokenizer.piece(i)) for i in ids) or "no token"
            raise ModelError(f"{what} {text!r} is {len(ids)} tokens ({shown}), not one: "
                             "pick a single token (a leading space is part of a word's token)")
        return ids[0]

    def token(self, token_id: int) -> str:
        # a prediction names 50-90 tokens (top lists, the lens's layers), mostly the same few
        # again: each made readable once (about 0.1 ms each)
        if token_id not in self._tokens:
            from .tokens import readable_pieces

            self._tokens[token_id] = readable_pieces([self.loaded.tokenizer.piece(token_id)],
                                                     self.loaded.family.wordpiece)[0]
        return self._tokens[token_id]

    def predict(self, interventions: Interventions = Interventions(), position: int | None = None, top: int = 10,
                target: str | None = None, versus: str | None = None, lens: bool = False, cancelled=None) -> dict:
        """The prediction as ``attnexplorer predict --json`` prints it (see the README).

        A short text's whole prediction runs on one thread, the unembedding products too (the
        forward's ``ONE_THREAD_TOKENS`` rule): a second thread woken for each of them spun on a
        busy 2-core machine, 146 ms of CPU for a lens prediction that takes 94 ms on one."""
        from .forward import threads_for

        with threads_for(len(self.run.ids)):
            return self._predict(interventions, position, top, target, versus, lens, cancelled)

    def _predict(self, interventions, position, top, target, versus, lens, cancelled) -> dict:
        import torch

        n = len(self.run.ids)
        interventions = self.effective(interventions)
        if self.problem:
            return self._embedding_only(interventions, cancelled)
        position = self.default_position() if position is None else position
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < n:
            raise ModelError(f"position {position} is out of range: the text has tokens 0..{n - 1}")
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ModelError(f"--top {top}: give a whole number ≥ 1")
        if versus is not None and target is None:
            raise ModelError("--versus needs --target: the logit difference is target − versus")
        picked = [self.target_id(target)] if target is not None else []
        if versus is not None:
            picked.append(self.target_id(versus, "--versus"))
        after = self.residuals(interventions, cancelled) if not interventions.empty else None
        base_layers = [np.asarray(self.run.residual(layer + 1)) for layer in range(self.loaded.num_layers)]
        base = self.base_scores(position)
        out: dict = {"tokens": list(self.run.tokens), "position": position,
                     "baseline": {"top": self._top(base, top)}, "intervened": None, "target": None, "logit_lens": None}
        edited = fresh = None
        if after is not None:
            first = interventions.first_layer()
            if lens:
                # the prediction's row and the lens's rows of the recomputed layers in one
                # product: the unembedding (V × d, 113 MB for SmolLM2) is read once, not twice
                rows = self.logits(torch.stack([a[position] for a in after[first:]]))
                fresh, edited = rows[:-1], Scores(rows[-1])
            else:
                edited = Scores(self.logits(after[-1][position]))
            out["intervened"] = {"top": self._top(edited, top, base), "interventions": interventions.describe(),
                                 # the unedited top tokens under the interventions, for drawing them side by side
                                 "baseline_top": [self._one(edited, e["id"]) for e in out["baseline"]["top"]]}
        if picked:
            out["target"] = self._target(picked, base, edited, target, versus)
        if lens:
            out["logit_lens"] = self._lens(base_layers, fresh, position, picked[0] if picked else None, base, edited,
                                           interventions.first_layer())
        return out

    def base_scores(self, position: int) -> "Scores":
        """The unedited model's prediction at ``position``, computed once per position."""
        if position not in self._base:
            self._base[position] = Scores(self.logits(_row(self.run.residual(self.loaded.num_layers), position)))
        return self._base[position]

    def _top(self, scores: "Scores", k: int, base: "Scores | None" = None) -> list[dict]:
        order = scores.top(k)
        rows = []
        ranks = scores.ranks(order)
        base_ranks = None if base is None else base.ranks(order)
        for i, token_id in enumerate(order):
            token_id = int(token_id)
            row = {"id": token_id, "token": self.token(token_id), "logit": float(scores.logits[token_id]),
                   "prob": float(scores.probs[token_id])}
            if base is not None:
                row["delta_logit"] = float(scores.logits[token_id] - base.logits[token_id])
                row["delta_rank"] = int(ranks[i] - base_ranks[i])
            rows.append(row)
        return rows

    def _one(self, scores: "Scores", token_id: int) -> dict:
        return {"logit": float(scores.logits[token_id]), "prob": float(scores.probs[token_id]),
                "rank": int(scores.ranks([token_id])[0])}

    def _target(self, picked, base, edited, target, versus) -> dict:
        def side(token_id, text):
            entry = {"id": token_id, "token": self.token(token_id), "text": text, "baseline": self._one(base, token_id),
                     "intervened": None if edited is None else self._one(edited, token_id)}
            if edited is not None:
                entry["delta_logit"] = entry["intervened"]["logit"] - entry["baseline"]["logit"]
            return entry

        out = side(picked[0], target)
        if len(picked) > 1:
            out["versus"] = side(picked[1], versus)
            out["logit_difference"] = {
                "baseline": float(base.logits[picked[0]] - base.logits[picked[1]]),
                "intervened": None if edited is None else float(edited.logits[picked[0]] - edited.logits[picked[1]])}
        return out

    def _lens(self, base_layers, fresh, position: int, picked: int | None, base_scores: "Scores",
              edited_scores: "Scores | None", first: int | None) -> list[dict]:
        """Each layer's residual through the final norm and the unembedding. The unedited
        model's is computed once per position (its probabilities kept: layers × vocabulary,
        with each layer's top token), and with the interventions only from their first layer
        on (``fresh``: those layers' logits but the last's): before it the stream is the
        unedited one. The last layer's is the prediction's own row."""
        import torch

        layers = len(base_layers)
        if self._lens_probs is None or self._lens_probs[0] != position:
            stack = torch.from_numpy(np.stack([b[position] for b in base_layers[:-1]]))
            probs = np.concatenate([torch.softmax(self.logits(stack), dim=-1, dtype=torch.float64).numpy(),
                                    base_scores.probs[None]])
            self._lens_probs = (position, probs, probs.argmax(axis=1))
        base, base_best = self._lens_probs[1], self._lens_probs[2]
        edited = edited_best = None
        if fresh is not None:
            rows = torch.softmax(fresh, dim=-1, dtype=torch.float64).numpy()
            edited = np.concatenate([rows, edited_scores.probs[None]])   # layers first … last
            edited_best = edited.argmax(axis=1)
        out = []
        for layer in range(layers):
            entry = {"layer": layer, "baseline": self._lens_entry(base[layer], base_best[layer], picked),
                     "intervened": None}
            if edited is not None:
                entry["intervened"] = (self._lens_entry(base[layer], base_best[layer], picked) if layer < first else
                                       self._lens_entry(edited[layer - first], edited_best[layer - first], picked))
            out.append(entry)
        return out

    def _lens_entry(self, probs: np.ndarray, best, picked: int | None) -> dict:
        best = int(best)
        return {"top": {"id": best, "token": self.token(best), "prob": float(probs[best])},
                "target_prob": None if picked is None else float(probs[picked])}

    def _embedding_only(self, interventions: Interventions, cancelled) -> dict:
        """A model without an LM head: the mean-pooled final embedding, compared by cosine."""
        base = np.asarray(self.run.final, dtype=np.float64).mean(0)
        out = {"tokens": list(self.run.tokens), "position": None, "baseline": None, "intervened": None,
               "target": None, "logit_lens": None,
               "embedding": {"why": f"no tokens to predict: {self.problem}", "cosine": None,
                             "norm": float(np.linalg.norm(base))}}
        if not interventions.empty:
            edited = self.residuals(interventions, cancelled)[-1].double().numpy().mean(0)
            denominator = float(np.linalg.norm(base) * np.linalg.norm(edited))
            out["embedding"]["cosine"] = float(base @ edited / denominator) if denominator else math.nan
            out["intervened"] = {"interventions": interventions.describe()}
        return out


def target_lines(target: dict) -> list[str]:
    """The picked token (and the second one, and their logit difference) as readable lines,
    unedited → intervened: what the Predictions panel and ``predict`` without --json print."""

    def side(entry):
        b, e = entry["baseline"], entry["intervened"]
        text = f"{entry['token']}: p = {b['prob']:.4f}, logit {b['logit']:.3f}, rank {b['rank']}"
        if e is not None:
            text += f" → p = {e['prob']:.4f}, logit {e['logit']:.3f}, rank {e['rank']}"
        return text

    lines = [side(target)]
    if "versus" in target:
        lines.append(side(target["versus"]))
        diff = target["logit_difference"]
        text = f"logit difference {target['token']} − {target['versus']['token']}: {diff['baseline']:.3f}"
        if diff["intervened"] is not None:
            text += f" → {diff['intervened']:.3f}"
        lines.append(text)
    return lines


def _row(residual: np.ndarray, position: int):
    import torch

    return torch.from_numpy(np.ascontiguousarray(residual[position]))


class Scores:
    """One row's logits and probabilities (float64 numpy), the top tokens and the ranks of the
    tokens asked. A rank is counted, not sorted for: a full stable sort of SmolLM2's 49,152
    logits took about 5 ms and a prediction made four, for the ten ranks it shows."""

    def __init__(self, logits):
        import torch

        logits = logits.double()
        self.logits = logits.numpy()
        self.probs = torch.softmax(logits, dim=-1).numpy()

    def top(self, k: int) -> np.ndarray:
        """The ``k`` highest, in the order of a stable sort of the negated logits (ties by id)."""
        values = self.logits
        if k >= len(values):
            return np.argsort(-values, kind="stable")
        cut = np.partition(values, len(values) - k)[len(values) - k]   # the k-th highest
        candidates = np.flatnonzero(values >= cut)                      # ids ascending, ties all in
        return candidates[np.argsort(-values[candidates], kind="stable")][:k]

    def ranks(self, ids) -> np.ndarray:
        """1-based ranks of ``ids`` in that order: the higher logits, then the equal ones of lower id."""
        values = self.logits
        out = np.empty(len(ids), dtype=np.int64)
        for i, token_id in enumerate(ids):
            v = values[token_id]
            out[i] = 1 + np.count_nonzero(values > v) + np.count_nonzero(values[:token_id] == v)
        return out


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
            else:
                context[:, columns] = source[:, columns]
        return context

    return change
