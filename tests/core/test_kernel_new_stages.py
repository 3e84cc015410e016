"""The kernel's new stages (QK-norm, soft-capping, attention sinks, RoPE scaling) against
formulas written out here independently in torch, in float64 (to 1e-10) and float32 (to
1e-5), and RoPE scaling against transformers' own ``ROPE_INIT_FUNCTIONS``."""

import importlib.util
import math

import pytest
import torch

from attnexplorer.core.kernel.attention import attention_block, normalise_heads, rope_cos_sin, rope_inv_freq
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.stages import RopeScaling

# The comparisons with transformers' own RoPE need its models extra, which installs only on
# Python 3.11 and newer (the models tests skip likewise there).
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers 5.24+ needs Python 3.11+")


TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def _qkv(dtype, heads=3, kv_heads=3, n=6, d_k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(heads, n, d_k, generator=g, dtype=dtype) * 3, torch.randn(kv_heads, n, d_k, generator=g, dtype=dtype) * 3,
            torch.randn(kv_heads, n, 2, generator=g, dtype=dtype))


def _reference_scores(q, k, factor):
    k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    return torch.einsum("hid,hjd->hij", q, k) * factor


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_softcap_is_cap_times_tanh_of_the_scaled_scores(dtype, causal):
    q, k, v = _qkv(dtype, heads=4, kv_heads=2)
    cap = 2.5
    s = _reference_scores(q, k, 0.5)
    capped = cap * torch.tanh(s / cap)
    if causal:
        capped = capped.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(capped, dim=-1)
    with torch.no_grad():
        got = attention_block(q, k, v, factor=0.5, causal=causal, softcap=cap, keep=("scaled_scores",))
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.scaled_scores, cap * torch.tanh(s / cap), rtol=0, atol=tol)
    torch.testing.assert_close(got.weights, want, rtol=0, atol=tol)
    assert got.scaled_scores.abs().max() <= cap   # the cap holds (tanh rounds to 1 in float32)
    group = v.repeat_interleave(2, dim=0)
    torch.testing.assert_close(got.output, want @ group, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sinks_join_every_rows_softmax_as_a_key_with_no_value(dtype):
    q, k, v = _qkv(dtype, heads=4, kv_heads=2, seed=1)
    sinks = torch.tensor([0.0, 3.0, -2.0, 40.0], dtype=dtype)   # 40: the sink takes nearly everything
    s = _reference_scores(q, k, 0.5).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    # GPT-OSS's eager attention: the sink as one more column, softmax, the column dropped.
    combined = torch.cat([s, sinks[:, None, None].expand(4, 6, 1)], dim=-1)
    probs = torch.softmax(combined, dim=-1)
    want, want_share = probs[..., :-1], probs[..., -1]
    with torch.no_grad():
        got = attention_block(q, k, v, factor=0.5, causal=True, sinks=sinks, log_sum_exp=True)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.weights, want, rtol=0, atol=tol)
    torch.testing.assert_close(got.sink_share, want_share, rtol=0, atol=tol)
    torch.testing.assert_close(got.weights.sum(-1) + got.sink_share, torch.ones(4, 6, dtype=dtype), rtol=0, atol=tol)
    assert (got.weights.sum(-1) <= 1).all() and (got.weights[3].sum(-1) < 0.5).all()   # the rows shown sum to < 1
    torch.testing.assert_close(got.log_sum_exp, torch.logsumexp(combined, dim=-1), rtol=0, atol=tol * 10)
    torch.testing.assert_close(got.output, want @ v.repeat_interleave(2, dim=0), rtol=0, atol=tol)


def test_a_fully_blocked_row_gives_everything_to_the_sink():
    q, k, v = _qkv(torch.float64, heads=2, kv_heads=2)
    mask = torch.zeros(6, 6, dtype=torch.bool)
    mask[2] = True
    with torch.no_grad():
        got = attention_block(q, k, v, sinks=torch.tensor([0.5, -1.0], dtype=torch.float64), mask=mask,
                              blocked_rows=mask.all(-1))
    assert (got.weights[:, 2] == 0).all() and torch.equal(got.sink_share[:, 2], torch.ones(2, dtype=torch.float64))
    assert torch.isfinite(got.output).all()


