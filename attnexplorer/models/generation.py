"""Step through generation: a decoder writes one token at a time, from a KV cache, Qt-free.

``Generation(behaviour, interventions, sampling, stop_ids)`` reads the prompt once (the prefill:
every layer's keys and values go into the cache), then each ``step()``:

1. picks the next token from the last position's logits (the most likely one, a sample, or the
   one the caller gives), and
2. runs that one token through the model: per layer only its q, k and v are computed, its k and
   v are appended to the cache, its query reads every cached key with the kernel's
   ``core.kernel.attention.attention_block`` (``key_offset``: the cache's length), then the output
   projection, the MLP, and after the last layer the final norm and the LM head.

The layers are ``forward``'s own (``_Family.layer``), given a run (``_Cached``) whose
``attend`` reads and grows the cache and whose ``position`` is the new token's, so GPT-2's
position table and Llama's RoPE see the right positions; the numbers are the full forward's.
The user's interventions stay in force: they are ``Behaviour.changes`` (edited layers' weights
and scale, an edited layer input on the prompt's rows, zero and mean ablations); a mean-ablated
head's mean is taken over the prompt's positions and held for the new tokens (a mean over the
growing text would change the past rows the cache already holds). A patched head (its output
from a second text of the same length) and an edited mask (a rule for the prompt's rows only)
have no meaning for a growing text and are refused.

``back()`` removes the last token (the cache is cut back). Each ``Step`` holds the new token's
attention row for every layer × head, the prediction it was picked from (top 5), and the cache
size (layers × 2 × K/V heads × n × d_k numbers, their bytes): nothing n × n is kept.
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.kernel.attention import attention_block
from .forward import _Layers, family, threads_for, window_blocked
from .interventions import Behaviour, Interventions, check_stream
from .prediction import Scores
from .sources import ModelError

TOP = 5


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: ``greedy`` the most likely; else a draw at ``temperature``
    from the ``top_k`` most likely tokens and the smallest set whose probability reaches
    ``top_p`` (transformers' order: temperature, top-k, top-p). The draw at position p uses a
    generator seeded by (``seed``, p), so a run, and a step taken back and taken again,
    reproduce."""

    greedy: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.temperature, bool) or not (isinstance(self.temperature, (int, float))
                                                      and np.isfinite(self.temperature) and self.temperature > 0):
            raise ModelError(f"--temperature {self.temperature}: give a number > 0")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ModelError(f"--top-k {self.top_k}: give a whole number ≥ 1")
        if self.top_p is not None and not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ModelError(f"--top-p {self.top_p}: give a number in (0, 1]")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ModelError(f"--seed {self.seed}: give a whole number ≥ 0")

    def pick(self, logits: torch.Tensor, position: int) -> int:
        if self.greedy:
            return int(torch.argmax(logits))
        # shifted so the largest score is 0 before dividing: a tiny temperature (5e-324) sends the
        # rest to -inf instead of every score to ±inf, whose softmax is NaN (token 0 was drawn)
        scores = logits.double()
        scores = (scores - scores.max()) / self.temperature
        if self.top_k is not None and self.top_k < scores.shape[0]:
            cut = torch.topk(scores, self.top_k).values[-1]
            scores = scores.masked_fill(scores < cut, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if self.top_p is not None and self.top_p < 1:
            order = torch.argsort(probs, descending=True, stable=True)
            before = torch.cumsum(probs[order], 0) - probs[order]   # the mass of the tokens above each
            probs = probs.clone()
            probs[order[before >= self.top_p]] = 0.0                 # the most likely one always stays
        probs = (probs / probs.sum()).numpy()
        draw = np.random.default_rng([self.seed, position]).random()
        return int(min(np.searchsorted(np.cumsum(probs), draw, side="right"), len(probs) - 1))

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"temperature {self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k {self.top_k}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        return "sampled (" + ", ".join(parts) + f", seed {self.seed})"


@dataclass(frozen=True)
class Step:
    """One appended token: its id, piece and position; ``top`` the prediction it was picked from
    (the TOP most likely with logits and probabilities, as ``predict`` gives them) and its own
    probability there; ``attention`` (layers, H, position + 1) the new token's weights over every
    key, itself included; the cache after it; ``stop`` whether it is a stop token."""

    token_id: int
    token: str
    position: int
    top: list
    prob: float
    attention: np.ndarray
    cache_numbers: int
    cache_bytes: int
    stop: bool = False


class KVCache:
    """Every layer's keys and values, (K/V heads, capacity, d) float32 buffers grown by doubling;
    ``length`` rows are in use. Keys are stored rotated (RoPE), as the attention reads them."""

    def __init__(self, layers: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.length = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int):
        """Put rows ``start…`` of k and v in the layer's buffers; the keys and values 0 … end."""
        end = start + k.shape[1]
        for store, new in ((self.keys, k), (self.values, v)):
            old = store[layer]
            if old is None or old.shape[1] < end:
                grown = torch.empty((new.shape[0], max(end, 2 * (0 if old is None else old.shape[1]), 16), new.shape[2]),
                                    dtype=new.dtype)
                if old is not None:
                    grown[:, :start] = old[:, :start]
                store[layer] = old = grown
            old[:, start:end] = new
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def numbers(self) -> int:
        """layers × 2 × K/V heads × n × d_k (d_v for the values)."""
        return sum((k.shape[0] * k.shape[2] + v.shape[0] * v.shape[2]) * self.length
                   for k, v in zip(self.keys, self.values) if k is not None)

    def layer(self, layer: int, kv_head: int) -> tuple[np.ndarray, np.ndarray]:
        """The cached K and V of one layer's K/V head, (n, d_k) and (n, d_v) numpy copies."""
        k, v = self.keys[layer], self.values[layer]
        return k[kv_head, :self.length].numpy().copy(), v[kv_head, :self.length].numpy().copy()


# A step reads every weight matrix once for one row (a matrix-vector product: memory-bound).
# Stored as the model stores them, output × input, torch's product on this CPU streamed them at
# ~10 GB per CPU second; the same product over the transpose laid out input × output, at ~16
# (SmolLM2's 538 MB of matrices: ~52 → ~33 ms a step). The transposes are copies, so a model
# whose matrices exceed this many bytes keeps the model's layout (no second copy of its weights).
ROW_LAYOUT_BYTES = 1024**3


def _one_row_blas():
    """numpy's OpenBLAS, as threadpoolctl controls it, or None (numpy built on another BLAS, or
    threadpoolctl missing: torch's product then). Its one-row product over the input × output
    layout streams the weights near the memory's read rate; torch's (MKL's sgemm on this AMD
    CPU) does not: SmolLM2's 121 matrices, 538 MB, in 33 ms of CPU against 43 (and 27 for a bare
    sum of the same bytes), back to back at load 9."""
    global _BLAS
    if _BLAS is False:
        _BLAS = None
        try:
            import numpy  # noqa: F401 - loaded before threadpoolctl looks for its BLAS
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return None
        found = [lib for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers
                 if "numpy" in lib.filepath]
        _BLAS = found[0] if found else None
    return _BLAS


_BLAS = False   # not looked for yet


class RowLayout:
    """The weight matrices a step reads, each transposed once into a contiguous input × output
    copy (``linear``: ``x·Wᵀ + b`` as ``addmm(b, x, Wᵀ)``, for one row only; several rows, as
    a prefill's, take ``F.linear`` as the model does). A copy is made the first time its matrix
    is read and kept for the matrix it was made from (an edited layer's weights get their own);
    ``copied`` counts the copies made: a step after the first makes none. Shared by the
    generations of one model (``Generation(layout=…)``: a replay under other interventions)."""

    def __init__(self, weights):
        matrices = sum(t.numel() * t.element_size() for t in weights.values() if t.dim() == 2)
        self.enabled = matrices <= ROW_LAYOUT_BYTES
        self.weights = weights
        self.blas = _one_row_blas() if self.enabled else None
        # (the ids of the weights and biases read) → (those tensors, the weights' transposes side
        # by side, the biases joined or None, each weight's output width)
        self._transposed: dict[tuple, tuple] = {}
        self.copied = 0

    def retain(self, tensors) -> None:
        """Drop the copies made from tensors not among ``tensors`` (an edited layer's weights
        replaced since: each edit would otherwise keep its weights and their copies alive)."""
        alive = {id(t) for t in tensors}
        self._transposed = {key: found for key, found in self._transposed.items()
                            if all(id(t) in alive for t in found[0])}

    def holds_copy_of(self, tensor: torch.Tensor) -> bool:
        """Whether a copy made from ``tensor`` is kept (``retain`` drops those of replaced weights)."""
        return any(t is tensor for sources, *_ in self._transposed.values() for t in sources)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self.linears(x, [(weight, bias)])[0]

    def linears(self, x: torch.Tensor, pairs) -> tuple[torch.Tensor, ...]:
        """``linear`` of several (weight, bias) pairs reading the same row, as one product over
        their transposes side by side (q, k and v; gate and up): one pass over the memory, one
        call instead of three, the same columns."""
        if x.shape[0] != 1 or not self.enabled:
            return tuple(F.linear(x, weight, bias) for weight, bias in pairs)
        sources = tuple(t for pair in pairs for t in pair if t is not None)
        key = tuple(map(id, sources))
        found = self._transposed.get(key)
        if found is None or not all(map(operator.is_, found[0], sources)):   # ids of tensors since freed
            weights = [w for w, _ in pairs]
            bias = None if all(b is None for _, b in pairs) else torch.cat(
                [torch.zeros(w.shape[0], dtype=w.dtype) if b is None else b for w, b in pairs])
            joined = torch.cat([w.t() for w in weights], dim=1).contiguous()
            found = (sources, joined, bias, [w.shape[0] for w in weights],
                     joined.numpy() if self.blas is not None and joined.dtype == torch.float32 else None)
            self._transposed[key] = found
            self.copied += 1
        _, joined, bias, widths, rows = found
        if rows is not None and x.dtype == torch.float32:   # numpy's OpenBLAS, one thread (``one_thread``)
            out = torch.from_numpy(x.numpy() @ rows)
            if bias is not None:
                out += bias
        else:
            out = torch.mm(x, joined) if bias is None else torch.addmm(bias, x, joined)
        return out.split(widths, dim=1) if len(widths) > 1 else (out,)

    @contextmanager
    def one_thread(self):
        """Inside it, the BLAS this layout's products call runs on the calling thread only (the
        step's own: waking a second thread for each of a step's 121 products is what made a step
        84 ms on a busy machine, see ``Generation.step``); put back after."""
        blas = self.blas
        threads = 1 if blas is None else blas.get_num_threads()
        if threads == 1:
            yield
            return
        blas.set_num_threads(1)
        try:
            yield
        finally:
            blas.set_num_threads(threads)


class _Cached(_Layers):
    """A run of new rows at ``position`` over the cache: ``attend`` appends their k and v and
    reads every cached key (causal among the new rows), keeping the last row's weights."""

    def __init__(self, layers: int, cache: KVCache, position: int, changes, layout: RowLayout):
        super().__init__(layers, False, changes=changes, record=False)
        self.cache, self.position, self.layout = cache, position, layout
        self.last_rows: list[torch.Tensor] = []

    def linear(self, x, w, name):
        return self.layout.linear(x, w[name + ".weight"], w.get(name + ".bias"))

    def linears(self, x, w, names):
        return self.layout.linears(x, [(w[name + ".weight"], w.get(name + ".bias")) for name in names])

    def attend(self, layer, q, k, v, scaling, causal, window=None, softcap=None):
        change = self.changes.get(layer)
        if change is not None and change.scaling is not None:
            scaling = change.scaling
        keys, values = self.cache.append(layer, k, v, self.position)
        # a sliding window (Mistral, Qwen2's sliding layers): the new rows see only the last keys
        mask = None if window is None else window_blocked(range(self.position, self.position + q.shape[1]),
                                                          keys.shape[1], window)
        block = attention_block(q, keys, values, factor=scaling, causal=True, key_offset=self.position, mask=mask,
                                fill=torch.finfo(q.dtype).min, softmax_dtype=torch.float32, softcap=softcap)
        self.last_rows.append(block.weights[:, -1])
        context = block.output.transpose(0, 1)
        return context.reshape(context.shape[0], -1)


def stop_ids(config: Any) -> tuple[int, ...]:
    """The model's end-of-text token(s), from its config."""
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(i) for i in (eos if isinstance(eos, (list, tuple)) else [eos]))


