"""An export never pairs one edit's matrices with another edit's session.

The compute is made slow (the worker blocks until released) and the user edits meanwhile,
so the published result is one edit behind the session when the export runs.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.io.session_file import load_session, save_session
from attnexplorer.ui.document import SessionDocument


@pytest.fixture
def slow_document(qtbot, monkeypatch):
    """A document whose worker-thread computes wait for ``release``; inline ones run as usual."""
    import attnexplorer.app.compute as runner_module

    release = threading.Event()
    started = threading.Event()
    real = runner_module.compute_any

    def slow(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "INLINE_CELLS", 0)  # every compute goes to the worker
    monkeypatch.setattr(runner_module, "compute_any", slow)
    doc = SessionDocument(build_preset("dessert").session)
    release.set()
    assert doc.compute.wait_idle()
    release.clear()
    yield doc, release, started
    release.set()
    doc.compute.wait_idle()
    doc.shutdown()


def _edit_cell(doc, value):
    x = doc.session.embeddings.copy()
    x[1, 2] = value
    doc.edit(doc.session.replace(embeddings=x), "edit X")


def test_matrix_export_during_a_slow_compute_matches_its_own_session(slow_document, tmp_path, qtbot):
    from attnexplorer.ui.exports.matrix_export import ALL, export_matrices

    doc, release, started = slow_document
    before = doc.result
    _edit_cell(doc, 7.25)
    assert started.wait(10)  # the edit's compute is now stuck in the worker
    assert doc.result is before and doc.result.session is not doc.session  # one edit behind

    (path,) = export_matrices(doc, ALL, "npz", tmp_path / "all.npz")
    save_session(doc.session, tmp_path / "session.json")  # what the user sees, saved

    expected = compute(load_session(tmp_path / "session.json"))
    with np.load(path, allow_pickle=False) as npz:
        assert npz["X"][1, 2] == 7.25
        for name in ("X", "Q", "K", "V", "scores", "weights", "output"):
            np.testing.assert_allclose(npz[name], getattr(expected, name) if name != "X" else expected.session.embeddings,
                                       rtol=1e-6, err_msg=name)
    assert doc.result is before  # exporting published nothing and did not wait for the worker


def test_full_result_never_waits_for_the_worker(slow_document):
    doc, release, started = slow_document
    _edit_cell(doc, -3.5)
    assert started.wait(10)
    result = doc.compute.full_result()  # the worker is still blocked: this must not wait for it
    assert result.session is doc.session
    assert result.session.embeddings[1, 2] == -3.5


def test_complete_publishes_the_current_session_and_drops_the_stale_compute(slow_document, qtbot):
    doc, release, started = slow_document
    _edit_cell(doc, 2.0)
    assert started.wait(10)
    published = doc.compute.complete()
    assert doc.result is published and published.session is doc.session
    release.set()
    assert doc.compute.wait_idle()
    qtbot.wait(10)
    assert doc.result.session is doc.session
