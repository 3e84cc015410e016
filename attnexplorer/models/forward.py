"""attnexplorer's own forward pass for the three supported families, in float32 torch.

It computes what the model view and the sessions need and nothing else: every layer's input
(the residual stream entering it), every layer's attention weights, and every attention
module's output before the residual add. It follows transformers 5's eager code step by step
(the same operations in the same order: ``q·kᵀ · scale``, softmax in float32, GPT-2's
``Conv1D`` as ``x·W + b``, Llama's RMSNorm in float32 and RoPE's ``cat(freqs, freqs)`` with
``rotate_half``), so its numbers agree with the model's ``output_attentions`` to float32
rounding; ``tests/models/test_own_forward.py`` checks that against transformers on every
family, MiniLM and SmolLM2. The last layer's MLP is skipped: nothing reads its output.

``weights`` maps transformers' parameter names of the base model (``encoder.layer.0.…``,
``h.0.…``, ``layers.0.…``) to tensors; ``native.read_weights`` and a transformers model's
``state_dict()`` both give that.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

import torch
import torch.nn.functional as F


class Forward(NamedTuple):
    attentions: torch.Tensor            # (layers, H, n, n)
    layer_inputs: list[torch.Tensor]    # (n, d) entering each layer
    attention_outputs: list[torch.Tensor]   # (n, d) before the residual add


def _new_gelu(x: torch.Tensor) -> torch.Tensor:
    # transformers' NewGELUActivation (GPT-2's gelu_new), written as it writes it
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT = {"gelu": F.gelu, "gelu_new": _new_gelu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
       "relu": F.relu, "silu": F.silu, "swish": F.silu}


def _heads(x: torch.Tensor, count: int, size: int) -> torch.Tensor:
    """(n, count·size) → (count, n, size), as ``view(…, -1, head_dim).transpose(1, 2)`` does."""
    return x.view(x.shape[0], count, size).transpose(0, 1)


def _attend(q, k, v, scaling: float, causal: bool):
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    if causal:
        n = scores.shape[-1]
        blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(blocked, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    context = torch.matmul(weights, v).transpose(0, 1)
    return weights, context.reshape(context.shape[0], -1)


def _bert(config: Any, w: Mapping[str, torch.Tensor], ids: torch.Tensor) -> Forward:
    n, H = len(ids), int(config.num_attention_heads)
    dk = int(config.hidden_size) // H
    eps, act = float(config.layer_norm_eps), ACT[config.hidden_act]

    def ln(x, name):
        return F.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][0]
    x = ln(x + w["embeddings.position_embeddings.weight"][:n], "embeddings.LayerNorm")
    inputs, outputs, attentions = [], [], []
    for layer in range(int(config.num_hidden_layers)):
        p = f"encoder.layer.{layer}."
        inputs.append(x)
        q, k, v = (_heads(F.linear(x, w[f"{p}attention.self.{m}.weight"], w.get(f"{p}attention.self.{m}.bias")), H, dk)
                   for m in ("query", "key", "value"))
        weights, context = _attend(q, k, v, dk ** -0.5, causal=False)
        attentions.append(weights)
        out = F.linear(context, w[p + "attention.output.dense.weight"], w.get(p + "attention.output.dense.bias"))
        outputs.append(out)
        x = ln(out + x, p + "attention.output.LayerNorm")
        hidden = act(F.linear(x, w[p + "intermediate.dense.weight"], w.get(p + "intermediate.dense.bias")))
        x = ln(F.linear(hidden, w[p + "output.dense.weight"], w.get(p + "output.dense.bias")) + x, p + "output.LayerNorm")
    return Forward(torch.stack(attentions), inputs, outputs)


def _conv1d(x, w, name):
    return torch.addmm(w[name + ".bias"], x, w[name + ".weight"])   # GPT-2's Conv1D stores in × out


def _gpt2(config: Any, w: Mapping[str, torch.Tensor], ids: torch.Tensor) -> Forward:
    n, d, H = len(ids), int(config.hidden_size), int(config.num_attention_heads)
    dk = d // H
    eps, act = float(config.layer_norm_epsilon), ACT[config.activation_function]

    def ln(x, name):
        return F.layer_norm(x, (d,), w[name + ".weight"], w[name + ".bias"], eps)

    x = w["wte.weight"][ids] + w["wpe.weight"][:n]
    inputs, outputs, attentions = [], [], []
    layers = int(config.num_hidden_layers)
    for layer in range(layers):
        p = f"h.{layer}."
        inputs.append(x)
        q, k, v = (_heads(t, H, dk) for t in _conv1d(ln(x, p + "ln_1"), w, p + "attn.c_attn").split(d, dim=-1))
        scaling = dk ** -0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            scaling /= float(layer + 1)
        weights, context = _attend(q, k, v, scaling, causal=True)
        attentions.append(weights)
        out = _conv1d(context, w, p + "attn.c_proj")
        outputs.append(out)
        x = x + out
        if layer + 1 < layers:
            x = x + _conv1d(act(_conv1d(ln(x, p + "ln_2"), w, p + "mlp.c_fc")), w, p + "mlp.c_proj")
    return Forward(torch.stack(attentions), inputs, outputs)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.to(torch.float32)
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _llama(config: Any, w: Mapping[str, torch.Tensor], ids: torch.Tensor) -> Forward:
    from .families import head_dim, rope_theta

    n, H = len(ids), int(config.num_attention_heads)
    Hkv = int(getattr(config, "num_key_value_heads", None) or H)
    hd = head_dim(config)
    eps, act = float(config.rms_norm_eps), ACT[config.hidden_act]
    inv_freq = 1.0 / (rope_theta(config) ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    freqs = torch.arange(n, dtype=torch.float)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def lin(x, name):
        return F.linear(x, w[name + ".weight"], w.get(name + ".bias"))

    x = w["embed_tokens.weight"][ids]
    inputs, outputs, attentions = [], [], []
    layers = int(config.num_hidden_layers)
    for layer in range(layers):
        p = f"layers.{layer}."
        inputs.append(x)
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = _heads(lin(h, p + "self_attn.q_proj"), H, hd)
        k = _heads(lin(h, p + "self_attn.k_proj"), Hkv, hd)
        v = _heads(lin(h, p + "self_attn.v_proj"), Hkv, hd)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = k.repeat_interleave(H // Hkv, dim=0), v.repeat_interleave(H // Hkv, dim=0)
        weights, context = _attend(q, k, v, hd ** -0.5, causal=True)
        attentions.append(weights)
        out = lin(context, p + "self_attn.o_proj")
        outputs.append(out)
        x = x + out
        if layer + 1 < layers:
            h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
            x = x + lin(act(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    return Forward(torch.stack(attentions), inputs, outputs)


FORWARDS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}


# Up to this many tokens the forward runs on one thread: its kernels are then small enough that
# waking a second thread for each of a few hundred of them costs more than it saves, and on a
# busy 2-core machine far more (SmolLM2 on 32 tokens: 0.6 s on one thread, 4-12 s on two with
# the load average at 8). torch's thread count is global, so it is put back after, as the fit does.
ONE_THREAD_TOKENS = 64


def forward(kind: str, config: Any, weights: Mapping[str, torch.Tensor], ids: list[int]) -> Forward:
    """Run the model on one sequence of token ids (no batch), without gradients."""
    threads = torch.get_num_threads()
    single = len(ids) <= ONE_THREAD_TOKENS and threads > 1
    if single:
        torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return FORWARDS[kind](config, weights, torch.tensor(ids, dtype=torch.long))
    finally:
        if single:
            torch.set_num_threads(threads)
