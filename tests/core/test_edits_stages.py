"""Structural edits keep the stages of a real head consistent: shared K/V heads, a source
whose tokens do not move with the queries, biases, the norm and a learned table resized."""

import numpy as np
import pytest

from attnexplorer.core.editing import edits
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source


def gqa():
    rng = np.random.default_rng(0)
    return Session(tuple("abc"), rng.normal(size=(3, 4)), rng.normal(size=(4, 4, 2)), rng.normal(size=(2, 4, 2)),
                   rng.normal(size=(2, 4, 3)), b_query=rng.normal(size=(4, 2)), b_key=rng.normal(size=(2, 2)),
                   b_value=rng.normal(size=(2, 3)), norm=Norm("layer", rng.normal(size=4), rng.normal(size=4)),
                   positions=Positions("alibi", slopes=[0.5, 0.25, 0.125, 0.0625]))


def cross():
    rng = np.random.default_rng(1)
    return Session(("le", "chat"), rng.normal(size=(2, 3)), rng.normal(size=(1, 3, 2)), rng.normal(size=(1, 5, 2)),
                   rng.normal(size=(1, 5, 2)), source=Source(("the", "black", "cat"), rng.normal(size=(3, 5))),
                   mask=Mask("custom", blocked=[[0, 1, 0], [1, 0, 0]]))


def test_a_query_heads_key_table_is_its_shared_kv_head():
    s = gqa()
    assert np.array_equal(edits.table_matrix(s, "W_k", 3), s.w_key[1])
    t = edits.set_cell(s, "W_k", 0, 0, 9.0, head=2)  # head 2 shares K/V head 1 with head 3
    assert t.w_key[1, 0, 0] == 9.0 and np.array_equal(t.w_key[0], s.w_key[0])
    assert edits.table_matrix(t, "W_k", 3)[0, 0] == 9.0


def test_resizing_keeps_biases_norm_and_kv_heads_in_step():
    s = gqa()
    t = edits.resize_dk(s, 4)
    assert t.w_key.shape == (2, 4, 4) and t.b_query.shape == (4, 4) and t.b_key.shape == (2, 4)
    assert np.array_equal(t.b_key[:, :2], s.b_key)
    t = edits.resize_dv(s, 1)
    assert t.w_value.shape == (2, 4, 1) and t.b_value.shape == (2, 1)
    t = edits.resize_d(s, 6)
    assert t.norm.weight.shape == (6,) and t.norm.weight[4:].tolist() == [1.0, 1.0] and t.norm.bias[4:].tolist() == [0, 0]
    assert t.w_key.shape == (2, 6, 2)
    t = edits.set_heads(s, 6)
    assert t.kv_heads == 2 and t.b_query.shape == (6, 2) and t.positions.slopes[:4].tolist() == [0.5, 0.25, 0.125, 0.0625]
    with pytest.raises(SessionError, match="kv_heads: 2 does not divide 3 query heads"):
        edits.set_heads(s, 3)


def test_query_token_edits_leave_the_source_keys_where_they_are():
    s = cross()
    t = edits.move_token(s, 0, 1)
    assert t.tokens == ("chat", "le") and t.mask.blocked.tolist() == [[True, False, False], [False, True, False]]
    t = edits.insert_token(s, 2, "noir")
    assert t.mask.blocked.shape == (3, 3) and not t.mask.blocked[2].any()
    t = edits.toggle_padding(cross().replace(mask=Mask("none")), 2)  # source position 2 (beyond the 2 queries)
    assert t.mask.padding == (2,)
    t = edits.toggle_blocked(s, 1, 2)
    assert t.mask.blocked[1, 2]
    t = edits.resize_d(s, 4)
    assert t.w_key.shape == (1, 5, 2)  # the source's width stays


def test_a_learned_table_grows_with_the_tokens():
    s = gqa().replace(positions=Positions("learned", table=np.ones((3, 4))))
    t = edits.insert_token(s, 3, "d")
    assert t.positions.table.shape == (4, 4) and not t.positions.table[3].any()
