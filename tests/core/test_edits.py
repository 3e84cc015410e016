"""Structural edits keep tokens, embedding rows, masks and weights consistent."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnexplorer.core.editing import edits
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Mask, Scale, Session


def make(n=4, d=3, dk=2, dv=2, heads=1, w_out=False, mask=None):
    rng = np.random.default_rng(0)
    return Session(
        tokens=tuple(f"t{i}" for i in range(n)),
        embeddings=rng.normal(size=(n, d)),
        w_query=rng.normal(size=(heads, d, dk)),
        w_key=rng.normal(size=(heads, d, dk)),
        w_value=rng.normal(size=(heads, d, dv)),
        w_out=rng.normal(size=(heads * dv, 5)) if w_out else None,
        mask=mask or Mask(),
    )


def test_set_cell_changes_one_cell_only():
    s = make(heads=2)
    t = edits.set_cell(s, "W_k", 1, 0, 2.5, head=1)
    assert t.w_key[1, 1, 0] == 2.5
    changed = np.argwhere(t.w_key != s.w_key)
    assert changed.tolist() == [[1, 1, 0]]
    assert np.array_equal(t.w_query, s.w_query) and np.array_equal(t.embeddings, s.embeddings)
    e = edits.set_cell(s, "embeddings", 3, 2, -1.0)
    assert e.embeddings[3, 2] == -1.0 and s.embeddings[3, 2] != -1.0


@pytest.mark.parametrize("args, match", [
    (("W_q", 5, 0, 1.0), r"W_q\[5,0\].*outside the 3×2"),
    (("W_q", 0, 0, float("nan")), "not a finite"),
    (("W_q", 0, 0, "x"), "expected a number"),
    (("W_x", 0, 0, 1.0), "unknown table"),
    (("W_o", 0, 0, 1.0), "no output projection"),
])
def test_bad_cells_are_refused(args, match):
    with pytest.raises(SessionError, match=match):
        edits.set_cell(make(), *args)


def test_cell_names_mention_the_head_only_with_several_heads():
    assert edits.cell_name(make(), "W_q", 0, 1) == "W_q[0,1]"
    assert edits.cell_name(make(heads=3), "W_v", 2, 1, head=2) == "W_v[2,1] (head 2)"


def test_block_is_written_in_place_and_overflow_names_shape_and_room():
    s = make(n=4, d=3)
    block = np.array([[1.0, 2.0], [3.0, 4.0]])
    t = edits.set_block(s, "embeddings", 2, 1, block)
    assert np.array_equal(t.embeddings[2:4, 1:3], block)
    assert np.array_equal(t.embeddings[:2], s.embeddings[:2])
    with pytest.raises(SessionError, match=r"a 2×2 block does not fit at \[3,1\]: there is room for 1×2"):
        edits.set_block(s, "embeddings", 3, 1, block)


def test_set_matrix_checks_the_shape():
    s = make(d=3, dk=2)
    with pytest.raises(SessionError, match=r"the matrix is 2×3 but the table is 3×2 \(d × d_k\)"):
        edits.set_matrix(s, "W_q", np.ones((2, 3)))
    assert np.array_equal(edits.set_matrix(s, "W_q", np.ones((3, 2))).w_query[0], np.ones((3, 2)))


def test_tokens_carry_their_embedding_rows():
    s = make(n=4)
    moved = edits.move_token(s, 0, 2)
    assert moved.tokens == ("t1", "t2", "t0", "t3")
    assert np.array_equal(moved.embeddings[2], s.embeddings[0])
    gone = edits.delete_token(s, 1)
    assert gone.tokens == ("t0", "t2", "t3")
    assert np.array_equal(gone.embeddings, s.embeddings[[0, 2, 3]])
    added = edits.insert_token(s, 4, "new", [1.0, 2.0, 3.0])
    assert added.tokens[-1] == "new" and added.embeddings[-1].tolist() == [1.0, 2.0, 3.0]
    assert np.array_equal(added.embeddings[:4], s.embeddings)
    renamed = edits.set_token(s, 2, " dog ")
    assert renamed.tokens[2] == "dog" and np.array_equal(renamed.embeddings, s.embeddings)


def test_token_edits_refuse_bad_input():
    s = make(n=1)
    with pytest.raises(SessionError, match="only token"):
        edits.delete_token(s, 0)
    with pytest.raises(SessionError, match="outside"):
        edits.move_token(s, 0, 3)
    with pytest.raises(SessionError, match="needs some text"):
        edits.set_token(s, 0, "  ")
    with pytest.raises(SessionError, match="expected d = 3"):
        edits.insert_token(s, 0, "x", [1.0])


def test_masks_follow_their_tokens():
    s = make(n=4, mask=Mask("padding", padding=(1, 3)))
    assert edits.delete_token(s, 1).mask.padding == (2,)
    assert edits.move_token(s, 3, 0).mask.padding == (0, 2)
    assert edits.insert_token(s, 0, "x").mask.padding == (2, 4)
    blocked = np.zeros((4, 4), dtype=bool)
    blocked[0, 3] = True
    c = make(n=4, mask=Mask("custom", blocked=blocked))
    moved = edits.move_token(c, 3, 1)  # t0 t3 t1 t2
    assert np.argwhere(moved.mask.blocked).tolist() == [[0, 1]]
    added = edits.insert_token(c, 0, "x")
    assert added.mask.blocked.shape == (5, 5) and np.argwhere(added.mask.blocked).tolist() == [[1, 4]]
    causal = make(n=4, mask=Mask("causal"))
    assert edits.delete_token(causal, 0).mask == Mask("causal")


def test_retokenize_keeps_rows_of_tokens_that_stay():
    s = make(n=4)  # t0 t1 t2 t3
    calls = []

    def embed(tokens):
        calls.append(tokens)
        return np.full((len(tokens), s.d), 7.0)

    t = edits.retokenize(s, ("t0", "new", "t2", "t3", "t1"), embed)
    assert t.tokens == ("t0", "new", "t2", "t3", "t1")
    assert np.array_equal(t.embeddings[[0, 2, 3]], s.embeddings[[0, 2, 3]])
    assert (t.embeddings[1] == 7.0).all() and (t.embeddings[4] == 7.0).all()
    assert calls == [t.tokens]
    same = edits.retokenize(s, s.tokens, embed)
    assert same == s and len(calls) == 1  # nothing new: the source is not asked
    zeros = edits.retokenize(s, ("t1", "z"))
    assert np.array_equal(zeros.embeddings[0], s.embeddings[1]) and not zeros.embeddings[1].any()


def test_retokenize_refuses_a_source_of_the_wrong_shape():
    with pytest.raises(SessionError, match="expected"):
        edits.retokenize(make(), ("a",), lambda toks: np.zeros((1, 99)))


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 6), dk=st.integers(1, 6), dv=st.integers(1, 6), heads=st.integers(1, 4))
def test_resizing_keeps_values_that_fit_and_fills_zeros(d, dk, dv, heads):
    s = make(n=3, d=3, dk=2, dv=2, heads=2, w_out=True)
    t = edits.set_heads(edits.resize_dv(edits.resize_dk(edits.resize_d(s, d), dk), dv), heads)
    assert (t.d, t.d_k, t.d_v, t.heads) == (d, dk, dv, heads)
    kd, kk, kv, kh = min(d, 3), min(dk, 2), min(dv, 2), min(heads, 2)
    assert np.array_equal(t.embeddings[:, :kd], s.embeddings[:, :kd])
    assert np.array_equal(t.w_query[:kh, :kd, :kk], s.w_query[:kh, :kd, :kk])
    assert np.array_equal(t.w_value[:kh, :kd, :kv], s.w_value[:kh, :kd, :kv])
    assert t.w_query[:, kd:, :].sum() == 0 and t.w_query[:, :, kk:].sum() == 0 and t.w_query[kh:].sum() == 0
    assert t.w_out.shape == (heads * dv, 5)
    old = s.w_out.reshape(2, 2, 5)
    new = t.w_out.reshape(heads, dv, 5)
    assert np.array_equal(new[:kh, :kv], old[:kh, :kv])


def test_sizes_out_of_bounds_are_refused():
    with pytest.raises(SessionError, match="d_k: must be a whole number"):
        edits.resize_dk(make(), 0)
    with pytest.raises(SessionError, match="heads"):
        edits.set_heads(make(), 65)


def test_toggle_padding_and_blocked():
    s = make(n=3)
    p = edits.toggle_padding(s, 1)
    assert p.mask == Mask("padding", padding=(1,))
    assert edits.toggle_padding(p, 1).mask.padding == ()
    c = edits.toggle_padding(make(n=3, mask=Mask("causal")), 0)
    assert c.mask.kind == "custom"
    assert c.mask.blocked[:, 0].all()
    assert np.array_equal(c.mask.blocked[:, 1:], Mask("causal").matrix(3)[:, 1:])
    b = edits.toggle_blocked(s, 2, 0)
    assert np.argwhere(b.mask.blocked).tolist() == [[2, 0]]
    assert not edits.toggle_blocked(b, 2, 0).mask.blocked.any()
    with pytest.raises(SessionError, match="mask.blocked"):
        edits.toggle_blocked(s, 3, 0)


def test_mask_and_scale_setters():
    s = make(n=3)
    assert edits.set_scale(s, Scale("temperature", 0.5)).scale.temperature == 0.5
    with pytest.raises(SessionError, match="padding position 5"):
        edits.set_mask(s, Mask("padding", padding=(5,)))


def test_keeping_unchanged_shares_what_a_rebuild_made_equal():
    from attnexplorer.core.inputs.presets import build_preset

    old = build_preset("sine", {"N": 64, "tau": 0.004}).session
    rebuilt = build_preset("sine", {"N": 64, "tau": 0.01}).session
    kept = edits.keeping_unchanged(old, rebuilt)
    assert kept == rebuilt and kept.scale.temperature == 0.01 and kept.preset == rebuilt.preset
    for name in ("tokens", "embeddings", "w_query", "w_key", "w_value", "mask"):
        assert getattr(kept, name) is getattr(old, name), name
    # A rebuild whose numbers changed takes the new arrays; one that changed nothing is ``old``.
    noisier = edits.keeping_unchanged(old, build_preset("sine", {"N": 64, "tau": 0.004, "sigma": 0.5}).session)
    assert noisier.embeddings is not old.embeddings and not np.array_equal(noisier.embeddings, old.embeddings)
    assert edits.keeping_unchanged(old, build_preset("sine", {"N": 64, "tau": 0.004}).session) is old
