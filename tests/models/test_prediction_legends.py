"""The Predictions and Logit lens panels' legends name only what is drawn: no "with the
interventions" entry (bars, dock key, lens curves) while there are none, and no picked-token
curves while no token is picked; both appear with an ablation and a target."""

import pytest

from attnexplorer.models import load_model
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.ui.model.predictions import LogitLensPanel, PredictionsPanel

TEXT = "The dog fetched the ball and she was happy"


@pytest.fixture(scope="module")
def results(tiny_gpt2_lm):
    loaded = load_model(str(tiny_gpt2_lm))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    plain = behaviour.predict(top=10, lens=True)
    ablated = behaviour.predict(Interventions().with_ablation(0, 1, "zero"), top=10, target=" dog", lens=True)
    return plain, ablated


def _names(legend):
    return [label.text for _sample, label in legend.items]


def test_the_bars_legend_and_the_dock_key_follow_the_interventions(qtbot, results):
    plain, ablated = results
    panel, dock = PredictionsPanel(), PredictionsPanel(tables_row=True)
    for widget in (panel, dock):
        qtbot.addWidget(widget)
    for widget in (panel, dock):
        widget.show_result(plain)
    assert _names(panel.legend) == ["unedited"]
    assert "unedited" in dock.key.text() and "interventions" not in dock.key.text()
    for widget in (panel, dock):
        widget.show_result(ablated)
    assert _names(panel.legend) == ["unedited", "with the interventions"]
    assert "with the interventions" in dock.key.text()
    panel.show_result(plain)   # the interventions undone: the entry goes again
    assert _names(panel.legend) == ["unedited"]


def test_the_lens_legend_lists_the_curves_drawn_over_whole_layers(qtbot, results):
    plain, ablated = results
    lens = LogitLensPanel()
    qtbot.addWidget(lens)
    lens.show_result(plain)
    assert _names(lens.legend) == ["top token, unedited"]
    # the layer axis counts whole layers (a 3-layer model's read 0, 0.5, 1, 1.5, 2)
    assert lens.plot.getAxis("bottom")._tickLevels == [[(0.0, "0"), (1.0, "1"), (2.0, "2")]]
    lens.show_result(ablated)
    assert _names(lens.legend) == ["top token, unedited", "top token, intervened", "picked token, unedited",
                                   "picked token, intervened"]
