"""attnexplorer's own forward pass for every supported family, in float32 torch: BERT's encoder
(RoBERTa, DistilBERT under its names), GPT-2's, and Llama's decoder, whose switches
(``decoders.Recipe``) make it Qwen, Mistral, Phi-3, GPT-NeoX, Gemma 1–3, SmolLM3 and OLMo 2.

It computes every layer's input (the residual stream entering it), every layer's attention
weights, every attention module's output before the residual add, and the residual stream after
the last layer, from which ``logits`` makes the prediction (the final norm and the LM head;
BERT's masked-LM head). It follows transformers 5's eager code step by step (the same
operations in the same order: ``q·kᵀ · scale``, softmax in float32, GPT-2's ``Conv1D`` as
``x·W + b``, Llama's RMSNorm in float32 and RoPE with float32 angles), and the attention (with
its soft-cap), the RMSNorm, QK-norm and RoPE (with its scaling) are core/kernel/attention.py's
(``attention_block``, ``normalise``, ``normalise_heads``, ``rotate``, ``rope_cos_sin``: one
kernel for the whole product; the grouped K/V heads are shared there, never copied), so its
numbers agree with the model's ``output_attentions`` to float32 rounding;
``tests/models/test_own_forward.py`` checks that against transformers on every family, MiniLM
and SmolLM2, and ``tests/models/test_behaviour.py`` the logits.

The forward runs a family's steps (``_Family``: ``embed``, ``layer``, ``final_norm``,
``lm_head``), so that an intervention (``LayerChange``: other weights, another residual
stream entering a layer, a head's output changed) recomputes only from its first layer on
(``forward_from``), from a cached run's residual stream.

A long text cannot keep every layer's n × n weights (SmolLM2 at 4,096 tokens: 30 layers × 9
heads × 4,096² floats, 18 GB). With ``keep_attentions=False`` the attention runs a block of query
rows at a time (``_Layers._blocks``): each block is the kernel's ``attention_block`` on those
rows only (a causal block reads only the keys up to its last row: the later ones would weigh
exactly 0; each row's log Σ exp comes with it), and of the weights only a max-pooled thumbnail per head (about ``THUMBNAIL_CELLS`` a
side) and each query's log Σ exp(score) are kept, and the attention outputs of every
``n / OUTPUT_ROWS``-th query. Memory is then O(block × n) for the attention and O(layers × n × d)
for the layer inputs, which opening any layer needs.

``weights`` maps transformers' parameter names of the base model (``encoder.layer.0.…``,
``h.0.…``, ``layers.0.…``) to tensors; ``native.read_weights`` and a transformers model's
``state_dict()`` both give that.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from collections import ChainMap
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, NamedTuple

import torch
import torch.nn.functional as F

# at the top, not in the functions: a generation step runs layer() and its norms 30 times, and
# each import statement there went through importlib's lookup again
from ..core.kernel.attention import attention_block, normalise, rotate


class Forward(NamedTuple):
    attentions: torch.Tensor | None     # (layers, H, n, n); None when not kept (a long text)
    layer_inputs: list[torch.Tensor]    # (n, d) entering each layer
    attention_outputs: Any              # (layers, n, d) tensor, or a list of (n, d): before the residual add
    thumbnails: torch.Tensor | None = None   # (layers, H, t, t) max-pooled weights when not kept
    log_sum_exp: torch.Tensor | None = None  # (layers, H, n) log Σ_j exp(scaled score) when not kept
    output_rows: torch.Tensor | None = None  # the query rows attention_outputs holds when not kept (else all)
    final: torch.Tensor | None = None        # (n, d) the residual stream after the last layer, before any final norm


@dataclass(frozen=True)
class LayerChange:
    """What an intervention changes in one layer, in the forward's own terms.

    ``weights``: tensors by the model's names (``h.3.attn.c_attn.weight``…) that replace the
    model's for this layer; ``residual``: the residual stream entering the layer, replacing the
    one the earlier layers made (an edited layer input); ``blocked`` (n × n, True = blocked) and
    ``scaling``: a mask and a score factor replacing the model's; ``heads(context)``: the
    concatenated heads' outputs (n × H·d_v) before the output projection, returned changed
    (ablations). ``models.interventions`` builds these from sessions and ablations.
    """

    weights: Mapping[str, torch.Tensor] = field(default_factory=dict)
    residual: torch.Tensor | None = None
    blocked: torch.Tensor | None = None
    scaling: float | None = None
    heads: Callable[[torch.Tensor], torch.Tensor] | None = None


# The side of a long text's pooled thumbnails, in cells: the model view draws them at 36-120 px.
THUMBNAIL_CELLS = 128
# A long text keeps the attention outputs of about this many query rows per layer (evenly
# spaced), for checking an opened layer against the model: all of them would be 283 MB at
# 4,096 tokens of SmolLM2, a seventh of the memory bound, for a check that rows already make.
OUTPUT_ROWS = 512
# Bytes of one block's (heads × rows × keys) scores: the attention of a long text holds about
# three such buffers at once (scores, weights, their pooled rows).
BLOCK_BYTES = 32 * 1024**2


# Several rows go through the unembedding a block of this many vocabulary rows at a time. Whole,
# the product of SmolLM2's 14 lens rows with its 49,152 × 576 unembedding took 37 ms of one
# core, in blocks of 512 26-30 ms (29 rows: 59 → 36 ms); one row (a matrix-vector product, bound
# by reading the 113 MB) is the same either way. Each logit is the same dot product either way:
# the blocks' numbers equal the whole product's bitwise (checked on SmolLM2 and in the tests).
VOCAB_BLOCK = 512


def unembedding(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for an LM head (V × d): rows of x against blocks of
    ``VOCAB_BLOCK`` vocabulary rows when there are several rows (see ``VOCAB_BLOCK``)."""
    vocabulary = weight.shape[0]
    if x.dim() < 2 or x.shape[0] < 2 or vocabulary <= 2 * VOCAB_BLOCK:
        return F.linear(x, weight, bias)
    return torch.cat([F.linear(x, weight[i:i + VOCAB_BLOCK], None if bias is None else bias[i:i + VOCAB_BLOCK])
                      for i in range(0, vocabulary, VOCAB_BLOCK)], dim=-1)


