"""Edits of the stages (core/editing/stage_edits.py, stage_tables.py, source_edits.py): every stage table read and written, biases added
and removed, norm, positions, K/V heads, output projection and the source sequence; refusals
change nothing and say why; the result stays the same where an edit promises it."""

import numpy as np
import pytest

from attnexplorer.core.editing import edits, source_edits, stage_tables
from attnexplorer.core.editing import stage_edits as se
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import SessionError
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.inputs.stages import Norm, Positions, Source, alibi_slopes, sinusoidal_table


def plain(heads=4, d=4, d_k=2, d_v=3, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return Session(tuple("abcdefgh"[:n]), rng.normal(size=(n, d)), rng.normal(size=(heads, d, d_k)),
                   rng.normal(size=(heads, d, d_k)), rng.normal(size=(heads, d, d_v)))


def output(session):
    return compute(session).output


def test_every_table_name_is_listed_once_and_base_tables_come_first():
    assert stage_tables.TABLES[:5] == edits.TABLES and len(set(stage_tables.TABLES)) == len(stage_tables.TABLES)


def test_an_absent_bias_reads_as_zeros_and_writing_a_cell_adds_it():
    s = plain()
    assert stage_tables.table_matrix(s, "b_q", 2).tolist() == [[0.0, 0.0]] and not stage_tables.is_stored(s, "b_q")
    t = stage_tables.set_cell(s, "b_q", 0, 1, 0.5, head=2)
    assert t.b_query.shape == (4, 2) and t.b_query[2].tolist() == [0.0, 0.5] and not t.b_query[[0, 1, 3]].any()
    u = stage_tables.set_cell(t, "b_q", 0, 0, -1.0, head=2)
    assert u.b_query[2].tolist() == [-1.0, 0.5]
    assert np.array_equal(stage_tables.table_matrix(u, "b_q", 2), [[-1.0, 0.5]])


def test_add_and_remove_a_bias_refusals_say_why():
    s = plain()
    t = se.add_bias(s, "b_v")
    assert t.b_value.shape == (4, 3) and not t.b_value.any()
    assert np.allclose(output(t), output(s))  # a zero bias changes nothing
    with pytest.raises(SessionError, match="b_v: is already there"):
        se.add_bias(t, "b_v")
    assert se.remove_bias(t, "b_v").b_value is None
    with pytest.raises(SessionError, match="b_k: is not there"):
        se.remove_bias(s, "b_k")
    with pytest.raises(SessionError, match="b_o: an output bias needs W_o"):
        se.add_bias(s, "b_o")
    with pytest.raises(SessionError, match="not a bias"):
        se.add_bias(s, "W_q")


def test_bias_cells_are_refused_outside_the_row_or_when_not_finite():
    s = plain()
    with pytest.raises(SessionError, match=r"b_q\[5\] \(head 0\): is outside the 1×2 table"):
        stage_tables.set_cell(s, "b_q", 0, 5, 1.0)
    with pytest.raises(SessionError, match="not a finite number"):
        stage_tables.set_cell(s, "b_k", 0, 0, float("nan"))
    with pytest.raises(SessionError, match="does not fit"):
        stage_tables.set_block(s, "b_v", 0, 1, [[1, 2, 3]])
    with pytest.raises(SessionError, match=r"b_q: the matrix is 1×3 but the table is 1×2 \(1 × d_k\)"):
        stage_tables.set_matrix(s, "b_q", [1, 2, 3])
    assert stage_tables.set_matrix(s, "b_q", [1, 2], head=1).b_query[1].tolist() == [1.0, 2.0]


def test_grouped_query_bias_and_weights_belong_to_the_shared_kv_head():
    s = se.set_kv_heads(plain(), 2)
    assert s.kv_heads == 2 and se.sharing_heads(s, 3) == (2, 3)
    t = stage_tables.set_cell(s, "b_k", 0, 0, 7.0, head=3)
    assert t.b_key.shape == (2, 2) and t.b_key[1, 0] == 7.0 and stage_tables.table_matrix(t, "b_k", 2)[0, 0] == 7.0
    assert stage_tables.table_label(t, "b_k", 3) == "b_k (K/V head 1)" and stage_tables.table_label(t, "b_q", 3) == "b_q (head 3)"


def test_kv_heads_keep_each_groups_first_head_and_ungrouping_changes_nothing():
    s = se.add_bias(plain(), "b_k")
    s = stage_tables.set_cell(s, "b_k", 0, 0, 3.0, head=2)
    g = se.set_kv_heads(s, 2)
    assert np.array_equal(g.w_key, s.w_key[[0, 2]]) and g.b_key[1, 0] == 3.0
    back = se.set_kv_heads(g, None)
    assert back.kv_heads == 4 and np.allclose(output(back), output(g))
    assert np.array_equal(back.w_value[1], g.w_value[0])  # query head 1 keeps the V it used
    with pytest.raises(SessionError, match="kv_heads: 3 does not divide 4 query heads"):
        se.set_kv_heads(s, 3)
    with pytest.raises(SessionError, match=r"kv_heads: must be a whole number in 1..4, got 8"):
        se.set_kv_heads(s, 8)


def test_norm_kinds_keep_the_weight_and_the_tables_follow():
    s = plain()
    with pytest.raises(SessionError, match="norm.weight: there is no norm"):
        stage_tables.table_matrix(s, "norm.weight")
    t = se.set_norm(s, se.norm_of_kind(s, "layer"))
    assert t.norm.kind == "layer" and t.norm.eps == 1e-5
    assert stage_tables.table_matrix(t, "norm.weight").tolist() == [[1.0] * 4] and stage_tables.table_matrix(t, "norm.bias").tolist() == [[0.0] * 4]
    t = stage_tables.set_cell(t, "norm.weight", 0, 1, 2.0)
    t = stage_tables.set_cell(t, "norm.bias", 0, 0, 0.5)
    assert t.norm.weight.tolist() == [1, 2, 1, 1] and t.norm.bias.tolist() == [0.5, 0, 0, 0]
    r = se.set_norm(t, se.norm_of_kind(t, "rms"))
    assert r.norm.kind == "rms" and r.norm.bias is None and r.norm.weight.tolist() == [1, 2, 1, 1] and r.norm.eps == 1e-6
    with pytest.raises(SessionError, match="norm.bias: RMSNorm has no bias"):
        stage_tables.set_cell(r, "norm.bias", 0, 0, 1.0)
    assert se.set_norm(r, se.norm_of_kind(r, "none")).norm is None
    with pytest.raises(SessionError, match="norm.eps: must be a finite number > 0"):
        se.set_norm(r, Norm("rms", eps=0.0))


def test_positions_kinds_and_their_tables():
    s = plain()
    sin = se.set_positions(s, se.positions_of_kind(s, "sinusoidal"))
    learned = se.set_positions(sin, se.positions_of_kind(sin, "learned"))
    assert np.allclose(learned.positions.table, sinusoidal_table(3, 4))
    assert np.allclose(output(learned), output(sin))  # the switch itself changes nothing
    t = stage_tables.set_cell(learned, "positions.table", 2, 3, 9.0)
    assert t.positions.table[2, 3] == 9.0 and stage_tables.cell_name(t, "positions.table", 2, 3) == "positions.table[2,3]"
    with pytest.raises(SessionError, match="positions.table: only learned positions have a table"):
        stage_tables.table_matrix(sin, "positions.table")
    alibi = se.set_positions(s, se.positions_of_kind(s, "alibi"))
    assert np.allclose(stage_tables.table_matrix(alibi, "positions.slopes")[0], alibi_slopes(4)) and not stage_tables.is_stored(alibi, "positions.slopes")
    edited = stage_tables.set_cell(alibi, "positions.slopes", 0, 1, 0.75)
    assert edited.positions.slopes.tolist() == [alibi_slopes(4)[0], 0.75, *alibi_slopes(4)[2:]]
    rope = se.set_positions(s, se.positions_of_kind(s, "rope"))
    assert rope.positions.kind == "rope" and rope.positions.dims is None
    with pytest.raises(SessionError, match="positions.dims: 4 must be even and at most d_k = 2"):
        se.set_positions(s, Positions("rope", dims=4))
    with pytest.raises(SessionError, match="positions.slopes: has 2 numbers, expected one per head"):
        se.set_positions(s, Positions("alibi", slopes=[1, 2]))
    assert se.set_positions(rope, se.positions_of_kind(rope, "none")).positions is None


def test_rope_on_an_odd_dk_rotates_the_largest_even_part_and_resizing_dk_keeps_rope_valid():
    s = plain(d_k=3)
    assert se.positions_of_kind(s, "rope").dims == 2
    with pytest.raises(SessionError, match="d_k = 1"):
        se.positions_of_kind(plain(d_k=1), "rope")
    rope = se.set_positions(plain(d_k=4), Positions("rope"))
    assert edits.resize_dk(rope, 3).positions.dims == 2
    assert edits.resize_dk(se.set_positions(plain(d_k=6), Positions("rope", dims=6)), 4).positions.dims == 4
    assert edits.resize_dk(rope, 8).positions.dims is None
    with pytest.raises(SessionError, match="positions.dims"):
        edits.resize_dk(rope, 1)


def test_output_projection_add_remove_and_bias():
    s = plain(heads=2, d_v=2)
    t = se.add_output(s)
    assert t.w_out.shape == (4, 4) and np.allclose(output(t), output(s))  # W_o = I
    t = stage_tables.set_cell(t, "b_o", 0, 3, 1.5)
    assert t.b_out.tolist() == [0, 0, 0, 1.5]
    w = se.resize_d_out(t, 2)
    assert w.w_out.shape == (4, 2) and w.b_out.shape == (2,)
    gone = se.remove_output(t)
    assert gone.w_out is None and gone.b_out is None
    with pytest.raises(SessionError, match="W_o: is not there"):
        se.remove_output(gone)
    with pytest.raises(SessionError, match="b_o: an output bias needs W_o"):
        stage_tables.table_matrix(gone, "b_o")


def test_a_source_starts_as_a_copy_and_leaves_keys_as_they_were():
    s = plain()
    c = source_edits.set_source(s)
    assert c.source.tokens == s.tokens and np.array_equal(c.source.embeddings, s.embeddings)
    assert np.allclose(output(c), output(s))  # no positions or norm: the same keys and values
    assert np.array_equal(stage_tables.table_matrix(c, "source.embeddings"), s.embeddings)
    back = source_edits.clear_source(c)
    assert back.source is None and back == s


def test_a_source_is_refused_with_causal_masks_rope_and_alibi_naming_why():
    s = plain()
    with pytest.raises(SessionError, match="mask: causal needs one sequence"):
        source_edits.set_source(s.replace(mask=Mask("causal")))
    with pytest.raises(SessionError, match="positions: rope encodes the distance"):
        source_edits.set_source(s.replace(positions=Positions("rope")))
    with pytest.raises(SessionError, match="positions: alibi encodes"):
        se.set_positions(source_edits.set_source(s), Positions("alibi"))
    with pytest.raises(SessionError, match="source.embeddings: there is no source"):
        stage_tables.table_matrix(s, "source.embeddings")


def test_source_token_edits_move_rows_and_mask_columns():
    s = source_edits.set_source(plain()).replace(mask=Mask("custom", blocked=[[1, 0, 0], [0, 1, 0], [0, 0, 1]]))
    t = source_edits.move_source_token(s, 0, 2)
    assert t.source.tokens == ("b", "c", "a") and np.array_equal(t.source.embeddings[2], s.source.embeddings[0])
    assert t.mask.blocked[:, 2].tolist() == [True, False, False]
    t = source_edits.insert_source_token(s, 1, "x", embedding=[1, 2, 3, 4])
    assert t.source.tokens == ("a", "x", "b", "c") and t.source.embeddings[1].tolist() == [1, 2, 3, 4]
    assert t.mask.blocked.shape == (3, 4) and not t.mask.blocked[:, 1].any()
    t = source_edits.delete_source_token(s, 0)
    assert t.source.tokens == ("b", "c") and t.mask.blocked.tolist() == [[False, False], [True, False], [False, True]]
    t = source_edits.set_source_token(s, 1, " bee ")
    assert t.source.tokens[1] == "bee"
    one = source_edits.set_source(plain(), Source(("z",), [[1.0, 0, 0, 0]]))
    with pytest.raises(SessionError, match="cannot delete the only source token"):
        source_edits.delete_source_token(one, 0)
    with pytest.raises(SessionError, match=r"source.tokens: position 5 is outside 0..2"):
        source_edits.move_source_token(s, 5, 0)
    p = source_edits.set_source(plain()).replace(mask=Mask("padding", padding=(0, 2)))
    assert source_edits.delete_source_token(p, 0).mask.padding == (1,)


def test_retokenize_source_keeps_rows_of_words_that_stay():
    s = source_edits.set_source(plain())
    t = source_edits.retokenize_source(s, ("c", "new", "a"), embed=lambda toks: np.full((len(toks), 4), 5.0))
    assert t.source.tokens == ("c", "new", "a") and t.source.embeddings[1].tolist() == [5.0] * 4
    assert np.array_equal(t.source.embeddings[2], s.source.embeddings[0]) or np.array_equal(t.source.embeddings[0], s.source.embeddings[2])
    assert t.tokens == s.tokens  # the queries stay
    with pytest.raises(SessionError, match="a source needs at least one token"):
        source_edits.retokenize_source(s, ())


def test_source_width_moves_the_rows_of_wk_and_wv_and_clearing_returns_to_d():
    s = build_preset("translate").session
    assert s.source.d == 4 and s.d == 3
    t = source_edits.resize_source_d(s, 5)
    assert t.source.embeddings.shape == (3, 5) and t.w_key.shape == (1, 5, 3) and t.w_value.shape == (1, 5, 3)
    back = source_edits.clear_source(s.replace(mask=Mask("padding", padding=(2,))))
    assert back.w_key.shape == (1, 3, 3) and back.mask.padding == (2,)
    custom = s.replace(mask=Mask("custom", blocked=np.ones((3, 3), dtype=bool)))
    assert source_edits.clear_source(custom).mask.blocked.shape == (3, 3)
    wide = source_edits.set_source(plain(), Source(("p", "q"), np.ones((2, 6))))
    assert wide.w_key.shape == (4, 6, 2)


def test_unknown_tables_and_every_table_round_trips_through_set_matrix():
    s = plain(heads=2, d_v=2)
    s = se.add_output(source_edits.set_source(s))
    s = se.set_norm(s, Norm("layer"))
    s = se.set_positions(s, Positions("learned", table=np.zeros((4, 4))))
    s = se.set_sinks(se.set_qk_norm(s, se.qk_norm_of_kind(s, "layer")), True)   # version 3's tables
    with pytest.raises(SessionError, match="unknown table 'b_x'"):
        stage_tables.table_matrix(s, "b_x")
    alibi = se.set_positions(s.replace(source=None), Positions("alibi"))
    done = []
    for session, table in [(s, t) for t in stage_tables.TABLES if t != "positions.slopes"] + [(alibi, "positions.slopes")]:
        s = session
        m = stage_tables.table_matrix(s, table, head=1)
        filled = np.arange(m.size, dtype=float).reshape(m.shape) + 0.5
        t = stage_tables.set_matrix(s, table, filled, head=1)
        assert np.array_equal(stage_tables.table_matrix(t, table, head=1), filled), table
        assert stage_tables.has_table(t, table)
        done.append(table)
    assert sorted(done) == sorted(stage_tables.TABLES)


def test_undo_names_say_what_changed():
    rope = Positions("rope")
    assert se.describe_positions(rope, Positions("rope", offset=3)) == "RoPE offset = 3"
    assert se.describe_positions(rope, Positions("rope", theta=500.0)) == "RoPE θ = 500"
    assert se.describe_positions(Positions("rope", dims=2), rope) == "RoPE dims = all of d_k"
    assert se.describe_positions(None, rope) == "Positions: RoPE" and se.describe_positions(rope, None) == "Positions: none"
    assert se.describe_positions(Positions("alibi"), Positions("alibi", slopes=[1.0])) == "ALiBi slopes"
    assert se.describe_norm(Norm("rms"), Norm("rms", eps=1e-3)) == "RMSNorm eps = 0.001"
    assert se.describe_norm(None, Norm("layer")) == "Norm: LayerNorm"


def test_the_learned_table_takes_more_rows_but_never_fewer_than_the_tokens():
    s = se.set_positions(plain(), se.positions_of_kind(plain(), "learned"))
    s = stage_tables.set_cell(s, "positions.table", 2, 0, 4.0)
    t = se.resize_positions_table(s, 6)
    assert t.positions.table.shape == (6, 4) and t.positions.table[2, 0] == 4.0 and not t.positions.table[3:].any()
    assert se.resize_positions_table(t, 3).positions.table.shape == (3, 4)
    with pytest.raises(SessionError, match="positions.table: 2 rows are fewer than the 3 tokens"):
        se.resize_positions_table(s, 2)
    with pytest.raises(SessionError, match="only learned positions"):
        se.resize_positions_table(plain(), 4)
