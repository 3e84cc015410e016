"""The window's open path against hostile files (issue 11, items 7, 8, 12, 13): it accepts and
refuses exactly what ``load_session`` (and so the CLI) does, and says why at once."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.core.inputs.presets import build_preset, list_presets
from attnexplorer.core.inputs.session import Session
from attnexplorer.io.session_file import load_session, save_session, session_to_dict
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings


class Answers:
    """Scripted answers to the window's questions, and a log of its errors and warnings."""

    def __init__(self, window):
        self.log = []
        window.ask_unsaved = lambda: "discard"
        window.ask_restore = lambda recovery: False
        window.show_error = lambda title, text: self.log.append(("error", text))
        window.show_warning = lambda title, text: self.log.append(("warning", text))


def make_window(qtbot, session):
    doc = SessionDocument(session)
    window = MainWindow(doc, AppSettings())
    window.answers = Answers(window)
    qtbot.addWidget(window)
    return window


@pytest.fixture
def win(qtbot, isolated):
    window = make_window(qtbot, build_preset("pronoun").session)
    yield window
    window.actions.autosaver.discard()
    window.document.shutdown()


def overflowing() -> Session:
    return Session(tokens=("a", "b"), embeddings=np.full((2, 2), 1e30), w_query=np.ones((1, 2, 2)),
                   w_key=np.ones((1, 2, 2)), w_value=np.ones((1, 2, 2)))


# -- item 7: the window opens every file the core accepts, and refuses the rest alike ---------

hostile_value = (st.integers(-2**70, 2**70) | st.sampled_from([0, 1, 8, 4096, 4097, 2**31 - 1, 2**31, 2**63])
                 | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e308, -0.0, 1e-300, 0.004])
                 | st.booleans() | st.none() | st.text(max_size=4) | st.lists(st.integers(), max_size=2))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_file_the_core_accepts_opens_in_the_window(win, isolated, data):
    preset = data.draw(st.sampled_from(list_presets()))
    names = [p.name for p in preset.params] + ["bogus"]
    params = data.draw(st.dictionaries(st.sampled_from(names), hostile_value, max_size=3))
    obj = session_to_dict(build_preset("pronoun").session)
    obj["preset"] = {"name": preset.name, "params": params}
    path = isolated / "hostile.json"
    path.write_text(json.dumps(obj))
    try:
        expected = load_session(path)
    except AttnExplorerError as err:
        expected, message = None, str(err)
    before = len(win.answers.log)
    opened = win.actions.open_path(path)
    new = win.answers.log[before:]
    if expected is None:
        assert not opened and new == [("error", message)]
    else:
        assert opened and new == [], new
        assert win.document.session == expected
        for name, widget in win.controls.param_widgets.items():
            if name in expected.preset.params:
                assert widget.value() == pytest.approx(expected.preset.params[name])


def test_the_reported_crashes_are_refused_in_both(win, isolated):
    for params in ({"N": "abc"}, {"N": None}, {"N": [1]}, {"N": 1e308}, {"seed": 3000000000}, {"seed": 2**63}):
        obj = session_to_dict(build_preset("sine").session)
        obj["preset"]["params"] = params
        path = isolated / "bad.json"
        path.write_text(json.dumps(obj))
        with pytest.raises(AttnExplorerError) as err:
            load_session(path)
        assert not win.actions.open_path(path)
        assert win.answers.log[-1] == ("error", str(err.value))
    text = re.sub(r'"N": \d+', '"N": 1e400', json.dumps(session_to_dict(build_preset("sine").session)))
    assert "1e400" in text
    (isolated / "bad.json").write_text(text)
    assert not win.actions.open_path(isolated / "bad.json")


# -- item 8: a session that overflows says so at once ------------------------------------------

def test_opening_an_overflowing_session_says_why_at_once(win, isolated, qtbot):
    path = isolated / "big.json"
    save_session(overflowing(), path)
    assert win.actions.open_path(path)
    qtbot.wait(20)
    assert any(kind == "warning" and "too large for float32" in text for kind, text in win.answers.log)
    assert "too large for float32" in win.statusBar().currentMessage()


def test_starting_on_an_overflowing_session_says_why_at_once(qtbot, isolated):
    window = make_window(qtbot, overflowing())
    try:
        qtbot.waitUntil(lambda: any("too large for float32" in text for _, text in window.answers.log), timeout=2000)
        assert "too large for float32" in window.statusBar().currentMessage()
    finally:
        window.document.shutdown()


# -- item 12: special files in the window's Open ------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_open_refuses_a_named_pipe_without_blocking(win, isolated):
    fifo = isolated / "pipe.json"
    os.mkfifo(fifo)
    before = win.document.session
    assert not win.actions.open_path(fifo)
    assert "named pipe" in win.answers.log[-1][1]
    assert win.document.session is before


# -- item 13: control characters typed into the window are refused with a message ---------------

def test_control_characters_are_refused_in_the_sentence_box_and_the_token_table(win):
    doc = win.document
    before = doc.session
    messages = []
    doc.message.connect(messages.append)
    from PySide6.QtWidgets import QLineEdit

    box = next(w for w in win.findChildren(QLineEdit) if w.placeholderText().startswith("Type a sentence"))
    box.setText("The \x01dog")
    box.returnPressed.emit()
    assert doc.session is before
    assert messages and "control character" in messages[-1]
    # The token table's rename goes through the same edit function, refused alike.
    from attnexplorer.core.editing.edits import set_token

    with pytest.raises(AttnExplorerError, match=r"tokens\[0\].*control character U\+0000"):
        set_token(before, 0, "a\x00b")