def _new_gelu(x: torch.Tensor) -> torch.Tensor:
    # transformers' NewGELUActivation (GPT-2's gelu_new), written as it writes it
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"gelu": F.gelu, "gelu_new": _new_gelu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
       "relu": F.relu, "silu": F.silu, "swish": F.silu}


def _heads(x: torch.Tensor, count: int, size: int) -> torch.Tensor:
    """(n, count·size) → (count, n, size), as ``view(…, -1, head_dim).transpose(1, 2)`` does."""
    return x.view(x.shape[0], count, size).transpose(0, 1)


def window_blocked(rows: range, keys: int, window: int) -> torch.Tensor:
    """(len(rows), keys) True where query i may not see key j under a sliding window: j > i or
    i − j ≥ window (the session's ``window`` mask, transformers' ``sliding_window_causal``)."""
    i = torch.tensor(rows)[:, None]
    j = torch.arange(keys)[None, :]
    return (j > i) | (j <= i - window)


def _attend(q, k, v, scaling: float, causal: bool, blocked: torch.Tensor | None = None, softcap: float | None = None,
            key_offset: int = 0):
    """Every query row over every key: the kernel's block (``core.kernel.attention.attention_block``)
    as transformers' eager attention does it (blocked cells filled with ``finfo.min``, the
    softmax in float32). K and V have their own (K/V) heads; the kernel shares them without
    copies. Returns the weights (H, n, n) and the heads' outputs side by side (n, H·d_v).
    ``key_offset``: the position of query row 0 among the keys (``_Layers.row``)."""
    block = attention_block(q, k, v, factor=scaling, mask=blocked, causal=causal and blocked is None,
                            key_offset=key_offset, fill=torch.finfo(q.dtype).min, softmax_dtype=torch.float32,
                            softcap=softcap)
    context = block.output.transpose(0, 1)
    return block.weights, context.reshape(context.shape[0], -1)