def _rms(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _layer(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cannot_overflow", [False, True])
def test_qk_norm_over_each_head_or_the_whole_projection(dtype, cannot_overflow):
    heads, n, d_k = 3, 5, 4
    g = torch.Generator().manual_seed(2)
    x = torch.randn(heads, n, d_k, generator=g, dtype=dtype) * 5
    shared = torch.randn(d_k, generator=g, dtype=dtype)
    per_head = torch.randn(heads * d_k, generator=g, dtype=dtype)
    bias = torch.randn(heads * d_k, generator=g, dtype=dtype)
    tol = TOLERANCE[dtype]
    # Qwen3 / Gemma 3: each head's d_k numbers, one weight shared by the heads.
    torch.testing.assert_close(normalise_heads(x, "rms", shared, None, 1e-6, "head", cannot_overflow),
                               _rms(x, shared, 1e-6), rtol=0, atol=tol)
    # A weight of its own per head (StableLM's per-head norms).
    torch.testing.assert_close(normalise_heads(x, "layer", per_head, bias, 1e-5, "head", cannot_overflow),
                               _layer(x, per_head.view(heads, 1, d_k), bias.view(heads, 1, d_k), 1e-5), rtol=0, atol=tol)
    # OLMo 2: the whole projection, H·d_k numbers across every head, is one row.
    flat = x.transpose(0, 1).reshape(n, heads * d_k)
    want = _rms(flat, per_head, 1e-6).view(n, heads, d_k).transpose(0, 1)
    torch.testing.assert_close(normalise_heads(x, "rms", per_head, None, 1e-6, "all", cannot_overflow), want,
                               rtol=0, atol=tol)


def test_qk_norm_is_differentiable():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: normalise_heads(t, "rms", w, None, 1e-6, "all", True), (x,))
    assert torch.autograd.gradcheck(lambda t: normalise_heads(t, "layer", w, w, 1e-5, "head", True), (x,))


def test_softcap_and_sinks_are_differentiable():
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(2, 4, 2, generator=g, dtype=torch.float64)
    sinks = torch.tensor([0.3, -0.7], dtype=torch.float64)

    def weights(t):
        return attention_block(t, k, v, factor=0.7, softcap=1.5, sinks=sinks, causal=True, until="weights").weights

    assert torch.autograd.gradcheck(weights, (q,))


def _config(rope, head_dim=32, partial=1.0):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=64, num_attention_heads=2, head_dim=head_dim, max_position_embeddings=4096,
                       partial_rotary_factor=partial, rope_parameters=rope)


SCALINGS = [
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, RopeScaling("linear", factor=4.0)),
    ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64},
     RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024,
      "beta_fast": 32.0, "beta_slow": 1.0},
     RopeScaling("yarn", factor=4.0, original_max_position_embeddings=1024, beta_fast=32.0, beta_slow=1.0)),
    ({"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096,
      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},   # GPT-OSS's
     RopeScaling("yarn", factor=32.0, original_max_position_embeddings=4096, truncate=False)),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 512,
      "attention_factor": 1.25, "beta_fast": 16.0, "beta_slow": 2.0},
     RopeScaling("yarn", factor=2.0, original_max_position_embeddings=512, attention_factor=1.25, beta_fast=16.0,
                 beta_slow=2.0)),
]


@needs_transformers
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("partial", [1.0, 0.5])
@pytest.mark.parametrize("rope,scaling", SCALINGS, ids=[s.kind for _, s in SCALINGS])
def test_rope_scaling_is_transformers_rope_init_functions(rope, scaling, partial):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _config(dict(rope), partial=partial)
    want, want_factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu")
    dims = int(32 * partial)
    got, got_factor = rope_inv_freq(dims, rope["rope_theta"], scaling, float32=True)
    assert got.dtype == torch.float32 and torch.equal(got, want)     # bit for bit, as the model rounds
    assert got_factor == pytest.approx(want_factor, rel=1e-15)
    wide, wide_factor = rope_inv_freq(dims, rope["rope_theta"], scaling)   # the same formulas in float64
    assert wide.dtype == torch.float64 and wide_factor == got_factor
    torch.testing.assert_close(wide.float(), want, rtol=2e-6, atol=0)


