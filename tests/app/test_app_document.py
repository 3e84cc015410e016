"""The document without Qt: undo history, edit coalescing, selection and compute scheduling.

Everything here runs with ``jobs.CallQueue`` as the app's loop; ``test_app_jobs`` checks
in a fresh interpreter that none of it imports Qt.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from strategies import small_session

import attnexplorer.app.compute as compute_module
from attnexplorer.app.document import Document
from attnexplorer.app.jobs import CallQueue
from attnexplorer.app.selection import Selection
from attnexplorer.core.compute.engine import INTERMEDIATES
from attnexplorer.core.inputs.presets import build_preset


@pytest.fixture
def loop():
    return CallQueue()


@pytest.fixture
def doc(loop):
    d = Document(small_session(), loop.post)
    yield d
    d.shutdown()


def cell(session, value, row=0, col=0):
    x = session.embeddings.copy()
    x[row, col] = value
    return session.replace(embeddings=x)


# -- undo -------------------------------------------------------------------------------------
def test_edits_undo_and_redo_through_the_history(doc):
    start = doc.session
    seen = []
    doc.session_changed.connect(seen.append)
    one = cell(start, 1.0)
    two = cell(one, 2.0, 1, 1)
    doc.edit(one, "first")
    doc.edit(two, "second")
    history = doc.history
    assert (history.count(), history.index(), history.undo_text()) == (2, 2, "second")
    history.undo()
    assert doc.session == one and history.redo_text() == "second"
    history.undo()
    assert doc.session == start and not history.can_undo()
    history.redo()
    history.redo()
    assert doc.session == two and seen == [one, two, one, start, one, two]
    doc.edit(two, "no change")  # the same session: no step
    assert history.count() == 2


def test_a_new_edit_drops_the_steps_to_redo(doc):
    start = doc.session
    doc.edit(cell(start, 1.0), "first")
    doc.history.undo()
    doc.edit(cell(start, 5.0), "other")
    assert doc.history.count() == 1 and not doc.history.can_redo() and doc.history.undo_text() == "other"


def test_edits_with_one_merge_key_are_one_step_but_not_across_a_save(doc):
    start = doc.session
    for value in (1.0, 2.0, 3.0):
        doc.edit(cell(start, value), f"cell = {value:g}", merge_key=("cell", 0, 0))
    assert doc.history.count() == 1 and doc.history.undo_text() == "cell = 3"
    doc.history.set_clean()
    doc.edit(cell(start, 4.0), "cell = 4", merge_key=("cell", 0, 0))
    assert doc.history.count() == 2  # the saved state stays reachable
    doc.history.undo()
    assert doc.session == cell(start, 3.0) and doc.history.is_clean()
    doc.history.undo()
    assert doc.session == start


def test_the_clean_state_is_reported_when_it_flips(doc):
    flips = []
    doc.history.clean_changed.connect(flips.append)
    doc.edit(cell(doc.session, 1.0), "edit")
    doc.history.undo()
    doc.history.redo()
    doc.history.set_clean()
    assert flips == [False, True, False, True]


def test_the_history_is_bounded_by_steps(loop):
    doc = Document(small_session(), loop.post, undo_steps=3)
    try:
        for k in range(5):
            doc.edit(cell(doc.session, float(k + 1)), f"edit {k}")
        assert doc.history.count() == 3 and [doc.history.text(i) for i in range(3)] == ["edit 2", "edit 3", "edit 4"]
        for _ in range(3):
            doc.history.undo()
        assert doc.session.embeddings[0, 0] == 2.0 and not doc.history.can_undo()
    finally:
        doc.shutdown()


def test_the_history_forgets_the_oldest_steps_beyond_its_bytes(loop):
    start = small_session()
    doc = Document(start, loop.post, undo_bytes=1)
    try:
        for k in range(3):
            doc.edit(cell(doc.session, float(k + 1), k, k), f"edit {k}")
        # Only the newest step keeps its record; the older ones are forgotten, never wrong.
        assert [doc.history.steps[i].change is None for i in range(3)] == [True, True, False]
        assert doc.history.text(0).endswith("(beyond the undo history's memory)")
        for _ in range(3):
            doc.history.undo()
        assert doc.session == cell(cell(start, 1.0, 0, 0), 2.0, 1, 1) and not doc.history.can_undo()
        doc.history.redo()
        assert doc.session.embeddings[2, 2] == 3.0
    finally:
        doc.shutdown()


def test_a_live_edit_is_one_step_and_detaches_when_something_else_changes(doc):
    start = doc.session
    live = doc.live_edit("Fit")
    assert live.show(cell(start, 1.0)) and live.show(cell(start, 2.0))
    assert doc.history.count() == 1 and doc.session == cell(start, 2.0)
    doc.edit(cell(doc.session, 9.0, 1, 1), "other")
    assert not live.attached and not live.show(cell(start, 3.0))
    doc.history.undo()
    doc.history.undo()
    assert doc.session == start
    doc.history.redo()
    assert doc.session == cell(start, 2.0)


# -- coalescing -------------------------------------------------------------------------------
def test_edits_posted_later_coalesce_to_the_newest(doc, loop):
    start = doc.session
    for value in (1.0, 2.0, 3.0):
        doc.edit_later(lambda v=value: doc.edit(cell(start, v), f"cell = {v:g}", merge_key="drag"))
    assert doc.session == start  # nothing until the loop turns
    loop.run_pending()
    assert doc.session == cell(start, 3.0) and doc.history.count() == 1


def test_flush_applies_the_posted_edit_now_and_an_edit_applies_it_first(doc, loop):
    start = doc.session
    doc.edit_later(lambda: doc.edit(cell(start, 1.0), "posted"))
    doc.flush()
    assert doc.session == cell(start, 1.0)
    doc.edit_later(lambda: doc.edit(cell(doc.session, 2.0, 1, 1), "posted again"))
    doc.edit(cell(doc.session, 3.0, 2, 2), "typed")
    assert [doc.history.text(i) for i in range(3)] == ["posted", "posted again", "typed"]
    loop.run_pending()  # the posted call found nothing left to do
    assert doc.history.count() == 3


# -- selection --------------------------------------------------------------------------------
def test_the_selection_follows_the_session_and_says_when_it_moves(doc):
    moves = []
    doc.selection.changed.connect(moves.append)
    doc.selection.set(head=1, query=4, key=3)
    doc.selection.set(head=1)  # no move: no signal
    assert moves == [Selection(1, 4, 3)]
    smaller = small_session(tokens=("a", "b", "c"))
    doc.edit(smaller, "fewer tokens")
    assert doc.selection.current == Selection(1, 2, 2)
    doc.selection.set(head=9, query=-3, key=None)
    assert doc.selection.current == Selection(1, 0, None)


def test_a_new_session_opens_on_its_view_and_clears_the_history(doc):
    doc.edit(cell(doc.session, 1.0), "edit")
    viewed = small_session().replace(extra={"view": {"head": 1, "query": 3, "key": 2}})
    doc.set_session(viewed)
    assert doc.history.count() == 0 and doc.history.is_clean()
    assert doc.selection.current == Selection(1, 3, 2)


# -- compute scheduling -----------------------------------------------------------------------
def test_a_small_session_is_computed_inline_and_its_result_carries_it(doc):
    edited = cell(doc.session, 1.5)
    doc.edit(edited, "edit")
    result = doc.compute.result
    assert result.session is edited and doc.compute.current_result() is result and doc.compute.idle
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, rtol=1e-5)


def test_a_newer_request_supersedes_one_in_flight(loop, monkeypatch):
    release, started = threading.Event(), threading.Event()
    real = compute_module.compute_any
    computed = []

    def slow(session, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            release.wait(30)
        computed.append(session)
        return real(session, **kwargs)

    monkeypatch.setattr(compute_module, "INLINE_CELLS", 0)  # every compute goes to the worker
    monkeypatch.setattr(compute_module, "compute_any", slow)
    doc = Document(small_session(), loop.post)
    try:
        results, settled = [], []
        doc.compute.result_changed.connect(results.append)
        doc.compute.settled.connect(lambda: settled.append(True))
        assert started.wait(10)
        first = cell(doc.session, 1.0)
        second = cell(doc.session, 2.0)
        doc.edit(first, "first")
        doc.edit(second, "second")
        release.set()
        assert loop.run_until(lambda: doc.compute.idle)
        # The opening compute ran and was dropped; "first" never ran (superseded while it
        # waited); only the newest result was published, carrying its session.
        assert [r.session for r in results] == [second] and first not in computed
        assert settled == [True] and doc.result.session is second
    finally:
        doc.shutdown()


def test_a_refused_session_says_why_and_keeps_no_result(loop):
    from attnexplorer.core.errors import AttnExplorerError

    doc = Document(small_session(), loop.post)
    try:
        failures = []
        doc.compute.failed.connect(failures.append)

        def refuse(*_args, **_kwargs):
            raise AttnExplorerError("no: the session is refused")

        original = compute_module.compute_any
        compute_module.compute_any = refuse
        try:
            doc.edit(cell(doc.session, 1.0), "edit")
        finally:
            compute_module.compute_any = original
        assert failures == ["no: the session is refused"] and doc.compute.last_error == failures[0]
        assert doc.compute.current_result() is None
    finally:
        doc.shutdown()


def test_a_large_session_computes_only_what_is_needed_and_more_on_request(loop, monkeypatch):
    monkeypatch.setattr(compute_module, "LARGE_CELLS", 0)  # every session counts as large
    doc = Document(build_preset("dessert").session, loop.post)
    try:
        doc.compute.set_needs({"weights"})
        assert doc.compute.result is None  # the first compute waits a turn for the needs
        assert loop.run_until(lambda: doc.compute.idle and doc.compute.result is not None)
        assert doc.result.weights is not None and doc.result.scores is None
        doc.compute.set_needs({"weights", "scores"})  # a panel came on screen
        assert loop.run_until(lambda: doc.compute.idle and doc.result.scores is not None)
        full = doc.compute.full_result()  # an export gets everything, computed now
        assert full.session is doc.session and all(getattr(full, name) is not None for name in INTERMEDIATES)
    finally:
        doc.shutdown()


def test_a_document_of_a_model_keeps_it_through_edits_and_a_new_session_drops_it(doc):
    from attnexplorer.app.document import ModelLayer

    class Run:
        text = "the dog"

    changes = []
    doc.model_changed.connect(changes.append)
    layer_session = small_session()
    opened = ModelLayer(model="a model", run=Run(), layer=2)
    results = []
    doc.compute.result_changed.connect(lambda r: results.append(doc.model))
    doc.set_session(layer_session, opened)
    assert doc.model is opened and opened.text == "the dog"
    assert results == [opened]  # the model was in place when the layer's first result came
    doc.edit(cell(doc.session, 4.0), "edit the layer")
    assert doc.model is opened
    doc.set_session(small_session())  # File ▸ New, Open: a document of no model
    assert doc.model is None and changes == [opened, None]