class _Layers:
    """Each layer's attention, output and progress, as the family forwards hand them over.

    Dense (``keep`` True): every layer's weights are kept, as transformers' ``output_attentions``.
    Otherwise ``_blocks`` does the attention, a block of query rows at a time. ``progress(layer, layers)`` is called as each layer
    starts (and with ``layers, layers`` at the end); ``cancelled()`` is asked then and between
    blocks, and ``Cancelled`` raised when it says True.

    ``changes`` (layer → ``LayerChange``) are an intervention's; ``record`` False (a run that
    only wants the output, as an intervention's does) keeps no weights, outputs or thumbnails;
    ``capture`` names layers whose heads' outputs (n × H·d_v, before the output projection)
    are kept in ``contexts`` (the source of a patch). ``observe(layer, first_row, weights)``
    sees every layer's weights as they are made, (H, rows, keys) from query row ``first_row``
    on (a long text: one block of rows at a time; a causal block's keys stop at its last row):
    how head scores are computed during a long run with nothing n × n kept.
    """

    def __init__(self, layers: int, keep: bool, progress=None, cancelled=None, *, changes=None,
                 record: bool = True, capture=(), observe=None):
        self.layers, self.keep, self.record, self.observe = layers, keep, record, observe
        self.progress, self.cancelled = progress, cancelled
        self.changes: Mapping[int, LayerChange] = changes or {}
        self.capture = frozenset(capture)
        self.contexts: dict[int, torch.Tensor] = {}
        self.cells, self.block_bytes, self.output_rows = THUMBNAIL_CELLS, BLOCK_BYTES, OUTPUT_ROWS
        self.rows = None
        self.weights: list[torch.Tensor] = []
        self.outputs: torch.Tensor | None = None
        self.thumbnails = self.log_sum_exp = None

    # The position of the first row a layer is given: 0 for a whole text; a cached generation
    # step (``generation``) runs its new rows from the cache's length on.
    position = 0
    # The one row whose output a layer is asked for (a prediction's last layer: ``forward_from``'s
    # ``read``), or None for every row: the layer then makes that row's query, attention, output
    # projection and MLP only, its keys and values from every row, and returns that row (1 × d).
    row: int | None = None

    def start(self, layer: int) -> None:
        self.check()
        if not self.keep and self.record and layer:
            from ..core.compute.memory import return_free_memory

            return_free_memory()   # the last layer's blocks, before this one's MLP and blocks
        if self.progress is not None:
            self.progress(layer, self.layers)

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled():
            from .sources import Cancelled

            raise Cancelled()

    def attend(self, layer: int, q, k, v, scaling: float, causal: bool, window: int | None = None,
               softcap: float | None = None):
        """(n, H·d_v) context of one layer's heads (q: H × n × d_k, k and v already per query head);
        ``window``: a causal sliding window (Mistral, Qwen2's sliding layers); ``softcap``: the
        scores capped to c·tanh(s/c) after scaling (Gemma 2)."""
        change = self.changes.get(layer)
        blocked = None
        if change is not None:
            scaling = scaling if change.scaling is None else change.scaling
            blocked = change.blocked
        first = 0 if self.row is None else self.row
        if self.row is not None and blocked is not None:
            blocked = blocked[first:first + q.shape[1]]
        if self.keep or (not self.record and (blocked is not None or q.shape[0] * q.shape[1] ** 2 * 4 <= self.block_bytes)):
            if blocked is None and window is not None:
                blocked = window_blocked(range(first, first + q.shape[1]), k.shape[1], window)
            weights, context = _attend(q, k, v, scaling, causal, blocked, softcap, first)
            if self.observe is not None:
                self.observe(layer, 0, weights)
            if self.record:
                self.weights.append(weights)
            return context
        return self._blocks(layer, q, k, v, scaling, causal, window, softcap)

    def linear(self, x: torch.Tensor, w: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        """``x·Wᵀ + b`` for the linear module ``name`` of the layer's tensors ``w`` (Llama's
        projections): ``F.linear``, as transformers runs it. A generation step overrides it
        (``generation._Cached``) to read its single row against weights laid out for one row."""
        return F.linear(x, w[name + ".weight"], w.get(name + ".bias"))

    def linears(self, x: torch.Tensor, w: Mapping[str, torch.Tensor], names) -> tuple[torch.Tensor, ...]:
        """``linear`` of several modules reading the same x (q, k and v; gate and up): each its
        own ``F.linear`` here; a generation step's reads them as one product (``_Cached``)."""
        return tuple(self.linear(x, w, name) for name in names)

    def heads(self, layer: int, context: torch.Tensor) -> torch.Tensor:
        """The heads' concatenated outputs as the output projection will read them: an
        intervention's change applied, and kept when the layer is captured."""
        change = self.changes.get(layer)
        if change is not None and change.heads is not None:
            context = change.heads(context)
        if layer in self.capture:
            self.contexts[layer] = context
        return context

    def output(self, layer: int, out: torch.Tensor) -> None:
        if not self.record:
            return
        # One (layers, n, d) tensor filled layer by layer: stacking a list at the end would hold
        # every output twice.
        if self.outputs is None:
            n = out.shape[0]
            self.rows = None if self.keep else torch.arange(0, n, max(1, -(-n // self.output_rows)))
            kept = n if self.rows is None else len(self.rows)
            self.outputs = torch.empty((self.layers, kept, out.shape[1]), dtype=out.dtype)
        self.outputs[layer] = out if self.rows is None else out[self.rows]

    def _blocks(self, layer: int, q, k, v, scaling: float, causal: bool, window: int | None = None,
                softcap: float | None = None):
        from ..core.compute.long.pooling import pool_grid, pool_rows

        heads, n, _ = q.shape
        f = max(pool_grid(n, n, self.cells, self.cells))
        if self.thumbnails is None:
            side = -(-n // f)
            self.thumbnails = torch.zeros((self.layers, heads, side, side), dtype=torch.float32)
            self.log_sum_exp = torch.empty((self.layers, heads, n), dtype=torch.float32)
        rows = max(1, self.block_bytes // (heads * n * 4))
        step = max(f, rows // f * f)
        context = torch.empty((heads, n, v.shape[-1]), dtype=v.dtype)
        for r0 in range(0, n, step):
            self.check()
            r1 = min(n, r0 + step)
            width = r1 if causal else n   # a causal row's later keys weigh exactly 0: not computed
            # the kernel's block on these rows (row i over keys ≤ i + r0 when causal), the softmax
            # written out so that each row's log Σ exp comes with it
            mask = None if window is None else window_blocked(range(r0, r1), width, window)
            block = attention_block(q[:, r0:r1], k[:, :width], v[:, :width], factor=scaling, causal=causal,
                                    mask=mask, key_offset=r0, log_sum_exp=True, softcap=softcap)
            weights = block.weights
            if self.observe is not None:
                self.observe(layer, r0, weights)
            self.log_sum_exp[layer, :, r0:r1] = block.log_sum_exp
            context[:, r0:r1] = block.output
            pooled = pool_rows(weights, None, f, f, "weights", "max")
            self.thumbnails[layer, :, r0 // f:r0 // f + pooled.shape[1], :pooled.shape[2]] = pooled
            del block, weights, pooled
        context = context.transpose(0, 1)
        return context.reshape(context.shape[0], -1)

    def result(self, inputs: list[torch.Tensor], final: torch.Tensor) -> Forward:
        if self.progress is not None:
            self.progress(self.layers, self.layers)
        attentions = torch.stack(self.weights) if self.keep else None
        return Forward(attentions, inputs, self.outputs, self.thumbnails, self.log_sum_exp, self.rows, final)


class _Family:
    """One family's forward, step by step: ``embed`` the ids, one ``layer`` at a time (reading
    its tensors through the layer's change, when there is one), then ``final_norm`` and
    ``unembed`` (the LM head). Splitting it so lets an intervention start at any layer from the
    cached residual stream instead of from the embeddings."""

    # Whether ``layer`` makes only ``_Layers.row``'s output when asked (the decoders do).
    one_row = False

    def __init__(self, config: Any, weights: Mapping[str, torch.Tensor]):
        self.config, self.weights = config, weights
        self.layers = int(config.num_hidden_layers)

    def tensors(self, run: "_Layers", layer: int) -> Mapping[str, torch.Tensor]:
        change = run.changes.get(layer)
        return ChainMap(dict(change.weights), self.weights) if change is not None and change.weights else self.weights

    def lm_head(self) -> tuple[torch.Tensor, torch.Tensor | None] | str:
        """(unembedding V × d, its bias or None), or why the weights hold no head."""
        raise NotImplementedError

    def cap(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits as the model finally gives them (Gemma 2 soft-caps them)."""
        return logits

    def unembed(self, residual: torch.Tensor, linear=None) -> torch.Tensor:
        """The logits of residual-stream rows: the final norm, the LM head (``linear(x, W, b)``:
        a generation step's reads a weight laid out for one row; by default ``unembedding``)
        and the model's cap."""
        head = self.lm_head()
        if isinstance(head, str):
            from .sources import ModelError

            raise ModelError(head)
        return self.cap((linear or unembedding)(self.final_norm(residual), *head))

    def _decoder_head(self, norm: str, embeddings: str, tied_by_default: bool):
        """A decoder's head: ``lm_head.weight``, else the embeddings when the config ties them."""
        if norm not in self.weights:
            return f"the weights hold no final norm ({norm})"
        if "lm_head.weight" in self.weights:
            return self.weights["lm_head.weight"], None
        if getattr(self.config, "tie_word_embeddings", tied_by_default):
            return self.weights[embeddings], None
        return "the weights hold no LM head (lm_head.weight) and the config does not tie it to the embeddings"


class _Bert(_Family):
    def __init__(self, config, weights):
        super().__init__(config, weights)
        self.H = int(config.num_attention_heads)
        self.dk = int(config.hidden_size) // self.H
        from .families import encoder_act, encoder_eps

        self.eps, self.act = encoder_eps(config), ACT[encoder_act(config)]

    def ln(self, x, w, name):
        return F.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], self.eps)

    def embed(self, ids, w=None):
        from .families import position_ids, token_type

        w = self.weights if w is None else w
        x = w["embeddings.word_embeddings.weight"][ids] + token_type(w)
        rows = position_ids(self.config, ids)
        return self.ln(x + w["embeddings.position_embeddings.weight"][rows], w, "embeddings.LayerNorm")

    def layer(self, layer, x, run):
        w, p = self.tensors(run, layer), f"encoder.layer.{layer}."
        q, k, v = (_heads(F.linear(x, w[f"{p}attention.self.{m}.weight"], w.get(f"{p}attention.self.{m}.bias")),
                          self.H, self.dk) for m in ("query", "key", "value"))
        context = run.heads(layer, run.attend(layer, q, k, v, self.dk ** -0.5, causal=False))
        out = F.linear(context, w[p + "attention.output.dense.weight"], w.get(p + "attention.output.dense.bias"))
        run.output(layer, out)
        x = self.ln(out + x, w, p + "attention.output.LayerNorm")
        hidden = self.act(F.linear(x, w[p + "intermediate.dense.weight"], w.get(p + "intermediate.dense.bias")))
        out = F.linear(hidden, w[p + "output.dense.weight"], w.get(p + "output.dense.bias"))
        return self.ln(out + x, w, p + "output.LayerNorm")

    def final_norm(self, x):
        """BertForMaskedLM's prediction transform (dense, activation, LayerNorm): BERT is post-LN,
        so the stream is already normalised and the head's own transform comes before the decoder.
        RoBERTa's ``lm_head`` is the same with exact GELU whatever hidden_act says."""
        w = self.weights
        if self.roberta:
            h = F.gelu(F.linear(x, w["lm_head.dense.weight"], w.get("lm_head.dense.bias")))
            return F.layer_norm(h, (h.shape[-1],), w["lm_head.layer_norm.weight"], w["lm_head.layer_norm.bias"],
                                self.eps)
        t = "cls.predictions.transform."
        h = self.act(F.linear(x, w[t + "dense.weight"], w.get(t + "dense.bias")))
        return F.layer_norm(h, (h.shape[-1],), w[t + "LayerNorm.weight"], w[t + "LayerNorm.bias"], self.eps)

    @property
    def roberta(self) -> bool:
        return self.config.model_type == "roberta"

    def lm_head(self):
        w = self.weights
        if self.roberta:
            if "lm_head.dense.weight" not in w:
                return ("it is a RoBERTa encoder without a masked-LM head (lm_head): it predicts no tokens, "
                        "so its output is compared as a mean-pooled embedding")
            return w.get("lm_head.decoder.weight", w["embeddings.word_embeddings.weight"]), w.get("lm_head.bias")
        if "cls.predictions.transform.dense.weight" not in w:
            return ("it is a BERT encoder without a masked-LM head (cls.predictions): it predicts no tokens, "
                    "so its output is compared as a mean-pooled embedding")
        bias = w.get("cls.predictions.bias", w.get("cls.predictions.decoder.bias"))
        return w.get("cls.predictions.decoder.weight", w["embeddings.word_embeddings.weight"]), bias


def _conv1d(x, w, name):
    return torch.addmm(w[name + ".bias"], x, w[name + ".weight"])   # GPT-2's Conv1D stores in × out


class _Gpt2(_Family):
    one_row = True

    def __init__(self, config, weights):
        super().__init__(config, weights)
        self.d, self.H = int(config.hidden_size), int(config.num_attention_heads)
        self.dk = self.d // self.H
        self.eps, self.act = float(config.layer_norm_epsilon), ACT[config.activation_function]

    def ln(self, x, w, name):
        return F.layer_norm(x, (self.d,), w[name + ".weight"], w[name + ".bias"], self.eps)

    def embed(self, ids, w=None, start: int = 0):
        w = self.weights if w is None else w
        return w["wte.weight"][ids] + w["wpe.weight"][start:start + len(ids)]

    def layer(self, layer, x, run):
        w, p, config = self.tensors(run, layer), f"h.{layer}.", self.config
        q, k, v = (_heads(t, self.H, self.dk) for t in _conv1d(self.ln(x, w, p + "ln_1"), w, p + "attn.c_attn")
                   .split(self.d, dim=-1))
        if run.row is not None:   # one row asked for (``_Layers.row``): the fused product made every row's q too
            q, x = q[:, run.row:run.row + 1], x[run.row:run.row + 1]
        scaling = self.dk ** -0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            scaling /= float(layer + 1)
        context = run.heads(layer, run.attend(layer, q, k, v, scaling, causal=True))
        out = _conv1d(context, w, p + "attn.c_proj")
        run.output(layer, out)
        x = x + out
        return x + _conv1d(self.act(_conv1d(self.ln(x, w, p + "ln_2"), w, p + "mlp.c_fc")), w, p + "mlp.c_proj")

    def final_norm(self, x):
        return self.ln(x, self.weights, "ln_f")

    def lm_head(self):
        return self._decoder_head("ln_f.weight", "wte.weight", True)


def _rope_row(rope, row: int):
    """``rope``'s angles of one position (``_Layers.row``)."""
    cos, sin, dims, layout = rope
    return cos[row:row + 1], sin[row:row + 1], dims, layout


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm: the kernel's one RMSNorm (``core.kernel.attention.normalise``)."""
    return normalise(x, "rms", weight, None, eps)


class _Llama(_Family):
    """Llama's block, and with ``decoders.Recipe``'s switches the Llama-shaped families read
    under its names: GPT-NeoX's LayerNorms, plain MLP and parallel residual, Gemma's scaled
    embeddings, partial or absent RoPE per layer."""

    one_row = True

    def __init__(self, config, weights):
        from .decoders import recipe
        from .families import head_dim, window_of_layer

        super().__init__(config, weights)
        self.H = int(config.num_attention_heads)
        self.Hkv = int(getattr(config, "num_key_value_heads", None) or self.H)
        self.hd = head_dim(config)
        self.recipe = recipe(config)
        self.eps, self.act = self.recipe.eps, ACT[self.recipe.act]
        self._rope: dict = {}
        self.windows = [window_of_layer(config, layer) for layer in range(self.layers)]

    def rope(self, layer: int, n: int, offset: int = 0):
        """The kernel's RoPE over the layer's rotated dimensions for positions offset … offset +
        n − 1, ``half`` layout, its angles made in float32 as transformers makes them
        (``rotate_half`` gives the same numbers); None on a layer without RoPE."""
        settings = self.recipe.ropes[layer]
        if settings is None:
            return None
        scaling = settings.get("scaling")
        key = (settings["theta"], settings["dims"], tuple(sorted((scaling or {}).items())), n, offset)
        found = self._rope.get(key)
        if found is None:
            from ..core.kernel.attention import rope_cos_sin
            from ..core.inputs.stages import RopeScaling

            dims = settings["dims"]
            cos, sin = rope_cos_sin(n, dims, settings["theta"], torch.float32, "cpu", offset, float32_angles=True,
                                    scaling=None if scaling is None else RopeScaling(**scaling))
            if len(self._rope) > 1:   # a long text's are large: keep Gemma 3's two kinds of layer, no more
                self._rope.clear()
            # read back from the local name: a model kept by its caller may run on two workers
            found = self._rope[key] = (cos, sin, dims, "half")
        return found

    def norm(self, x, w, name):
        if self.recipe.norm == "layer":
            return F.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], self.eps)
        return _rms(x, w[name + ".weight"], self.eps)

    def embed(self, ids, w=None, start: int = 0):
        w = self.weights if w is None else w
        x = w["embed_tokens.weight"][ids]
        if self.recipe.embed_scale is not None:   # Gemma: × √hidden_size in the weights' dtype
            x = x * torch.tensor(self.recipe.embed_scale, dtype=x.dtype)
        return x

    def layer(self, layer, x, run):
        w, p, H, Hkv, hd = self.tensors(run, layer), f"layers.{layer}.", self.H, self.Hkv, self.hd

        def lin(x, name):
            return run.linear(x, w, name)

        r = self.recipe
        rope = self.rope(layer, x.shape[0], run.position)
        h = x if r.input_norm is None else self.norm(x, w, p + r.input_norm)
        row = run.row
        if row is None:
            q, k, v = run.linears(h, w, (p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"))
        else:   # one row asked for (``_Layers.row``): its query, every row's keys and values
            k, v = run.linears(h, w, (p + "self_attn.k_proj", p + "self_attn.v_proj"))
            q, x = lin(h[row:row + 1], p + "self_attn.q_proj"), x[row:row + 1]
        q, k, v = _heads(q, H, hd), _heads(k, Hkv, hd), _heads(v, Hkv, hd)
        if r.qk_norm is not None:   # the kernel's QK-norm, before RoPE
            from ..core.kernel.attention import normalise_heads

            q = normalise_heads(q, "rms", w[p + "self_attn.q_norm.weight"], None, self.eps, over=r.qk_norm)
            k = normalise_heads(k, "rms", w[p + "self_attn.k_norm.weight"], None, self.eps, over=r.qk_norm)
        if rope is not None:   # K and V keep their Hkv heads: the kernel shares them
            q, k = rotate(q, rope if row is None else _rope_row(rope, row)), rotate(k, rope)
        scaling = hd ** -0.5 if r.scaling is None else r.scaling
        context = run.heads(layer, run.attend(layer, q, k, v, scaling, causal=True, window=self.windows[layer],
                                              softcap=r.softcap))
        out = lin(context, p + "self_attn.o_proj")
        run.output(layer, out)

        def mlp(h):
            if r.gated:
                gate, up = run.linears(h, w, (p + "mlp.gate_proj", p + "mlp.up_proj"))
                h = lin(self.act(gate) * up, p + "mlp.down_proj")
            else:
                h = lin(self.act(lin(h, p + "mlp.up_proj")), p + "mlp.down_proj")
            return h if r.mlp_out_norm is None else self.norm(h, w, p + r.mlp_out_norm)

        if r.parallel:   # GPT-NeoX: both read the layer's input, added in its order
            return mlp(self.norm(x, w, p + r.mlp_in_norm)) + out + x
        x = x + (out if r.attention_out_norm is None else self.norm(out, w, p + r.attention_out_norm))
        return x + mlp(x if r.mlp_in_norm is None else self.norm(x, w, p + r.mlp_in_norm))

    def final_norm(self, x):
        return self.norm(x, self.weights, "norm")

    def lm_head(self):
        tied = self.config.model_type in ("gemma", "gemma2", "gemma3_text", "smollm3")   # tied by default
        return self._decoder_head("norm.weight", "embed_tokens.weight", tied)

    def cap(self, logits):
        """Gemma 2's final soft-cap: c·tanh(logits / c), in its order."""
        c = self.recipe.final_softcap
        return logits if c is None else torch.tanh(logits / c) * c


FAMILIES = {"bert": _Bert, "gpt2": _Gpt2, "llama": _Llama}   # by the family's kind (families.Family.kind)


def family(kind: str, config: Any, weights: Mapping[str, torch.Tensor]) -> _Family:
    return FAMILIES[kind](config, weights)


# Up to this many tokens the forward runs on one thread: its kernels are then small enough that
# waking a second thread for each of a few hundred of them costs more than it saves, and on a
# busy 2-core machine far more (SmolLM2 on 32 tokens: 0.6 s on one thread, 4-12 s on two with
# the load average at 8). torch's thread count is global, so it is put back after, as the fit does.
# The thread count also decides float32's rounding: a matrix product split across threads sums
# in another order, so transformers' own eager forward on two threads and on one differ (1.5e-5
# on a tiny Llama's second layer input, whose numbers reach 28). Every route runs a text with
# the same count (``threads_for``), so the own forward and the transformers route agree bitwise.
ONE_THREAD_TOKENS = 64


@contextmanager
def threads_for(tokens: int):
    """Inside it, torch runs on one thread for a short text (``ONE_THREAD_TOKENS``); put back after."""
    threads = torch.get_num_threads()
    if tokens > ONE_THREAD_TOKENS or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def forward(kind: str, config: Any, weights: Mapping[str, torch.Tensor], ids: list[int], *,
            keep_attentions: bool = True, progress=None, cancelled=None, observe=None) -> Forward:
    """Run the model on one sequence of token ids (no batch), without gradients.

    ``keep_attentions=False`` (a long text) keeps pooled thumbnails and log Σ exp per query
    instead of every n × n; ``progress(layer, layers)``, ``cancelled()`` and ``observe`` as for ``_Layers``.
    The result's ``final`` is the residual stream after the last layer (every layer's MLP
    included), from which ``logits`` makes the model's prediction.
    """
    with threads_for(len(ids)), torch.no_grad():
        model = family(kind, config, weights)
        run = _Layers(model.layers, keep_attentions, progress, cancelled, observe=observe)
        x = model.embed(torch.tensor(ids, dtype=torch.long))
        inputs = []
        for layer in range(model.layers):
            run.start(layer)
            inputs.append(x)
            x = model.layer(layer, x, run)
        return run.result(inputs, x)


def forward_from(kind: str, config: Any, weights: Mapping[str, torch.Tensor], start: int, x: torch.Tensor, *,
                 changes: Mapping[int, LayerChange] | None = None, capture=(), cancelled=None, model=None,
                 rows: int | None = None, read: int | None = None) -> tuple[list[torch.Tensor], dict[int, torch.Tensor]]:
    """Run layers ``start…`` from ``x``, the residual stream entering layer ``start`` (a cached
    run's), with ``changes`` applied: what an intervention recomputes. Returns the residual
    stream after each of those layers (the last is the final one) and the captured layers'
    heads' outputs (``_Layers.capture``). Nothing n × n is kept.

    ``model``: the family's forward (``family``) to run, when the caller keeps one (its RoPE
    tables are then made once, not per call). ``rows``: run the text's first ``rows`` rows only,
    for a causal model (a decoder's row i reads rows ≤ i alone, so a prediction at position p
    needs rows 0…p); the changes' n-row tensors are cut to them, and ``changes[…].heads`` gets
    those rows' heads' outputs (a head's mean over the text cannot be taken from them).
    ``read``: of the last layer's output only this row is read (a decoder's prediction): that
    layer makes it alone (``_Layers.row``) unless the layer is changed, and the last residual
    stream returned is that row (1 × d)."""
    changes = dict(changes or {})
    if rows is not None and rows < x.shape[0]:
        x, changes = x[:rows], {layer: _first_rows(change, rows) for layer, change in changes.items()}
    with threads_for(x.shape[0]), torch.no_grad():
        model = family(kind, config, weights) if model is None else model
        run = _Layers(model.layers, False, None, cancelled, changes=changes, record=False, capture=capture)
        after = []
        for layer in range(start, model.layers):
            run.start(layer)
            change = changes.get(layer)
            if change is not None and change.residual is not None:
                x = change.residual
            if read is not None and layer == model.layers - 1 and change is None and model.one_row:
                run.row = read
            x = model.layer(layer, x, run)
            after.append(x)
        return after, run.contexts


def _first_rows(change: LayerChange, rows: int) -> LayerChange:
    """``change`` on the text's first ``rows`` rows: its residual stream's rows, its mask's
    top-left corner."""
    return replace(change, residual=None if change.residual is None else change.residual[:rows],
                   blocked=None if change.blocked is None else change.blocked[:rows, :rows])


def head_problem(kind: str, config: Any, weights: Mapping[str, torch.Tensor]) -> str | None:
    """Why these weights cannot predict tokens (no LM head, a BERT without ``cls.predictions``), or None."""
    found = family(kind, config, weights).lm_head()
    return found if isinstance(found, str) else None


def logits(kind: str, config: Any, weights: Mapping[str, torch.Tensor], residual: torch.Tensor, model=None
           ) -> torch.Tensor:
    """The model's logits (rows × vocabulary) for residual-stream rows (… × d): the final norm
    (BERT: its masked-LM transform) and the unembedding, as the task model applies them.
    A residual after an earlier layer gives that layer's logit lens. ``model``: as ``forward_from``."""
    with torch.no_grad():
        return (family(kind, config, weights) if model is None else model).unembed(residual)