@needs_transformers
@pytest.mark.filterwarnings("ignore")
def test_rope_cos_sin_with_float32_angles_is_transformers_rotary_embedding():
    """The model's LlamaRotaryEmbedding (yarn: cos and sin × the attention factor) at 1,500
    positions, bit for bit."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope, scaling = SCALINGS[2]
    embedding = LlamaRotaryEmbedding(_config(dict(rope)))
    x = torch.zeros(1, 1500, 32)
    cos, sin = embedding(x, torch.arange(1500)[None])
    got_cos, got_sin = rope_cos_sin(1500, 32, 10000.0, torch.float32, "cpu", float32_angles=True, scaling=scaling)
    assert torch.equal(got_cos, cos[0, :, :16]) and torch.equal(got_sin, sin[0, :, :16])


def test_rope_scaling_in_float64_follows_the_formulas():
    """Independent float64 arithmetic of each scaling (the papers' formulas, not the kernel's)."""
    dims, theta = 16, 10000.0
    base = theta ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    got, _ = rope_inv_freq(dims, theta, RopeScaling("linear", factor=3.0))
    torch.testing.assert_close(got, base / 3.0, rtol=1e-14, atol=0)
    s = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
    got, _ = rope_inv_freq(dims, theta, s)
    for f, g in zip(base.tolist(), got.tolist()):
        wavelength = 2 * math.pi / f
        if wavelength < 64 / 4:
            want = f
        elif wavelength > 64 / 1:
            want = f / 8
        else:
            blend = (64 / wavelength - 1) / 3
            want = (1 - blend) * f / 8 + blend * f
        assert g == pytest.approx(want, rel=1e-13)
    cos, sin = rope_cos_sin(5, dims, theta, torch.float64, "cpu", scaling=RopeScaling("yarn", factor=4.0,
                                                                                      original_max_position_embeddings=8))
    torch.testing.assert_close(cos ** 2 + sin ** 2, torch.full_like(cos, (0.1 * math.log(4.0) + 1) ** 2), rtol=0, atol=1e-12)


@pytest.mark.parametrize("fields,where", [
    ({"kind": "cubic"}, "positions.scaling.kind"),
    ({"kind": "linear", "factor": 0.0}, "positions.scaling.factor"),
    ({"kind": "linear", "factor": -2.0}, "positions.scaling.factor"),
    ({"kind": "linear", "factor": float("nan")}, "positions.scaling.factor"),
    ({"kind": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}, "positions.scaling.high_freq_factor"),
    ({"kind": "llama3", "factor": 8.0, "original_max_position_embeddings": 0}, "positions.scaling.original_max_position_embeddings"),
    ({"kind": "yarn", "factor": 4.0, "attention_factor": -1.0}, "positions.scaling.attention_factor"),
    ({"kind": "yarn", "factor": 4.0, "beta_fast": float("inf")}, "positions.scaling.beta_fast"),
    ({"kind": "yarn", "factor": 4.0, "truncate": "yes"}, "positions.scaling.truncate"),
])
def test_bad_rope_scaling_is_refused_naming_the_field(fields, where):
    with pytest.raises(SessionError) as err:
        RopeScaling(**fields)
    assert err.value.where == where


@needs_transformers
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("rope", [
    {"rope_type": "default", "rope_theta": 10000.0},
    *[r for r, _ in SCALINGS],
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
     "mscale": 1.0, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1},   # DeepSeek's
])
def test_a_configs_rope_parameters_become_the_same_frequencies(rope):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _config(dict(rope))
    scaling = RopeScaling.from_rope_parameters(config.rope_parameters, config.max_position_embeddings)
    if rope["rope_type"] == "default":
        assert scaling is None
        return
    want, want_factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu")
    got, got_factor = rope_inv_freq(32, rope["rope_theta"], scaling, float32=True)
    assert torch.equal(got, want) and got_factor == pytest.approx(want_factor, rel=1e-15)


def test_unsupported_rope_types_are_refused_naming_them():
    for kind in ("dynamic", "longrope"):
        with pytest.raises(SessionError, match=f"rope type '{kind}' is not supported") as err:
            RopeScaling.from_rope_parameters({"rope_type": kind, "factor": 2.0})
        assert err.value.where == "positions.scaling.kind"
