"""The soft-capping and sinks panel and the texts that say a row with sinks sums to less than
1: drawn numbers equal the engine's, and the panel shows only for sessions with the stages."""

import numpy as np
from ui_helpers import shown

from attnexplorer.ui.panels import QueryPanel, ScaledScoresPanel, SoftmaxStagesPanel, WeightsPanel


def show(qtbot, panel):
    return shown(qtbot, panel, size=(640, 520))


def staged(doc, **stages):
    doc.edit(doc.session.replace(**stages), "stages")
    assert doc.compute.wait_idle()


def test_the_panel_draws_the_engines_numbers(qtbot, doc):
    panel = show(qtbot, SoftmaxStagesPanel(doc))
    assert not panel.applies_to(doc.session)
    heads = doc.session.heads
    staged(doc, softcap=1.0, sinks=np.linspace(-1.0, 2.0, heads))
    assert panel.applies_to(doc.session)
    doc.selection.set(head=heads - 1, query=2, key=1)
    panel.refresh()
    result = doc.result
    np.testing.assert_allclose(panel.shares(), result.sink_share[heads - 1], rtol=1e-6)
    raw, capped = panel.capped_points()
    visible = ~np.asarray(result.mask[2])
    np.testing.assert_allclose(capped, result.scaled_scores[heads - 1, 2][visible], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(raw * 0 + result.scores[heads - 1, 2][visible] * result.scale_factor, raw, rtol=1e-6)
    assert (np.abs(capped) <= 1.0).all()
    assert panel.curve_plot.isVisible() and panel.share_chart.isVisible()
    panel.resize(1280, 800)
    panel.grab().save("/tmp/stages/softmax_stages_panel.png")
    staged(doc, softcap=None)
    panel.refresh()
    assert not panel.curve_plot.isVisible() and panel.capped_points() is None and panel.shares() is not None


def test_titles_say_rows_with_sinks_sum_to_less_than_one(qtbot, doc):
    weights, query, scaled = (show(qtbot, cls(doc)) for cls in (WeightsPanel, QueryPanel, ScaledScoresPanel))
    for p in (weights, query, scaled):
        p.refresh()
    assert "each row sums to 1)" in weights.heading.text
    staged(doc, sinks=np.full(doc.session.heads, 1.0), softcap=30.0)
    for p in (weights, query, scaled):
        p.refresh()
    assert "each row sums to 1 − its sink's share" in weights.heading.text
    head, q = doc.selection.current.head, doc.selection.current.query
    share = float(doc.result.sink_share[head, q])
    title = query.weight_chart.titleLabel.text
    assert f"sink {share:.3g}" in title and f"sum {1 - share:.3g}" in title
    assert "soft-capped at ±30" in scaled.heading.text


def test_the_qk_norm_panel_draws_q_and_k_before_and_after(qtbot, doc):
    from attnexplorer.core.inputs.stages import Positions, QKNorm
    from attnexplorer.ui.panels import QKNormPanel

    panel = show(qtbot, QKNormPanel(doc))
    assert not panel.applies_to(doc.session)
    d_k = doc.session.d_k
    staged(doc, qk_norm=QKNorm("rms", "head", 1e-6, np.linspace(0.5, 2.0, d_k)),
           positions=Positions("rope", dims=2 * (d_k // 2)))
    doc.selection.set(head=0, query=3, key=1)
    panel.refresh()
    r = doc.result
    before, after = panel.query_chart.heights
    np.testing.assert_allclose(before, r.Q_unnormed[0, 3], rtol=1e-6)
    np.testing.assert_allclose(after, r.Q_unrotated[0, 3], rtol=1e-6)   # after the norm, before RoPE
    before, after = panel.key_chart.heights
    np.testing.assert_allclose(before, r.K_unnormed[0, 1], rtol=1e-6)
    q = r.Q_unnormed[0, 3].astype(np.float64)
    scale = 1 / np.sqrt((q * q).mean() + 1e-6)
    assert f"× {scale:.4g}" in panel.query_chart.titleLabel.text
    assert "RMSNorm over each head, before RoPE" in panel.heading.text
    panel.resize(1280, 800)
    panel.grab().save("/tmp/stages/qk_norm_panel.png")


def test_the_identity_line_ends_inside_the_plot(qtbot, doc):
    # An SVG export does not clip to the plot: the dashed s = s line, drawn to ±1.5c, ran past
    # the axes' top and bottom in the SVG (the window and PDF clip it).
    panel = show(qtbot, SoftmaxStagesPanel(doc))
    staged(doc, softcap=2.0, sinks=np.zeros(doc.session.heads))
    panel.refresh()
    (x0, x1), (y0, y1) = panel.curve_plot.vb.viewRange()
    xs, ys = panel.identity.getData()
    assert len(xs) == 2
    assert x0 <= xs.min() and xs.max() <= x1 and y0 <= ys.min() and ys.max() <= y1 + 1e-9
