"""What ``compute`` does besides the arithmetic, counted instead of timed: a compute of a
session whose inputs did not change runs the kernel's own torch operations and nothing else
(no input converted or joined again, no product made again, no masking op without a mask,
no stage the session does not use), each counted by a torch dispatch mode; and the result,
made without the dataclass constructor, is the one the constructor makes."""

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnexplorer.core.compute.engine import AttentionResult, compute
from attnexplorer.core.compute.projection_reuse import tally
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.session_arrays import with_values
from attnexplorer.core.inputs.stages import Norm, Positions

# What turning a CPU tensor into a numpy view dispatches (Tensor.numpy: no copy).
_TO_NUMPY = {"detach", "to", "resolve_conj", "resolve_neg"}
# Views: no arithmetic, no memory.
_VIEWS = {"view", "permute", "unbind", "mT", "transpose", "select", "slice", "expand", "reshape", "_reshape_alias",
          "_unsafe_view", "as_strided", "alias", "unsqueeze", "squeeze"}


class Ops(TorchDispatchMode):
    """Every torch operation run inside ``with Ops() as ops:``, by name (``ops.names``)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

    @property
    def work(self) -> list[str]:
        """The operations that compute or copy something, in order."""
        return [n for n in self.names if n not in _TO_NUMPY and n not in _VIEWS]


def _session(mask="none", heads=2, seed=0, **stages):
    rng = np.random.default_rng(seed)
    n, d, k = 6, 5, 4
    return Session(tokens=tuple("abcdef"), embeddings=rng.normal(size=(n, d)), w_query=rng.normal(size=(heads, d, k)),
                   w_key=rng.normal(size=(heads, d, k)), w_value=rng.normal(size=(heads, d, k)), mask=Mask(mask), **stages)


def _again(session, **kw):
    compute(session, **kw)
    with Ops() as ops:
        result = compute(session, **kw)
    return ops, result


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_unchanged_session_runs_the_kernel_and_nothing_else(dtype):
    ops, _ = _again(_session(), dtype=dtype)
    # QKᵀ, × scale, softmax, ·V: the projections are the kept product, the inputs the cached
    # device copies, and nothing is masked, biased or converted.
    assert ops.work == ["bmm", "mul", "softmax", "bmm"]


def test_an_unchanged_session_converts_no_input_and_makes_no_product_again():
    s = _session(mask="causal")
    compute(s)
    before = tally()
    with Ops() as ops:
        compute(s)
    after = tally()
    assert after.reused == before.reused + 1 and after.fresh == before.fresh and after.declined == before.declined
    # The causal mask is made once for this Mask and size, and sent to the device once.
    assert ops.work == ["bmm", "mul", "masked_fill", "softmax", "bmm"]
    assert not {"lift_fresh", "_to_copy", "copy_", "cat", "mm", "matmul", "addmm"} & set(ops.names)


def test_only_a_mask_that_blocks_something_runs_a_masking_op():
    for mask, masked in (("none", False), ("causal", True), ("window", True)):
        ops, _ = _again(_session(mask=mask))
        assert ("masked_fill" in ops.names) is masked, mask
    ops, _ = _again(_session().replace(mask=Mask("padding", padding=())))
    assert "masked_fill" not in ops.names


def test_stages_cost_their_own_ops_only_on_the_first_compute():
    s = _session(mask="causal", b_query=np.ones((2, 4)), norm=Norm("rms"), positions=Positions("alibi"))
    ops, _ = _again(s)
    assert not {"lift_fresh", "_to_copy", "copy_", "cat"} & set(ops.names)
    assert "add" in ops.names or "add_" in ops.names  # the bias of ALiBi, added to the scaled scores


def test_an_edit_converts_only_what_it_changed():
    s = _session()
    compute(s)
    edited = s.replace(w_query=with_values(s.w_query, (1, 2, 3), 7.0))
    with Ops() as ops:
        r = compute(edited)
    # The cell written into the joined weights in place (its row, column and value sent), and
    # the product's copy with that one column made again: no array converted or joined anew.
    assert ops.work == ["lift_fresh", "lift_fresh", "lift_fresh", "index_put_", "clone", "lift_fresh", "index_select",
                        "matmul", "index_put_", "bmm", "mul", "softmax", "bmm"]
    fresh = compute(edited.replace(w_query=np.array(edited.w_query)))
    np.testing.assert_allclose(r.weights, fresh.weights, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("keep", [None, ("weights", "output"), ("Q",)])
def test_the_result_is_the_one_the_constructor_makes(keep):
    for s in (_session(), _session(mask="causal", b_query=np.ones((2, 4)), positions=Positions("rope"))):
        r = compute(s, keep=keep)
        fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(AttentionResult)}
        assert vars(r).keys() == fields.keys()
        made = AttentionResult(**fields)
        assert all(getattr(made, name) is value for name, value in fields.items())
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.weights = None


def test_the_kept_views_of_a_product_die_with_it():
    import gc

    from attnexplorer.core.kernel import projections

    s = _session(heads=3, seed=4)
    r = compute(s)
    assert any(hit[2][0].shape == (3, 6, 4) for hit in projections._SPLITS.values())
    del r
    # Other sessions push the product out of the kept products; its views go with it.
    for seed in range(5, 12):
        compute(_session(heads=1, seed=seed))
    gc.collect()
    assert not any(hit[2][0].shape == (3, 6, 4) for hit in projections._SPLITS.values())


def test_numbers_do_not_depend_on_what_was_computed_before():
    s = _session(mask="causal", heads=3)
    first = compute(s)
    for seed in range(3):
        compute(_session(mask="causal", heads=3, seed=seed + 10))
    again = compute(s)
    for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "output"):
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    assert torch.equal(torch.from_numpy(np.array(first.mask)), torch.from_numpy(np.array(again.mask)))