@dataclass
class Generation:
    """A prompt and the tokens appended to it, with the cache that makes each step one token's work."""

    behaviour: Behaviour
    interventions: Interventions = Interventions()
    sampling: Sampling = Sampling()
    stop: tuple[int, ...] | None = None          # None: the model's own (``stop_ids``)
    steps: list = field(default_factory=list)
    layout: RowLayout | None = None              # None: a new one (another generation's: its copies reused)

    def __post_init__(self):
        b = self.behaviour
        self.loaded = b.loaded
        if b.kind not in ("gpt2", "llama"):
            raise ModelError(f"{self.loaded.source.label} is not a decoder: only GPT-2 and Llama-family models "
                             "write text token by token")
        if b.problem:
            raise ModelError(f"{self.loaded.source.label} cannot generate: {b.problem}")
        from .native import NotNative, check_config

        try:
            check_config(self.loaded.config)
        except NotNative as why:
            raise ModelError(f"{self.loaded.source.label} cannot generate here: its {why} is not in attnexplorer's "
                             "own forward, which generation runs") from None
        if self.stop is None:
            self.stop = stop_ids(self.loaded.config)
        interventions = b.effective(self.interventions)
        if any(a.kind == "patch" for a in interventions.ablations):
            raise ModelError("a patched head takes its output from a second text of the same length, and "
                             "generation makes the text longer: use a zero or mean ablation")
        for layer, session in interventions.edits:
            if b.layer_edit(layer, session).change.blocked is not None:
                raise ModelError(f"layer {layer}'s mask was edited: an edited mask says nothing about the rows of "
                                 "the tokens generation adds; reset the mask to generate")
        self._held: dict = {}
        self.changes = b.changes(interventions, self._held)
        self.model = family(b.kind, self.loaded.config, self.loaded.weights)
        if self.layout is None or self.layout.weights is not self.loaded.weights:
            self.layout = RowLayout(self.loaded.weights)
        else:   # another generation's: the copies of weights these interventions no longer read go
            self.layout.retain([*self.loaded.weights.values(),
                                *(t for change in self.changes.values() for t in change.weights.values())])
        self.ids = list(b.run.ids)
        self.prompt_length = len(self.ids)
        self.cache = KVCache(self.model.layers)
        self._scores = None   # (logits, their Scores): see ``scores``
        self._logits = [self._forward(self.ids, 0, prefill=True)[0]]   # the next-token logits at each position

    # ---- the model -------------------------------------------------------------------------

    def _forward(self, ids: list[int], start: int, prefill: bool = False):
        """Rows ``start…`` of the text through every layer over the cache: (the last row's
        logits, the last row's weights (layers, H, keys))."""
        # inference mode: no autograd bookkeeping at all (version counters, views) on ~1,000 small ops a step
        with threads_for(len(ids)), self.layout.one_thread(), torch.inference_mode():
            run = _Cached(self.model.layers, self.cache, start, self.changes, self.layout)
            x = self.model.embed(torch.tensor(ids, dtype=torch.long), start=start)
            for layer in range(self.model.layers):
                change = self.changes.get(layer)
                if prefill and change is not None and change.residual is not None:
                    x = change.residual   # an edited layer input: the prompt's rows
                x = self.model.layer(layer, x, run)
            if self.changes:   # an edit can overflow the stream (interventions.check_stream); refused
                check_stream(x, "at the last token")   # before the cache counts the rows
            self.cache.length = start + len(ids)
            # the prompt's prediction as the Predictions tab makes it; a step's over its row layout
            logits = self.model.unembed(x[-1:], F.linear if prefill else self.layout.linear)
            return logits[0], torch.stack(run.last_rows)

    # ---- what the user does ----------------------------------------------------------------

    @property
    def logits(self) -> torch.Tensor:
        """The next-token logits after the text so far (vocabulary,)."""
        return self._logits[-1]

    @property
    def length(self) -> int:
        return len(self.ids)

    def scores(self) -> Scores:
        """The next-token logits' ``Scores``, made once per position: a step and the Generate
        tab's bars (``upcoming``) read the same ones."""
        logits = self.logits
        if self._scores is None or self._scores[0] is not logits:
            with threads_for(1):
                self._scores = (logits, Scores(logits))
        return self._scores[1]

    def upcoming(self, k: int = TOP) -> list[dict]:
        """The prediction the next step picks from (the top ``k``, as ``Step.top``): the Generate
        tab's next-token bars."""
        return self.behaviour.top_tokens(self.scores(), k)

    def cache_size(self) -> tuple[int, int]:
        """(numbers, bytes) the KV cache holds: layers × 2 × K/V heads × n × d_k, float32."""
        numbers = self.cache.numbers()
        return numbers, numbers * 4

    def step(self, token_id: int | None = None) -> Step:
        """Append one token (the sampling's pick, or ``token_id``) and run it through the model."""
        n = len(self.ids)
        limit = self.loaded.max_positions
        if n >= limit:
            raise ModelError(f"the text is {n} tokens long, the most {self.loaded.source.label} reads")
        vocabulary = self.logits.shape[0]
        if token_id is not None and (isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer))
                                     or not 0 <= token_id < vocabulary):
            raise ModelError(f"token {token_id} is not in the vocabulary (ids 0..{vocabulary - 1})")
        # One thread for the whole step, the pick included: an argmax over the vocabulary on two
        # woke the second thread for ~0.1 ms of work, and on a busy machine waited for it to be
        # scheduled (84 ms a step at load 6, more than the step's forward).
        with threads_for(1):
            scores = self.scores()   # first: it refuses logits that are not finite, before any pick
            token_id = int(self.sampling.pick(self.logits, n) if token_id is None else token_id)
            top = self.behaviour.top_tokens(scores, TOP)
            logits, rows = self._forward([token_id], n)
        self.ids.append(token_id)
        self._logits.append(logits)
        numbers, size = self.cache_size()
        step = Step(token_id, self.behaviour.token(token_id), n, top, float(scores.probs[token_id]),
                    rows.numpy(), numbers, size, token_id in self.stop)
        self.steps.append(step)
        return step

    def run(self, count: int, progress=None, cancelled=None) -> list[Step]:
        """Up to ``count`` steps; a stop token or the model's last position ends the run early.
        ``progress(done, count, step)`` after each; ``cancelled()`` asked before each."""
        out = []
        for i in range(count):
            if cancelled is not None and cancelled():
                from .sources import Cancelled

                raise Cancelled()
            if len(self.ids) >= self.loaded.max_positions:
                break
            out.append(self.step())
            if progress is not None:
                progress(i + 1, count, out[-1])
            if out[-1].stop:
                break
        return out

    def back(self) -> Step:
        """Remove the last appended token: the cache is cut back to the text before it."""
        if not self.steps:
            raise ModelError("nothing to take back: the text is the prompt")
        self.ids.pop()
        self._logits.pop()
        self.cache.length = len(self.ids)
        return self.steps.pop()

    def text(self) -> str:
        """The prompt and the generated tokens as the tokenizer writes them."""
        return self.loaded.tokenizer.decode(self.ids)

    def generated_text(self) -> str:
        return self.loaded.tokenizer.decode(self.ids[self.prompt_length:])
