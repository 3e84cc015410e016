"""The stages of a real head against torch, computed independently of the engine.

Hypothesis draws shapes and every allowed combination of biases, norm, positions, grouped K/V
heads and a cross-attention source. The references: ``nn.LayerNorm``/``nn.RMSNorm`` for the
norm; RoPE two ways (the rotate-half formula of Hugging Face Llama/GPT-NeoX, and complex
multiplication of each pair); ``F.scaled_dot_product_attention`` with the ALiBi bias as a float
``attn_mask`` and ``enable_gqa=True``; ``nn.MultiheadAttention`` with biases and kdim/vdim for
cross-attention. float64 agrees to 1e-10 relative, float32 to 1e-5.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import stage_sessions

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source

TOL = {"float64": 1e-10, "float32": 1e-5}
TORCH_DTYPE = {"float64": torch.float64, "float32": torch.float32}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
unit = st.floats(-1, 1, allow_nan=False, width=64)


def assert_close(ours, ref, rel, what):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, f"{what}: {ours.shape} != {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    np.testing.assert_allclose(ours, ref, rtol=rel, atol=rel * scale, err_msg=what)


def t(a, dtype):
    return torch.tensor(np.asarray(a), dtype=TORCH_DTYPE[dtype])


# -- independent references of each stage -------------------------------------------------

def sinusoidal(n, d, base):
    """The formula, one entry at a time: PE[p, 2i] = sin(p/base^(2i/d)), PE[p, 2i+1] = cos(…)."""
    pe = np.zeros((n, d))
    for p in range(n):
        for j in range(d):
            i2 = j - j % 2
            angle = p / base ** (i2 / d)
            pe[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def attention_input(s: Session, dtype):
    """X = norm(E + P) with torch's own modules."""
    x = t(s.embeddings, dtype)
    p = s.positions
    if p is not None and p.kind == "sinusoidal":
        x = x + t(sinusoidal(s.n, s.d, p.base), dtype)
    elif p is not None and p.kind == "learned":
        x = x + t(p.table[: s.n], dtype)
    if s.norm is not None:
        if s.norm.kind == "layer":
            layer = torch.nn.LayerNorm(s.d, eps=s.norm.eps, dtype=TORCH_DTYPE[dtype])
            with torch.no_grad():
                layer.weight.copy_(t(s.norm.weight_or_ones(s.d), dtype))
                layer.bias.copy_(t(s.norm.bias_or_zeros(s.d), dtype))
        else:
            layer = torch.nn.RMSNorm(s.d, eps=s.norm.eps, dtype=TORCH_DTYPE[dtype])
            with torch.no_grad():
                layer.weight.copy_(t(s.norm.weight_or_ones(s.d), dtype))
        with torch.no_grad():
            x = layer(x)
    return x


def projections(s: Session, x, dtype):
    """Q (H, n, d_k), K, V (H_kv, n_k, ·) with their biases, per head by einsum."""
    kv_in = x if s.source is None else t(s.source.embeddings, dtype)

    def bias(b, heads, width):
        return torch.zeros(heads, 1, width, dtype=TORCH_DTYPE[dtype]) if b is None else t(b, dtype)[:, None, :]

    q = torch.einsum("nd,hdk->hnk", x, t(s.w_query, dtype)) + bias(s.b_query, s.heads, s.d_k)
    k = torch.einsum("nd,hdk->hnk", kv_in, t(s.w_key, dtype)) + bias(s.b_key, s.kv_heads, s.d_k)
    v = torch.einsum("nd,hdk->hnk", kv_in, t(s.w_value, dtype)) + bias(s.b_value, s.kv_heads, s.d_v)
    return q, k, v


