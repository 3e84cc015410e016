"""The stage panels (E · P · X, RoPE, ALiBi) draw the engine's numbers, and the stages' marks in
the other panels (grouped-query heading, cross-attention keys) are right.

The RoPE arrows are checked against a rotation worked out here with numpy, not the engine's:
the rope preset's query and key are its biases (W_q = W_k = 0), pairs (0, 2) and (1, 3) turn
by 1 and ½ radian per position.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.presets.rope import query_and_key
from attnexplorer.core.inputs.session import Mask, Session
from attnexplorer.core.kernel.attention import alibi_bias
from attnexplorer.core.inputs.stages import Norm, Positions, Source, norm_statistics, sinusoidal_table
from attnexplorer.ui.exports import figures
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import AlibiPanel, InputPanel, QKVPanel, QueryPanel, RopePanel
from ui_helpers import legend_entries, shown


@pytest.fixture
def make_doc(qtbot):
    made = []

    def make(session):
        document = SessionDocument(session)
        made.append(document)
        return document

    yield make
    for document in made:
        document.shutdown()


def tip(item) -> np.ndarray:
    """The end of an arrow drawn by ``arrow_segments`` (its shaft is the first segment)."""
    x, y = item.getData()
    return np.array([x[1], y[1]])


def turned(v: np.ndarray, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([v[0] * c - v[1] * s, v[0] * s + v[1] * c])


def alibi_gqa_session(heads=4, kv_heads=2, n=5):
    rng = np.random.default_rng(4)
    return Session(tuple("abcdefgh"[:n]), rng.normal(size=(n, 3)), rng.normal(size=(heads, 3, 2)),
                   rng.normal(size=(kv_heads, 3, 2)), rng.normal(size=(kv_heads, 3, 2)), norm=Norm("layer"),
                   positions=Positions("alibi"), mask=Mask("causal"))


# -- RoPE ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", [0, 1])
def test_rope_arrows_are_the_query_and_key_turned_by_position_times_omega(make_doc, qtbot, pair):
    doc = make_doc(build_preset("rope").session)
    panel = shown(qtbot, RopePanel(doc), (480, 380))
    panel.pair_combo.setCurrentIndex(pair)
    doc.selection.set(query=3, key=2)
    q, k = query_and_key(3.0)
    a, b = (0, 2) if pair == 0 else (1, 3)
    omega = 1.0 if pair == 0 else 0.5
    np.testing.assert_allclose(tip(panel.q_before), q[[a, b]], atol=1e-6)
    np.testing.assert_allclose(tip(panel.k_before), k[[a, b]], atol=1e-6)
    np.testing.assert_allclose(tip(panel.q_after), turned(q[[a, b]], 3 * omega), atol=1e-5)
    np.testing.assert_allclose(tip(panel.k_after), turned(k[[a, b]], 2 * omega), atol=1e-5)
    # The angle table: position × ω for every token and pair, the selected pair framed.
    np.testing.assert_allclose(panel.angles.data, np.arange(6)[:, None] * np.array([1.0, 0.5])[None, :])
    assert panel.angles.getAxis("left").labels[3] == "on @3"
    # The line under the plots: the score before and after RoPE, as the engine has them.
    result = doc.result
    assert panel.drawn.score_after == pytest.approx(float(result.scores[0, 3, 2]), rel=1e-5)
    assert panel.drawn.score_before == pytest.approx(float(q @ k), rel=1e-5)
    assert "score q·k:" in panel.note.text and "before RoPE" in panel.note.text


def test_the_offset_turns_the_arrows_leaves_the_scores_and_is_one_undo_step(make_doc, qtbot):
    doc = make_doc(build_preset("rope").session)
    panel = shown(qtbot, RopePanel(doc), (480, 380))
    doc.selection.set(query=3, key=2)
    before = doc.result
    steps = doc.undo_stack.count()
    panel.offset_spin.setValue(100)
    qtbot.waitUntil(lambda: doc.result is not before and doc.result.session.positions.offset == 100)
    assert doc.undo_stack.count() == steps + 1
    assert doc.session.positions.offset == 100
    after = doc.result
    np.testing.assert_allclose(after.scores, before.scores, rtol=1e-4, atol=1e-4)  # float32, angles near 100 rad
    np.testing.assert_allclose(after.weights, before.weights, atol=1e-5)
    assert not np.allclose(after.Q, before.Q)  # the query did turn
    q, k = query_and_key(3.0)
    np.testing.assert_allclose(tip(panel.q_after), turned(q[[0, 2]], 103.0), atol=1e-4)
    np.testing.assert_allclose(tip(panel.k_after), turned(k[[0, 2]], 102.0), atol=1e-4)
    assert panel.angles.getAxis("left").labels[0] == "the @100"
    doc.undo_stack.undo()
    qtbot.waitUntil(lambda: doc.result.session.positions.offset == 0)
    assert panel.offset_spin.value() == 0  # the control follows the session drawn
    assert doc.undo_stack.count() == steps + 1 and doc.undo_stack.index() == steps


def test_the_rope_panel_applies_only_to_rope_sessions(make_doc, qtbot):
    doc = make_doc(build_preset("rope").session)
    panel = RopePanel(doc)
    qtbot.addWidget(panel)
    assert panel.applies_to(doc.session)
    assert not panel.applies_to(build_preset("translate").session)
    assert not panel.applies_to(alibi_gqa_session())


# -- ALiBi --------------------------------------------------------------------------------------
def test_alibi_panel_shows_each_heads_bias_and_slope_and_selects_heads(make_doc, qtbot):
    session = alibi_gqa_session()
    doc = make_doc(session)
    panel = shown(qtbot, AlibiPanel(doc), (420, 380))
    want = alibi_bias(session.positions.slopes_for(4), slice(0, 5), slice(0, 5)).numpy()
    for head in range(4):
        doc.selection.set(head=head)
        np.testing.assert_allclose(panel.view.data, want[head], rtol=1e-6)
        assert f"head {head}, slope" in panel.heading.text
    np.testing.assert_allclose(panel.slopes.data[0], [0.25, 0.0625, 0.015625, 0.00390625])
    panel.slopes.on_click(0, 1)  # a click on the strip's head 1
    assert doc.selection.current.head == 1
    assert not panel.applies_to(build_preset("rope").session)


# -- E, P, X ------------------------------------------------------------------------------------
def test_input_panel_shows_e_p_x_and_the_norms_mean_and_scale(make_doc, qtbot):
    rng = np.random.default_rng(5)
    session = Session(tuple("abcd"), rng.normal(size=(4, 6)) * 2, rng.normal(size=(1, 6, 2)),
                      rng.normal(size=(1, 6, 2)), rng.normal(size=(1, 6, 2)), norm=Norm("layer"),
                      positions=Positions("sinusoidal"))
    doc = make_doc(session)
    panel = shown(qtbot, InputPanel(doc), (560, 360))
    assert panel.views() == [panel.e_view, panel.p_view, panel.x_view, panel.norm_view]
    np.testing.assert_allclose(panel.e_view.data, session.embeddings)
    p = sinusoidal_table(4, 6)
    np.testing.assert_allclose(panel.p_view.data, p, atol=1e-12)
    np.testing.assert_allclose(panel.x_view.data, doc.result.X)
    mean, scale = norm_statistics("layer", session.embeddings + p, 1e-5)
    np.testing.assert_allclose(panel.norm_view.data, np.column_stack([mean, scale]))
    assert panel.x_view.titleLabel.text == "X = LayerNorm(E + P)"
    # One colour scale for E, P and X: the norm's rescaling is seen as a change of colour.
    assert panel.e_view.levels == panel.p_view.levels == panel.x_view.levels

    # RMSNorm alone: no P view, one statistic.
    doc.edit(session.replace(norm=Norm("rms"), positions=None), "rms")
    qtbot.waitUntil(lambda: doc.result.session.norm.kind == "rms")
    panel.refresh()
    assert panel.views() == [panel.e_view, panel.x_view, panel.norm_view]
    assert panel.norm_view.data.shape == (4, 1) and panel.x_view.titleLabel.text == "X = RMSNorm(E)"
    assert not panel.applies_to(build_preset("rope").session)  # X is E there: nothing to show


# -- the other panels with stages ------------------------------------------------------------------
def test_qkv_heading_names_the_kv_head_and_the_query_heads_that_share_it(make_doc, qtbot):
    doc = make_doc(alibi_gqa_session(heads=4, kv_heads=2))
    panel = shown(qtbot, QKVPanel(doc), (480, 320))
    doc.selection.set(head=3)
    assert panel.heading.text.endswith("head 3 · K/V head 1 (read by heads 2, 3)")
    rope = make_doc(build_preset("rope").session)
    panel = shown(qtbot, QKVPanel(rope), (480, 320))
    assert [v.titleLabel.text for v in panel.views()] == ["Q = RoPE(X·W_q + b_q)", "K = RoPE(X·W_k + b_k)", "V = X·W_v"]


def test_cross_attention_query_legend_names_source_tokens_beyond_the_queries(make_doc, qtbot):
    s = build_preset("translate").session
    # Four source tokens for three queries; the fourth gets weight, so it is in the legend.
    s = s.replace(source=Source(("the", "black", "cat", "."), np.vstack([s.source.embeddings, np.full((1, 4), 0.3)])))
    doc = make_doc(s)
    panel = shown(qtbot, QueryPanel(doc), (480, 420))
    doc.selection.set(query=2)
    names = [name for name, _ in legend_entries(panel.legend)]
    assert names[0] == "'black'" and "'.'" in names and not {"'le'", "'chat'", "'noir'"} & set(names)


def test_new_panels_export_as_figures(make_doc, qtbot, tmp_path):
    for cls, session in ((RopePanel, build_preset("rope").session), (AlibiPanel, alibi_gqa_session()),
                         (InputPanel, alibi_gqa_session())):
        panel = shown(qtbot, cls(make_doc(session)), (480, 380))
        image = figures.render_panel(panel)
        assert image.width() >= 480 and image.height() >= 300
        figures.export_panel(panel, tmp_path / f"{cls.kind}.svg")
        assert (tmp_path / f"{cls.kind}.svg").stat().st_size > 1000


def test_a_large_session_keeps_the_stage_intermediates_the_panels_read(make_doc):
    doc = make_doc(build_preset("rope").session)
    doc.compute.set_needs(RopePanel.needs | AlibiPanel.needs)
    large = Session(tuple(f"t{i}" for i in range(2100)), np.zeros((2100, 4)), np.zeros((1, 4, 4)),
                    np.zeros((1, 4, 4)), np.zeros((1, 4, 4)), positions=Positions("rope"))
    keep = doc.compute.keep_for(large)
    assert keep is not None and {"Q_unrotated", "K_unrotated", "position_bias", "Q", "K"} <= set(keep)


def test_embedding_scatter_draws_and_names_the_shared_kv_heads_keys(make_doc, qtbot):
    from attnexplorer.ui.panels import EmbeddingPanel

    rng = np.random.default_rng(6)
    session = Session(tuple("abc"), rng.normal(size=(3, 2)), rng.normal(size=(4, 2, 2)), rng.normal(size=(2, 2, 2)),
                      rng.normal(size=(2, 2, 2)))
    doc = make_doc(session)
    panel = shown(qtbot, EmbeddingPanel(doc), (420, 360))
    doc.selection.set(head=2, key=1)
    assert panel.heading.text.endswith("head 2 (keys of K/V head 1)")
    np.testing.assert_allclose(tip(panel.key_arrow), doc.result.K[1, 1], rtol=1e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_every_pair_after_rope_is_its_before_turned_by_the_angle_the_panel_names(make_doc, qtbot, layout):
    rng = np.random.default_rng(7)
    session = Session(tuple("abcde"), rng.normal(size=(5, 6)), rng.normal(size=(4, 6, 6)), rng.normal(size=(2, 6, 6)),
                      rng.normal(size=(2, 6, 2)), positions=Positions("rope", theta=50.0, dims=4, layout=layout, offset=3))
    doc = make_doc(session)
    panel = shown(qtbot, RopePanel(doc), (480, 380))
    doc.selection.set(head=3, query=4, key=1)
    assert panel.pair_combo.count() == 2  # dims = 4 of d_k = 6: two pairs, the rest left as is
    for pair in range(2):
        panel.pair_combo.setCurrentIndex(pair)
        drawn = panel.drawn
        assert (drawn.a, drawn.b) == ((pair, pair + 2) if layout == "half" else (2 * pair, 2 * pair + 1))
        omega = 50.0 ** (-2 * pair / 4)
        assert drawn.query_angle == pytest.approx(7 * omega) and drawn.key_angle == pytest.approx(4 * omega)
        np.testing.assert_allclose(tip(panel.q_after), turned(tip(panel.q_before), 7 * omega), atol=1e-4)
        np.testing.assert_allclose(tip(panel.k_after), turned(tip(panel.k_before), 4 * omega), atol=1e-4)
        # Query head 3 reads K/V head 1: the key is that head's.
        np.testing.assert_allclose(tip(panel.k_before), doc.result.K_unrotated[1, 1, [drawn.a, drawn.b]], rtol=1e-6)


def test_alibi_panel_draws_a_window_around_the_query_when_the_result_has_no_bias_matrix(make_doc, qtbot):
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.ui.panels import alibi_panel

    session = alibi_gqa_session(n=8)
    doc = make_doc(session)
    panel = shown(qtbot, AlibiPanel(doc), (420, 380))
    small = compute(session, keep=("Q", "K", "V"))  # as a long session's result: no H × n × n bias
    assert small.position_bias is None
    old, alibi_panel.WINDOW = alibi_panel.WINDOW, 4
    try:
        doc.compute.publish(small)
        doc.selection.set(head=1, query=6, key=5)
        want = alibi_bias(session.positions.slopes_for(4), slice(0, 8), slice(0, 8)).numpy()[1, 4:8, 4:8]
        np.testing.assert_allclose(panel.view.data, want)
        assert panel.view.getAxis("left").labels == tuple("efgh")
        assert "(tokens 4–7 of 8)" in panel.heading.text
        panel.view.on_click(1, 0)  # cell (f, e) of the window
        assert (doc.selection.current.query, doc.selection.current.key) == (5, 4)
    finally:
        alibi_panel.WINDOW = old


def test_with_no_key_selected_the_rope_panel_draws_the_key_the_query_weights_most(make_doc, qtbot):
    doc = make_doc(build_preset("rope").session)
    panel = shown(qtbot, RopePanel(doc), (480, 380))
    doc.selection.set(query=4, key=None)
    assert panel.drawn.key_position == 3  # the previous-token head: 'the' looks at 'on'
    assert panel.heading.text == "RoPE: 'the' (position 4) and 'on' (position 3, weighted most)"
