"""attention_block, normalise, rotate/rope_cos_sin: the one kernel, against transformers' eager
attention written out here step by step (scores·scaling, finfo.min masking, softmax in float32,
repeat_interleave for K/V heads, rotate_half RoPE, LlamaRMSNorm)."""

import numpy as np
import pytest
import torch

from attnexplorer.core.kernel.attention import alibi_bias, attention_block, kv_head_map, normalise, rope_cos_sin, rotate


def _eager(q, k, v, scaling, causal):
    """transformers' eager_attention_forward for one sequence (no batch), K/V repeated per head."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return weights, torch.matmul(weights, v)


@pytest.mark.parametrize("heads,kv_heads,causal", [(4, 4, False), (4, 4, True), (6, 2, True), (3, 1, False)])
def test_the_block_is_transformers_eager_attention(heads, kv_heads, causal):
    g = torch.Generator().manual_seed(heads * 10 + kv_heads)
    q = torch.randn(heads, 7, 5, generator=g)
    k = torch.randn(kv_heads, 7, 5, generator=g)
    v = torch.randn(kv_heads, 7, 3, generator=g)
    want_w, want_o = _eager(q, k, v, 5 ** -0.5, causal)
    with torch.no_grad():
        got = attention_block(q, k, v, factor=5 ** -0.5, causal=causal, fill=torch.finfo(torch.float32).min,
                              softmax_dtype=torch.float32)
    if heads == kv_heads:  # the same operations in the same order: the same bits
        assert torch.equal(got.weights, want_w) and torch.equal(got.output, want_o)
    torch.testing.assert_close(got.weights, want_w, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.output, want_o, rtol=0, atol=1e-6)


def test_blocks_of_rows_with_a_key_offset_and_log_sum_exp_make_the_whole():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 9, 4, generator=g), torch.randn(2, 9, 4, generator=g), torch.randn(2, 9, 3, generator=g)
    with torch.no_grad():
        whole = attention_block(q, k, v, factor=0.5, causal=True, keep=("scaled_scores",))
        lse_want = torch.logsumexp(whole.scaled_scores.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1),
                                                                   float("-inf")), dim=-1)
        for r0, r1 in ((0, 4), (4, 9)):
            # A causal block of rows reads only the keys up to its last row.
            part = attention_block(q[:, r0:r1], k[:, :r1], v[:, :r1], factor=0.5, causal=True, key_offset=r0,
                                   log_sum_exp=True)
            torch.testing.assert_close(part.weights, whole.weights[:, r0:r1, :r1], rtol=0, atol=1e-6)
            assert not part.weights[:, :, r1:].numel() and (whole.weights[:, r0:r1, r1:] == 0).all()
            torch.testing.assert_close(part.output, whole.output[:, r0:r1], rtol=0, atol=1e-6)
            torch.testing.assert_close(part.log_sum_exp, lse_want[:, r0:r1], rtol=0, atol=1e-5)


def test_normalisers_blocked_rows_bias_and_gradients():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.randn(2, 5, 2, generator=g, dtype=torch.float64)
    mask = torch.zeros(4, 5, dtype=torch.bool)
    mask[1] = True            # a query with every key blocked
    mask[2, :3] = True
    bias = alibi_bias([0.5, 0.25], slice(0, 4), slice(0, 5), torch.float64)
    block = attention_block(q, k, v, factor=0.7, bias=bias, mask=mask, blocked_rows=mask.all(-1),
                            keep=("scores", "scaled_scores"))
    assert (block.weights[:, 1] == 0).all() and not block.weights.isnan().any()
    want = torch.softmax((q @ k.mT * 0.7 + bias).masked_fill(mask, float("-inf")), dim=-1).nan_to_num(0.0)
    torch.testing.assert_close(block.weights, want)
    block.output.sum().backward()  # differentiable, with a zero (not NaN) gradient through the blocked row
    assert not q.grad.isnan().any()
    # A tile of columns 2..5 from the rows' normalisers equals those columns of the whole row.
    with torch.no_grad():
        masked = block.scaled_scores.masked_fill(mask, float("-inf"))
        top = masked.amax(-1, keepdim=True)
        scale = 1.0 / torch.exp(masked - top.nan_to_num(0.0, neginf=0.0)).sum(-1, keepdim=True)
        tile = attention_block(q[:, :, :].detach(), k[:, 2:], factor=0.7, bias=bias[:, :, 2:], mask=mask[:, 2:],
                               blocked_rows=mask.all(-1), normalisers=(top, scale), until="weights")
    torch.testing.assert_close(tile.weights, want[:, :, 2:])


def test_rms_norm_and_rope_are_the_models():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 8, generator=g)
    weight = torch.randn(8, generator=g)
    x32 = x.to(torch.float32)
    llama = weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    assert torch.equal(normalise(x, "rms", weight, None, 1e-6), llama)
    # Llama's rotary embedding: float32 inv_freq and angles, cat(freqs, freqs), rotate_half.
    theta, hd = 10000.0, 8
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    freqs = torch.arange(6, dtype=torch.float)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    q = torch.randn(3, 6, hd, generator=g)
    half = torch.cat((-q[..., hd // 2:], q[..., :hd // 2]), dim=-1)
    want = q * emb.cos() + half * emb.sin()
    cos, sin = rope_cos_sin(6, hd, theta, torch.float32, "cpu", float32_angles=True)
    assert torch.equal(rotate(q, (cos, sin, hd, "half")), want)
    # The float64 angles differ from those only by float32's rounding of the angle.
    cos64, sin64 = rope_cos_sin(6, hd, theta, torch.float32, "cpu")
    torch.testing.assert_close(rotate(q, (cos64, sin64, hd, "half")), want, rtol=0, atol=1e-5)


def test_kv_head_map_and_uneven_groups():
    assert kv_head_map(6, 2).tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="cannot share"):
        attention_block(torch.zeros(3, 2, 2), torch.zeros(2, 2, 2), torch.zeros(2, 2, 2))


def test_a_causal_block_differentiates_as_the_explicit_mask():
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = torch.randn(2, 6, 3, generator=g, dtype=torch.float64), torch.randn(2, 6, 2, generator=g, dtype=torch.float64)
    causal = attention_block(q, k, v, factor=0.5, causal=True, key_offset=1)
    (grad_causal,) = torch.autograd.grad(causal.output.square().sum(), q)
    blocked = torch.ones(5, 6, dtype=torch.bool).triu(2)  # row i sees keys up to i + 1
    explicit = attention_block(q, k, v, factor=0.5, mask=blocked)
    (grad_mask,) = torch.autograd.grad(explicit.output.square().sum(), q)
    torch.testing.assert_close(causal.weights, explicit.weights, rtol=0, atol=0)
    torch.testing.assert_close(grad_causal, grad_mask)
    assert torch.autograd.gradcheck(lambda x: attention_block(x, k, v, factor=0.5, causal=True, key_offset=1).output,
                                    (q,))
