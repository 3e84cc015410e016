"""The window builds a panel's plots only when the panel is first needed: on screen, exported,
or read (``Panel.build``/``ensure_built``), so its first paint does not wait on the ten panels
it does not show."""

from __future__ import annotations

import numpy as np
import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.exports import figures
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings

# What the default layout shows of a pronoun session: the weights and the scaled scores in
# front of their tab rows, the selected query's bars and the explanation beneath them.
ON_SCREEN = {"weights", "scaled_scores", "query", "explain"}


@pytest.fixture
def window(qtbot, isolated):
    doc = SessionDocument(build_preset("pronoun").session)
    win = MainWindow(doc, AppSettings())
    win.ask_unsaved = lambda: "discard"
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    qtbot.waitUntil(lambda: all(not p.is_stale for p in win.panels if p.kind in ON_SCREEN))
    yield win
    win.actions.autosaver.discard()
    doc.shutdown()


def _panel(window, kind):
    return next(p for p in window.panels if p.kind == kind)


def test_only_the_panels_on_screen_are_built(window):
    built = {p.kind for p in window.panels if p.is_built}
    # A session without RoPE, ALiBi, QK-norm, a cap or sinks, a 1-D signal: none of those
    # panels is made, nor the ones tabbed away behind the weights.
    assert built == ON_SCREEN | {"explain"}
    for kind in ("rope", "alibi", "qk_norm", "softmax_stages", "signal", "qkv", "scores", "output"):
        assert not window.docks[kind].widget().is_built


def test_a_tab_brought_forward_builds_and_draws_its_panel(window, qtbot):
    qkv = _panel(window, "qkv")
    assert not qkv.is_built
    window.docks["qkv"].raise_()
    qtbot.waitUntil(lambda: qkv.is_built and not qkv.is_stale)
    assert qkv.q_view.image.image is not None
    assert np.allclose(qkv.q_view.image.image, window.document.result.Q[0])


def test_a_setting_chosen_before_the_build_reaches_the_built_panel(window, qtbot):
    window.set_number_format("fixed2")
    scores = _panel(window, "scores")
    assert not scores.is_built  # the menu did not build it
    window.docks["scores"].raise_()
    qtbot.waitUntil(lambda: scores.is_built and not scores.is_stale)
    assert scores.view.number_format == "fixed2"
    assert _panel(window, "weights").view.number_format == "fixed2"


def test_an_unbuilt_panel_exports_its_figure(window):
    output = _panel(window, "output")
    assert not output.is_built
    image = figures.render_panel(output)
    assert output.is_built and not output.is_stale
    pixels = np.frombuffer(image.constBits(), np.uint8)
    assert image.width() > 100 and len(np.unique(pixels)) > 20  # a drawn figure, not a blank page


def test_reading_a_plot_builds_the_panel_first(window):
    output = _panel(window, "output")
    assert not output.is_built
    assert output.head_view is not None and output.is_built
    with pytest.raises(AttributeError):
        output.no_such_thing  # noqa: B018 - a name build() does not make still fails