def rope_rotate_half(x, positions, theta, dims, layout):
    """Hugging Face's formula: x·cos + rotate_half(x)·sin on the first ``dims`` dimensions.

    Interleaved pairs (2i, 2i+1) are gathered into the half layout, rotated, and put back.
    """
    rot, rest = x[..., :dims], x[..., dims:]
    if layout == "interleaved":
        order = list(range(0, dims, 2)) + list(range(1, dims, 2))
        rot = rot[..., order]
    inv_freq = 1.0 / theta ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    angles = torch.outer(torch.tensor(positions, dtype=torch.float64), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = dims // 2
    rotate_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    out = rot * cos + rotate_half * sin
    if layout == "interleaved":
        back = [0] * dims
        for new, old in enumerate(order):
            back[old] = new
        out = out[..., back]
    return torch.cat([out, rest], dim=-1)


def rope_complex(x, positions, theta, dims, layout):
    """Each pair (a, b) as the complex number a + ib, multiplied by e^(i·p·theta^(−2i/dims))."""
    x = x.to(torch.float64)
    half = dims // 2
    if layout == "half":
        a, b = x[..., :half], x[..., half:dims]
    else:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
    z = torch.complex(a, b)
    freq = torch.tensor([theta ** (-2.0 * i / dims) for i in range(half)], dtype=torch.float64)
    turn = torch.polar(torch.ones(len(positions), half, dtype=torch.float64),
                       torch.tensor(positions, dtype=torch.float64)[:, None] * freq[None, :])
    w = z * turn
    out = x.clone()
    if layout == "half":
        out[..., :half], out[..., half:dims] = w.real, w.imag
    else:
        out[..., 0:dims:2], out[..., 1:dims:2] = w.real, w.imag
    return out


def alibi_reference(slopes, n):
    i = torch.arange(n, dtype=torch.float64)
    return -torch.tensor(slopes, dtype=torch.float64)[:, None, None] * (i[:, None] - i[None, :]).abs()


# -- the tests ------------------------------------------------------------------------------

def test_sinusoidal_and_alibi_defaults_are_the_published_ones():
    s = Session(("a", "b", "c"), np.zeros((3, 6)), np.ones((8, 6, 2)), np.ones((8, 6, 2)), np.ones((8, 6, 2)),
                positions=Positions("alibi"))
    r = compute(s, dtype="float64")
    # The ALiBi paper, 8 heads: 1/2, 1/4, …, 1/256.
    assert_close(-r.position_bias[:, 0, 1], [2.0 ** -k for k in range(1, 9)], 1e-15, "slopes")
    assert_close(r.position_bias[3], -(2.0 ** -4) * np.abs(np.subtract.outer(range(3), range(3))), 1e-15, "bias")
    s = s.replace(positions=Positions("sinusoidal"))
    assert_close(compute(s, dtype="float64").P, sinusoidal(3, 6, 10000.0), 1e-15, "P")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@SETTINGS
@given(session=stage_sessions(values=unit, max_n=6, max_d=6))
def test_every_allowed_combination_matches_torch(session, dtype):
    """All stages through torch by hand, and the result's intermediates stage by stage."""
    s = session
    rel = TOL[dtype]
    r = compute(s, dtype=dtype)
    x = attention_input(s, dtype)
    assert_close(r.E, s.embeddings, rel, "E")
    assert_close(r.X, x.numpy(), rel, "X")
    q, k, v = projections(s, x, dtype)
    p = s.positions
    if p is not None and p.kind == "rope":
        assert_close(r.Q_unrotated, q.numpy(), rel, "Q before RoPE")
        assert_close(r.K_unrotated, k.numpy(), rel, "K before RoPE")
        pos = list(range(p.offset, p.offset + s.n))
        dims = p.rope_dims(s.d_k)
        q2 = rope_rotate_half(q, pos, p.theta, dims, p.layout)
        k2 = rope_rotate_half(k, pos, p.theta, dims, p.layout)
        assert_close(q2.numpy(), rope_complex(q, pos, p.theta, dims, p.layout).numpy(), 1e-5 if dtype == "float32" else 1e-12,
                     "the two RoPE references agree")
        q, k = q2, k2
    else:
        assert r.Q_unrotated is None and r.K_unrotated is None
    assert_close(r.Q, q.numpy(), rel, "Q")
    assert_close(r.K, k.numpy(), rel, "K")
    assert_close(r.V, v.numpy(), rel, "V")
    assert r.kv_head_of.tolist() == [h // (s.heads // s.kv_heads) for h in range(s.heads)]
    factor = s.scale.factor(s.d_k)
    bias = torch.zeros(s.heads, s.n, s.n_keys, dtype=torch.float64)
    if p is not None and p.kind == "alibi":
        bias = alibi_reference(p.slopes_for(s.heads), s.n)
        assert_close(r.position_bias, bias.numpy(), rel, "position_bias")
    else:
        assert r.position_bias is None
    blocked = torch.tensor(s.mask.matrix(s.n, None if s.source is None else s.source.n))
    attn_mask = bias.to(TORCH_DTYPE[dtype]).masked_fill(blocked, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=factor, enable_gqa=True)
    eye = torch.eye(s.n_keys, dtype=TORCH_DTYPE[dtype]).expand(s.kv_heads, -1, -1)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=attn_mask, scale=factor, enable_gqa=True)
    live = ~blocked.all(dim=1).numpy()
    assert_close(r.weights[:, live], weights.numpy()[:, live], rel, "weights")
    assert_close(r.head_outputs[:, live], out.numpy()[:, live], rel, "head outputs")
    assert not r.weights[:, ~live].any() and not r.head_outputs[:, ~live].any()
    concat = np.concatenate(list(r.head_outputs), axis=1)
    expected = concat if s.w_out is None else concat @ s.w_out + (0 if s.b_out is None else s.b_out)
    assert_close(r.output, expected, rel, "output")
    if s.source is not None:
        assert r.source_tokens == s.source.tokens and r.source_X is s.source.embeddings
        assert r.scores.shape == (s.heads, s.n, s.source.n)


@st.composite
def mha_sessions(draw):
    """Cross-attention sessions nn.MultiheadAttention can express: d = H·d_k = H·d_v, every
    bias present, W_o square with b_o, scale 1/√d_k."""
    h = draw(st.integers(1, 3))
    d_k = draw(st.integers(1, 3))
    n, n_k, d_s = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d = h * d_k
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    u = lambda *shape: rng.uniform(-1, 1, shape)  # noqa: E731
    kind = draw(st.sampled_from(["none", "padding", "custom"]))
    mask = Mask("none") if kind == "none" else Mask("padding", padding=tuple(
        draw(st.lists(st.integers(0, n_k - 1), max_size=n_k)))) if kind == "padding" else \
        Mask("custom", blocked=rng.random((n, n_k)) < 0.3)
    return Session(tuple(f"q{i}" for i in range(n)), u(n, d), u(h, d, d_k), u(h, d_s, d_k), u(h, d_s, d_k),
                   w_out=u(d, d), b_query=u(h, d_k), b_key=u(h, d_k), b_value=u(h, d_k), b_out=u(d),
                   source=Source(tuple(f"s{j}" for j in range(n_k)), u(n_k, d_s)), mask=mask)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@SETTINGS
@given(session=mha_sessions())
def test_cross_attention_matches_multihead_attention(session, dtype):
    s = session
    d, tdt = s.d, TORCH_DTYPE[dtype]
    mha = torch.nn.MultiheadAttention(d, s.heads, bias=True, kdim=s.source.d, vdim=s.source.d, batch_first=True, dtype=tdt)

    def joined(w):  # (H, rows, k) → nn.Linear's (H·k, rows)
        return t(np.moveaxis(w, 0, 1).reshape(w.shape[1], -1).T, dtype)

    with torch.no_grad():
        if mha.in_proj_weight is not None:  # kdim = vdim = embed_dim: one fused projection
            mha.in_proj_weight.copy_(torch.cat([joined(s.w_query), joined(s.w_key), joined(s.w_value)]))
        else:
            mha.q_proj_weight.copy_(joined(s.w_query))
            mha.k_proj_weight.copy_(joined(s.w_key))
            mha.v_proj_weight.copy_(joined(s.w_value))
        mha.in_proj_bias.copy_(t(np.concatenate([s.b_query.ravel(), s.b_key.ravel(), s.b_value.ravel()]), dtype))
        mha.out_proj.weight.copy_(t(s.w_out.T, dtype))
        mha.out_proj.bias.copy_(t(s.b_out, dtype))
    blocked = s.mask.matrix(s.n, s.source.n)
    live = ~blocked.all(axis=1)
    with torch.no_grad():
        out, weights = mha(t(s.embeddings, dtype)[None], t(s.source.embeddings, dtype)[None],
                           t(s.source.embeddings, dtype)[None], attn_mask=torch.tensor(blocked),
                           need_weights=True, average_attn_weights=False)
    r = compute(s, dtype=dtype)
    assert_close(r.weights[:, live], weights[0].numpy()[:, live], TOL[dtype], "weights")
    assert_close(r.output[live], out[0].numpy()[live], TOL[dtype], "output")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@settings(max_examples=25, deadline=None)
@given(offset=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1), dims=st.sampled_from([2, 4, 6]))
def test_rope_scores_depend_only_on_relative_position(layout, offset, seed, dims):
    rng = np.random.default_rng(seed)
    s = Session(tuple("abcde"), rng.normal(size=(5, 4)), rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 4, 6)),
                rng.normal(size=(2, 4, 3)), b_query=rng.normal(size=(2, 6)), b_key=rng.normal(size=(2, 6)),
                positions=Positions("rope", theta=100.0, dims=dims, layout=layout, offset=0))
    base = compute(s, dtype="float64")
    shifted = compute(s.replace(positions=Positions("rope", theta=100.0, dims=dims, layout=layout, offset=offset)),
                      dtype="float64")
    assert_close(shifted.scores, base.scores, 1e-9, "scores under a shift")
    assert not np.allclose(shifted.Q, base.Q)  # the vectors themselves did turn
    plain = compute(s.replace(positions=None), dtype="float64")
    assert not np.allclose(plain.scores, base.scores)  # and RoPE does change the scores


