"""A long session in the window: computed by the streamed path (core/long), never n × n."""

import numpy as np
import pytest
from ui_helpers import close_window, open_window

from attnexplorer.core.engine import compute
from attnexplorer.core.long import result as long_result
from attnexplorer.core.presets import build_preset
from attnexplorer.core.session import Mask


@pytest.fixture
def long_window(qtbot, monkeypatch):
    # Every session counts as long: the streamed path at a size the tests can compare densely.
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    session = build_preset("random", {"n": 40, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    session = session.replace(mask=Mask("causal"))
    document, window = open_window(session)
    assert document.wait_idle()
    yield document, window
    close_window(document, window)


def test_a_long_session_is_computed_streamed_in_the_window(long_window):
    document, _window = long_window
    result = document.result
    assert result.streamed is not None and result.weights is None and result.scores is None
    dense = compute(document.session)
    np.testing.assert_allclose(result.head_outputs, dense.head_outputs, rtol=1e-6, atol=1e-6)
