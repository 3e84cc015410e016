"""A real model's prediction read off its runs, unedited and with the user's interventions,
as ``attnexplorer predict --json`` prints it (see the README): the top-k next tokens at a
position, a picked token or a pair as a logit difference, and the logit lens. Qt-free.

``Predictor(runs)`` reads it from ``runs``, an ``interventions.Behaviour`` (the cached
unedited run and the intervened ones: ``run``, ``loaded``, ``kind``, ``problem``,
``effective``, ``residuals``, ``logits``); it keeps what does not change between predictions
(the unedited rows per position, the lens's probabilities, the readable tokens).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from .sources import ModelError


class Predictor:
    """Predictions from ``runs``'s model (see the module)."""

    def __init__(self, runs):
        # A proxy: the Behaviour holds its Predictor, and a cycle would keep a model's run
        # arrays alive until the garbage collector found it.
        self.runs = weakref.proxy(runs)
        self._lens_probs = None   # (position, the unedited lens's probabilities, each layer's top token)
        self._base: dict = {}     # position → the unedited prediction's ``Scores``
        self._tokens: dict = {}   # token id → its readable piece

    def default_position(self) -> int:
        """The last token for a decoder; a masked-LM's first [MASK] (ModelError when there is none)."""
        if self.runs.kind != "bert" or self.runs.problem:
            return len(self.runs.run.ids) - 1
        masks = [i for i, piece in enumerate(self.runs.run.pieces) if piece in ("[MASK]", "<mask>")]   # BERT, RoBERTa
        if not masks:
            raise ModelError("the text has no [MASK] token for the masked-LM head to fill: put [MASK] in it, "
                             "or give --position")
        return masks[0]

    def target_id(self, text: str, what: str = "--target") -> int:
        ids = self.runs.loaded.tokenizer.encode_plain(text)
        if len(ids) != 1:
            # each piece as the window shows tokens (␣happy, not GPT-2's byte-level Ġhappy)
            shown = " + ".join(repr(self.token(i)) for i in ids) or "no token"
            raise ModelError(f"{what} {text!r} is {len(ids)} tokens ({shown}), not one: "
                             "pick a single token (a leading space is part of a word's token)")
        return ids[0]

    def token(self, token_id: int) -> str:
        # a prediction names 50-90 tokens (top lists, the lens's layers), mostly the same few
        # again: each made readable once (about 0.1 ms each)
        if token_id not in self._tokens:
            from .tokens import readable_pieces

            self._tokens[token_id] = readable_pieces([self.runs.loaded.tokenizer.piece(token_id)],
                                                     self.runs.loaded.family.wordpiece)[0]
        return self._tokens[token_id]

    def predict(self, interventions, position: int | None = None, top: int = 10, target: str | None = None,
                versus: str | None = None, lens: bool = False, cancelled=None, on_prediction=None) -> dict:
        """The prediction as ``attnexplorer predict --json`` prints it (see the README).

        ``on_prediction(result)``, with ``lens``: called with the prediction before the lens is
        computed (the same dict, ``logit_lens`` still None), so that a window can draw it at
        once: the lens's rows of the recomputed layers through the unembedding (V × d each)
        cost as much again as the prediction's last steps. ``cancelled()`` is asked before the
        lens too.

        A short text's whole prediction runs on one thread, the unembedding products too (the
        forward's ``ONE_THREAD_TOKENS`` rule): a second thread woken for each of them spun on a
        busy 2-core machine, 146 ms of CPU for a lens prediction that takes 94 ms on one."""
        from .forward import threads_for

        with threads_for(len(self.runs.run.ids)):
            return self._predict(interventions, position, top, target, versus, lens, cancelled, on_prediction)

    def _predict(self, interventions, position, top, target, versus, lens, cancelled, on_prediction) -> dict:
        import torch

        n = len(self.runs.run.ids)
        interventions = self.runs.effective(interventions)
        if self.runs.problem:
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
        # only the row at the position, after each layer: a decoder reruns rows 0…position
        after = self.runs.rows_at(interventions, position, cancelled) if not interventions.empty else None
        base = self.base_scores(position)
        out: dict = {"tokens": list(self.runs.run.tokens), "position": position,
                     "baseline": {"top": self.top_tokens(base, top)}, "intervened": None, "target": None, "logit_lens": None}
        edited = None
        if after is not None:
            # the prediction's one row through the unembedding; the lens's rows come after it
            edited = Scores(self.runs.logits(after[-1]))
            out["intervened"] = {"top": self.top_tokens(edited, top, base), "interventions": interventions.describe(),
                                 # the unedited top tokens under the interventions, for drawing them side by side
                                 "baseline_top": [self._one(edited, e["id"]) for e in out["baseline"]["top"]]}
        if picked:
            out["target"] = self._target(picked, base, edited, target, versus)
        if lens:
            if on_prediction is not None:
                on_prediction(dict(out))
            if cancelled is not None and cancelled():
                from .sources import Cancelled

                raise Cancelled()
            first = interventions.first_layer()
            # the recomputed layers' rows but the last (the prediction's own) in one product:
            # the unembedding (V × d, 113 MB for SmolLM2) is read once for them all
            fresh = (None if after is None else
                     self.runs.logits(torch.stack(after[first:-1])) if first < len(after) - 1 else
                     torch.empty((0, base.logits.shape[0]), dtype=torch.float32))
            out["logit_lens"] = self._lens(position, picked[0] if picked else None, base, fresh, edited, first)
        return out

    def base_scores(self, position: int) -> "Scores":
        """The unedited model's prediction at ``position``, computed once per position."""
        if position not in self._base:
            self._base[position] = Scores(self.runs.logits(_row(self.runs.run.residual(self.runs.loaded.num_layers), position)))
        return self._base[position]

    def top_tokens(self, scores: "Scores", k: int, base: "Scores | None" = None) -> list[dict]:
        """The ``k`` most likely tokens of ``scores`` (id, readable token, logit, prob), with
        their change from ``base`` (logit, rank) when given."""
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

    def _lens(self, position: int, picked: int | None, base_scores: "Scores", fresh, edited_scores: "Scores | None",
              first: int | None) -> list[dict]:
        """Each layer's residual through the final norm and the unembedding. The unedited
        model's is computed once per position (its probabilities kept: layers × vocabulary,
        with each layer's top token), and with the interventions only from their first layer
        on (``fresh``: those layers' logits but the last's): before it the stream is the
        unedited one. The last layer's is the prediction's own row."""
        import torch

        layers = self.runs.loaded.num_layers
        if self._lens_probs is None or self._lens_probs[0] != position:
            stack = torch.from_numpy(np.stack([self.runs.run.residual(layer + 1)[position] for layer in range(layers - 1)]))
            probs = np.concatenate([torch.softmax(self.runs.logits(stack), dim=-1, dtype=torch.float64).numpy(),
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

    def _embedding_only(self, interventions, cancelled) -> dict:
        """A model without an LM head: the mean-pooled final embedding, compared by cosine."""
        base = np.asarray(self.runs.run.final, dtype=np.float64).mean(0)
        out = {"tokens": list(self.runs.run.tokens), "position": None, "baseline": None, "intervened": None,
               "target": None, "logit_lens": None,
               "embedding": {"why": f"no tokens to predict: {self.runs.problem}", "cosine": None,
                             "norm": float(np.linalg.norm(base))}}
        if not interventions.empty:
            edited = self.runs.residuals(interventions, cancelled)[-1].double().numpy().mean(0)
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


NOT_FINITE = ("the model's logits are NaN or infinite: a number on the way overflows float32 (an edited value "
              "too large for the model to carry, or a weight or eps of the model that is not finite), so it predicts "
              "nothing")


class Scores:
    """One row's logits and probabilities (float64 numpy), the top tokens and the ranks of the
    tokens asked. A rank is counted, not sorted for: a full stable sort of SmolLM2's 49,152
    logits took about 5 ms and a prediction made four, for the ten ranks it shows."""

    def __init__(self, logits):
        import torch

        logits = logits.double()
        if not bool(torch.isfinite(logits).all()):
            # a float32 overflow on the way (an edited value of 1e30 times the stream) is NaN here;
            # its softmax showed every token at 1/V and argmax drew token 0, silently
            raise ModelError(NOT_FINITE)
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
