"""A panel heading too long for its panel wraps onto more lines at a readable size instead
of shrinking to 6 or 7 px (sinks' weights heading and a long session's pooled heading)."""

from __future__ import annotations

import numpy as np
from ui_helpers import shown

from attnexplorer.core.inputs.stages import QKNorm
from attnexplorer.ui.panels import WeightsPanel
from attnexplorer.ui.panels.token_axis import ShrinkingLabel


def test_a_long_heading_wraps_at_a_readable_size_inside_its_panel(qtbot, doc):
    panel = shown(qtbot, WeightsPanel(doc), size=(440, 400))
    doc.edit(doc.session.replace(qk_norm=QKNorm("rms"), softcap=2.0, sinks=np.zeros(doc.session.heads)), "stages")
    assert doc.compute.wait_idle()
    panel.refresh()
    qtbot.wait(20)
    heading = panel.heading
    assert "sink" in heading.text
    assert heading.item.scale() >= ShrinkingLabel.SMALLEST
    text = heading.mapRectToScene(heading.item.mapRectToParent(heading.item.boundingRect()))
    box = heading.sceneBoundingRect()
    assert text.left() >= box.left() - 1 and text.right() <= box.right() + 1, (text, box)
    assert text.height() > 1.5 * heading.item.scale() * panel.fontMetrics().height()   # two lines at least
    # the plot starts below the heading's last line
    view = panel.views()[0].sceneBoundingRect()
    assert view.top() >= text.bottom() - 1


def test_a_heading_that_fits_stays_one_line_at_full_size(qtbot, doc):
    panel = shown(qtbot, WeightsPanel(doc), size=(900, 500))
    assert doc.compute.wait_idle()
    panel.refresh()
    qtbot.wait(20)
    assert panel.heading.item.scale() == 1.0
    assert panel.heading.item.textWidth() < 0   # not wrapped