def test_norm_matches_torch_with_sinusoidal_positions_in_front():
    rng = np.random.default_rng(3)
    s = Session(tuple("abcd"), rng.normal(size=(4, 5)) * 3 + 1, rng.normal(size=(1, 5, 2)), rng.normal(size=(1, 5, 2)),
                rng.normal(size=(1, 5, 2)), positions=Positions("sinusoidal", base=100.0),
                norm=Norm("layer", rng.normal(size=5), rng.normal(size=5), 1e-5))
    r = compute(s, dtype="float64")
    e_plus_p = s.embeddings + sinusoidal(4, 5, 100.0)
    assert_close(r.P, sinusoidal(4, 5, 100.0), 1e-15, "P")
    layer = torch.nn.LayerNorm(5, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(s.norm.weight))
        layer.bias.copy_(torch.tensor(s.norm.bias))
        assert_close(r.X, layer(torch.tensor(e_plus_p)).numpy(), 1e-10, "LayerNorm")
    rms = s.replace(norm=Norm("rms", s.norm.weight, None, 1e-6))
    layer = torch.nn.RMSNorm(5, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(s.norm.weight))
        assert_close(compute(rms, dtype="float64").X, layer(torch.tensor(e_plus_p)).numpy(), 1e-10, "RMSNorm")


