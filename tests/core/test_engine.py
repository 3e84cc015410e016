"""The engine's own promises: masks, blocked rows, scales, devices, dtypes, W_o, keep, read-only results."""

import numpy as np
import pytest
import torch

from attnexplorer.core.compute import device_inputs, engine
from attnexplorer.core.compute.engine import INTERMEDIATES, Devices, compute, resolve, supported_dtypes
from attnexplorer.core.errors import AttnExplorerError, EngineError
from attnexplorer.core.inputs.session import Mask, Scale, Session


def make_session(n=5, d=4, heads=2, d_k=3, d_v=2, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return Session(
        tokens=tuple(f"w{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        w_query=rng.normal(size=(heads, d, d_k)),
        w_key=rng.normal(size=(heads, d, d_k)),
        w_value=rng.normal(size=(heads, d, d_v)),
        **kw,
    )


def numpy_attention(s: Session, factor: float, blocked: np.ndarray):
    """An independent float64 numpy attention, one head at a time, for comparison."""
    outs, weights = [], []
    for h in range(s.heads):
        q, k, v = s.embeddings @ s.w_query[h], s.embeddings @ s.w_key[h], s.embeddings @ s.w_value[h]
        z = np.where(blocked, -np.inf, (q @ k.T) * factor)
        w = np.zeros_like(z)
        for i in range(s.n):
            if not blocked[i].all():
                e = np.exp(z[i] - z[i].max())
                w[i] = e / e.sum()
        weights.append(w)
        outs.append(w @ v)
    return np.stack(weights), np.stack(outs)


@pytest.mark.parametrize("mask", [
    Mask(), Mask("causal"), Mask("window", window=2), Mask("padding", padding=(1, 3)),
    Mask("custom", blocked=np.eye(5, dtype=bool)),
])
@pytest.mark.parametrize("scale", [Scale(), Scale("none"), Scale("temperature", 0.25)])
def test_matches_independent_numpy(mask, scale):
    s = make_session(mask=mask, scale=scale)
    r = compute(s, dtype="float64")
    factor = {"inv_sqrt_dk": 1 / np.sqrt(3), "none": 1.0, "temperature": 4.0}[scale.kind]
    assert r.scale_factor == pytest.approx(factor)
    w, out = numpy_attention(s, factor, mask.matrix(5))
    np.testing.assert_allclose(r.weights, w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r.head_outputs, out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r.scaled_scores, r.scores * factor, rtol=1e-14)
    np.testing.assert_array_equal(r.mask, mask.matrix(5))


def test_window_mask_sees_itself_and_w_minus_1_before():
    r = compute(make_session(n=6, mask=Mask("window", window=3)))
    visible = r.weights[0] > 0
    for i in range(6):
        assert set(np.flatnonzero(visible[i])) == set(range(max(0, i - 2), i + 1))


def test_causal_first_token_attends_only_to_itself():
    r = compute(make_session(mask=Mask("causal")))
    np.testing.assert_array_equal(r.weights[:, 0], np.tile([1.0, 0, 0, 0, 0], (2, 1)))
    assert np.allclose(r.weights.sum(axis=-1), 1.0)


def test_fully_blocked_rows_are_zero_and_flagged():
    blocked = np.zeros((5, 5), dtype=bool)
    blocked[2] = True
    blocked[4, :3] = True
    s = make_session(mask=Mask("custom", blocked=blocked))
    for dtype in supported_dtypes("cpu"):
        r = compute(s, dtype=dtype)
        np.testing.assert_array_equal(r.blocked_rows, [False, False, True, False, False])
        assert r.any_blocked_rows
        assert np.isfinite(r.weights).all() and np.isfinite(r.output).all()
        assert (r.weights[:, 2] == 0).all() and (r.head_outputs[:, 2] == 0).all() and (r.output[2] == 0).all()
        np.testing.assert_allclose(r.weights[:, [0, 1, 3, 4]].sum(axis=-1), 1.0, rtol=1e-2)


def test_every_key_padded_blocks_every_row():
    s = make_session(n=3, mask=Mask("padding", padding=(0, 1, 2)), w_out=np.ones((4, 3)))
    r = compute(s)
    assert r.blocked_rows.all()
    assert not r.weights.any() and not r.output.any()


def test_heads_are_independent_and_concatenated_head_major():
    s = make_session(heads=3, d_v=2, w_out=np.arange(6 * 4, dtype=float).reshape(6, 4) / 10)
    r = compute(s, dtype="float64")
    for h in range(3):
        one = s.replace(w_query=s.w_query[h:h + 1], w_key=s.w_key[h:h + 1], w_value=s.w_value[h:h + 1], w_out=None)
        rh = compute(one, dtype="float64")
        np.testing.assert_allclose(r.weights[h], rh.weights[0], rtol=1e-12)
        np.testing.assert_allclose(r.concat[:, 2 * h:2 * h + 2], rh.output, rtol=1e-12)
    np.testing.assert_allclose(r.output, r.concat @ s.w_out, rtol=1e-12)
    assert r.heads == 3 and r.n == 5


def test_output_is_concat_without_w_out():
    r = compute(make_session())
    assert r.output.shape == (5, 4)
    np.testing.assert_array_equal(r.output, r.concat)


def test_result_arrays_are_read_only_and_session_untouched():
    s = make_session()
    before = s.embeddings.copy()
    r = compute(s)
    for name in INTERMEDIATES + ("mask", "blocked_rows"):
        a = getattr(r, name)
        assert not a.flags.writeable, name
    np.testing.assert_array_equal(s.embeddings, before)
    assert not s.embeddings.flags.writeable


def test_keep_returns_only_what_was_asked():
    r = compute(make_session(), keep=("weights", "output"))
    assert r.weights is not None and r.output is not None
    assert r.Q is None and r.scores is None and r.head_outputs is None
    assert r.heads == 2
    with pytest.raises(EngineError, match="unknown intermediate.*attention"):
        compute(make_session(), keep=("weights", "attention"))


@pytest.mark.parametrize("keep", [
    ("weights",), ("scores", "weights"), ("scaled_scores", "weights"), ("scores", "scaled_scores", "weights"),
])
@pytest.mark.parametrize("mask", [Mask(), Mask("causal"), Mask("padding", padding=(0, 1, 2, 3, 4))])
def test_intermediates_not_kept_do_not_change_the_ones_kept(keep, mask):
    """Buffers that are not kept are reused in place; what is kept must equal a full compute."""
    s = make_session(mask=mask)
    full = compute(s, dtype="float64")
    part = compute(s, dtype="float64", keep=keep)
    for name in keep:
        np.testing.assert_array_equal(getattr(part, name), getattr(full, name))
    assert not np.isnan(part.weights).any()


@pytest.mark.parametrize("dtype,expected,tol", [
    ("float32", np.float32, 1e-6), ("float64", np.float64, 1e-15),
    ("float16", np.float32, 5e-3), ("bfloat16", np.float32, 5e-2),
])
def test_dtypes(dtype, expected, tol):
    s = make_session(mask=Mask("causal"))
    exact = compute(s, dtype="float64")
    r = compute(s, dtype=dtype)
    assert r.dtype == dtype and r.device == "cpu"
    assert r.weights.dtype == expected and r.output.dtype == expected
    np.testing.assert_allclose(r.weights, exact.weights, atol=tol)


def test_cpu_offers_float32_and_float64_and_halves_on_this_torch():
    # torch >= 2.1 has half-precision matmul and softmax on the CPU; the probe must find them.
    offered = supported_dtypes("cpu")
    assert offered[:2] == ["float32", "float64"]
    assert {"float16", "bfloat16"} <= set(offered)
    assert supported_dtypes("tpu") == []


def test_unsupported_dtype_on_device_is_named():
    # A device that refuses bfloat16 (an older GPU does): its Devices answers so.
    refusing = Devices(dtype_works=lambda device, dtype: dtype != "bfloat16")
    assert refusing.supported_dtypes("cpu") == ["float32", "float64", "float16"]
    with pytest.raises(EngineError, match=r"bfloat16 is not supported on cpu; choose one of float32, float64, float16"):
        refusing.resolve("cpu", "bfloat16")


@pytest.mark.parametrize("device", ["tpu", "CPU", "cuda:x", "cpu:0:1"])
def test_unavailable_device_names_the_available_ones(device):
    with pytest.raises(EngineError, match=f"{device!r}.*available: cpu"):
        compute(make_session(), device=device)


def test_missing_cuda_names_the_available_ones():
    cpu_only = Devices(available=lambda: ["cpu"])   # a machine without CUDA
    with pytest.raises(EngineError, match="'cuda' is not available here; available: cpu"):
        cpu_only.resolve("cuda", "float32")
    assert cpu_only.resolve("cpu", "float32") == resolve("cpu", "float32")


@pytest.mark.parametrize("device,dtype,match", [
    (0, "float32", "device must be a name"), ("cpu", "float8", "dtype 'float8' is not supported; choose one of float32"),
    ("cpu", torch.float32, "dtype must be one of"),
])
def test_bad_device_or_dtype_arguments(device, dtype, match):
    with pytest.raises(EngineError, match=match):
        resolve(device, dtype)


def test_overflow_is_a_clear_error_and_float64_copes():
    s = make_session(n=3, d=2).replace(embeddings=np.full((3, 2), 1e20))
    with pytest.raises(EngineError, match="too large for float32.*float64"):
        compute(s)
    r = compute(s, dtype="float64")
    assert np.isfinite(r.output).all()


def test_not_a_session_is_refused():
    with pytest.raises(EngineError, match="needs a Session"):
        compute({"tokens": ["a"]})


def test_engine_errors_are_user_facing():
    assert issubclass(EngineError, AttnExplorerError) and issubclass(EngineError, ValueError)


def test_runtime_failure_becomes_engine_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore detail")

    monkeypatch.setattr(torch, "softmax", boom)
    with pytest.raises(EngineError, match=r"^the engine failed on cpu \(float32\): CUDA out of memory. Tried to allocate 2 GiB$"):
        compute(make_session())


def test_single_token():
    r = compute(make_session(n=1, mask=Mask("causal")))
    np.testing.assert_array_equal(r.weights, np.ones((2, 1, 1)))
    np.testing.assert_allclose(r.head_outputs[:, 0], r.V[:, 0])


def test_converted_inputs_are_reused_only_for_the_same_array():
    """An edit makes a new array; the device copy of the old one must never be used for it."""
    s = make_session(n=5, d=3, heads=2, d_k=2, d_v=2)
    first = compute(s, dtype="float64")
    x = s.embeddings.copy()
    x[2, 1] += 1.0
    edited = s.replace(embeddings=x)
    second = compute(edited, dtype="float64")
    np.testing.assert_allclose(second.Q, np.einsum("nd,hdk->hnk", x, s.w_query), rtol=1e-12)
    assert not np.allclose(first.Q, second.Q)
    # and the untouched weights come from the cache: the same stacked device tensor as before
    cpu = torch.device("cpu")
    joined = device_inputs.projection_weights(s, torch.float64, cpu)
    assert device_inputs.projection_weights(edited, torch.float64, cpu) is joined


def test_an_edited_weight_matrix_rebuilds_the_joined_projection():
    s = make_session(n=4, d=3, heads=2, d_k=2, d_v=3)
    compute(s, dtype="float64")
    w_key = s.w_key.copy()
    w_key[1, 0, 1] = 5.0
    edited = s.replace(w_key=w_key)
    r = compute(edited, dtype="float64")
    np.testing.assert_allclose(r.K, np.einsum("nd,hdk->hnk", s.embeddings, w_key), rtol=1e-12)
    np.testing.assert_allclose(r.Q, np.einsum("nd,hdk->hnk", s.embeddings, s.w_query), rtol=1e-12)
    np.testing.assert_allclose(r.V, np.einsum("nd,hdk->hnk", s.embeddings, s.w_value), rtol=1e-12)


def test_recycled_ids_do_not_reach_a_stale_tensor():
    for value in (1.0, 2.0, 3.0):
        # Each session dies before the next is made, so ids can be reused; results must follow.
        s = Session(tokens=("a", "b"), embeddings=np.full((2, 2), value), w_query=np.ones((1, 2, 1)),
                    w_key=np.ones((1, 2, 1)), w_value=np.ones((1, 2, 1)))
        r = compute(s, dtype="float64")
        np.testing.assert_allclose(r.V[0, :, 0], [2 * value, 2 * value])
        del s, r


@pytest.mark.parametrize("keep", [None, ("weights",)])
def test_results_carry_every_field_and_stay_frozen(keep):
    import dataclasses

    r = compute(make_session(), keep=keep)
    assert {f.name for f in dataclasses.fields(engine.AttentionResult)} == set(vars(r))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.weights = None