def test_unused_stages_leave_the_result_as_before():
    rng = np.random.default_rng(0)
    s = Session(tuple("abc"), rng.normal(size=(3, 4)), rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 3)),
                rng.normal(size=(2, 4, 2)))
    r = compute(s)
    assert r.E is s.embeddings and r.X is s.embeddings and r.P is None
    assert r.Q_unrotated is r.K_unrotated is r.position_bias is None
    assert r.source_tokens is None and r.source_X is None and r.kv_head_of.tolist() == [0, 1]
    zero_bias = compute(s.replace(b_query=np.zeros((2, 3)), b_key=np.zeros((2, 3)), b_value=np.zeros((2, 2))))
    assert np.array_equal(zero_bias.weights, r.weights) and np.array_equal(zero_bias.output, r.output)


def test_grouped_query_heads_share_keys_and_values():
    rng = np.random.default_rng(1)
    wq = rng.normal(size=(4, 3, 2))
    wk, wv = rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3, 2))
    s = Session(tuple("abc"), rng.normal(size=(3, 3)), wq, wk, wv, mask=Mask("causal"))
    r = compute(s, dtype="float64")
    # The same as four plain heads with K/V repeated: heads 0, 1 use group 0; heads 2, 3 group 1.
    full = s.replace(w_key=wk[[0, 0, 1, 1]], w_value=wv[[0, 0, 1, 1]])
    f = compute(full, dtype="float64")
    assert r.K.shape == (2, 3, 2) and r.kv_head_of.tolist() == [0, 0, 1, 1]
    assert_close(r.weights, f.weights, 1e-12, "weights")
    assert_close(r.output, f.output, 1e-12, "output")


def test_scale_multiplies_scores_before_alibi_adds():
    s = Session(("a", "b"), np.eye(2), np.ones((1, 2, 2)), np.ones((1, 2, 2)), np.ones((1, 2, 1)),
                scale=Scale("temperature", 0.5), positions=Positions("alibi", slopes=[0.25]))
    r = compute(s, dtype="float64")
    assert_close(r.scaled_scores, r.scores * 2.0 + np.array([[0, -0.25], [-0.25, 0]]), 1e-15, "scaled")
