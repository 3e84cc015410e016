"""File ▸ New / Open / Open Recent / Save / Save As, with the unsaved-changes question.

``SessionActions`` keeps which file the document belongs to and whether it is modified
(``modified_changed``, ``path_changed``), owns the autosaver, and asks the person through
methods of the window (``ask_unsaved``, ``ask_open_path``, ``ask_save_path``,
``ask_new_choice``, ``show_error``) so that tests answer them by monkeypatching the window
instead of driving a modal dialog.

What callers may rely on:
- Nothing is replaced until the replacement is known to be good: a file that fails to load
  or a preset that fails to build leaves the current session and its undo history as they
  were, and the unsaved-changes question is only asked once there is something to switch to.
- Saving is atomic (``io.session_file.save_session``); a failed save says why and returns
  False, the old file intact and the document still marked modified.
- A save stores the window's view (selected head, query and key) under the file's ``"view"``
  key; opening a file restores it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu
from shiboken6 import isValid

from ..core.errors import AttnExplorerError
from ..core.inputs.session import Scale, Session
from .autosave import Autosaver
from .settings import AppSettings

BLANK = "blank"


def blank_session() -> Session:
    """New ▸ Blank: three tokens, 2-D embeddings of zeros and identity projections, so every
    weight starts uniform and each number the user types visibly changes something."""
    eye = np.eye(2)[None]
    return Session(
        tokens=("one", "two", "three"),
        embeddings=np.zeros((3, 2)),
        w_query=eye,
        w_key=eye,
        w_value=eye,
        scale=Scale("inv_sqrt_dk"),
    )


def view_state(selection) -> dict:
    return {"head": selection.head, "query": selection.query, "key": selection.key}


class SessionActions(QObject):
    modified_changed = Signal(bool)
    path_changed = Signal(object)  # Path or None
    saved = Signal(object)  # Path

    def __init__(self, document, window, settings: AppSettings, data_dir: Path | None = None, parent=None):
        super().__init__(parent or window)
        self.document = document
        self.window = window
        self.settings = settings
        self.path: Path | None = None
        self._dirty_override = False  # restored work is unsaved although its undo stack is clean
        self._modified = False
        self.autosaver = Autosaver(document, original_path=lambda: self.path, directory=data_dir, parent=self)
        document.undo_stack.cleanChanged.connect(self._update_modified)
        document.session_changed.connect(self._on_session_changed)
        self._make_actions()

    # -- actions ---------------------------------------------------------------------------
    def _make_actions(self) -> None:
        w = self.window
        self.new_action = QAction("&New…", w, shortcut=QKeySequence.StandardKey.New,
                                  statusTip="Start a new session from a preset or blank")
        self.new_action.triggered.connect(lambda: self.new_session())
        self.open_action = QAction("&Open…", w, shortcut=QKeySequence.StandardKey.Open,
                                   statusTip="Open a session file")
        self.open_action.triggered.connect(lambda: self.open_dialog())
        self.save_action = QAction("&Save", w, shortcut=QKeySequence.StandardKey.Save,
                                   statusTip="Save the session")
        self.save_action.triggered.connect(lambda: self.save())
        self.save_as_action = QAction("Save &As…", w, shortcut=QKeySequence("Ctrl+Shift+S"),
                                      statusTip="Save the session under a new name")
        self.save_as_action.triggered.connect(lambda: self.save_as())
        self.recent_menu = QMenu("Open &Recent", w)
        self.recent_menu.aboutToShow.connect(self.rebuild_recent_menu)
        self.rebuild_recent_menu()

    def rebuild_recent_menu(self) -> None:
        menu = self.recent_menu
        menu.clear()
        recent = self.settings.recent_files()
        for i, path in enumerate(recent):
            label = f"&{i + 1} {path.name}" if i < 9 else path.name
            action = menu.addAction(label)
            action.setToolTip(str(path))
            action.setData(str(path))
            action.triggered.connect(lambda _=False, p=path: self.open_recent(p))
        if not recent:
            menu.addAction("(no recent files)").setEnabled(False)
        menu.addSeparator()
        clear = menu.addAction("Clear recent files")
        clear.setEnabled(bool(recent))
        clear.triggered.connect(self._clear_recent)

    def _clear_recent(self) -> None:
        for p in self.settings.recent_files():
            self.settings.remove_recent(p)
        self.rebuild_recent_menu()

    # -- state -----------------------------------------------------------------------------
    @property
    def modified(self) -> bool:
        return self._dirty_override or not self.document.undo_stack.isClean()

    def display_name(self) -> str:
        """What the title shows: the file name, else the real model's layer it was made from
        (model, layer, text), else the preset's name, else "untitled"."""
        if self.path is not None:
            return self.path.name
        model = getattr(self.document, "model", None)
        if model is not None:
            source = getattr(getattr(model.model, "source", None), "label", None) or "model"
            return f"{source} · layer {model.layer} · “{_short_text(model.text)}”"
        preset = self.document.session.preset
        return f"{preset.name} (preset)" if preset is not None else "untitled"

    def _update_modified(self, *_):
        if not isValid(self.document.undo_stack):
            return  # the document is being destroyed (the stack signals on its way out)
        now = self.modified
        if now != self._modified:
            self._modified = now
            self.modified_changed.emit(now)
            if now:
                self.autosaver.schedule()
            else:
                self.autosaver.discard()

    def _on_session_changed(self, _session) -> None:
        if self.modified:
            self.autosaver.schedule()

    def _set_path(self, path: Path | None) -> None:
        self.path = None if path is None else Path(path).resolve()
        self.path_changed.emit(self.path)

    def _replace(self, session: Session, path: Path | None = None, modified: bool = False, model=None) -> None:
        """Switch the document to ``session`` (the caller has already asked about unsaved work)."""
        self.autosaver.discard()
        self._dirty_override = modified
        self.document.set_session(session, model)  # restores the saved view too
        self._set_path(path)
        self._update_modified()
        if modified:
            self.autosaver.schedule()

    def adopt(self, path) -> None:
        """Record that the document's current (unmodified) session was read from ``path``
        (start-up opened it): the title and recent files follow (the document restored the
        file's saved view when it was made)."""
        self._set_path(path)
        self.settings.add_recent(self.path)
        self.settings.set_last_session(self.path)

    # -- the question ----------------------------------------------------------------------
    def confirm_discard(self) -> bool:
        """True when it is fine to replace or close the current session.

        Unmodified work needs no question. Otherwise ``window.ask_unsaved()`` answers
        "save" (save first; a failed or cancelled save means no), "discard" or "cancel".
        """
        if not self.modified:
            return True
        answer = self.window.ask_unsaved()
        if answer == "save":
            return self.save()
        return answer == "discard"

    # -- New / Open ------------------------------------------------------------------------
    def new_session(self, choice: str | None = None, params=None) -> bool:
        """New from a preset name or ``"blank"``; with no choice, ``window.ask_new_choice()``
        picks one (None = cancelled). Returns True when the document was replaced."""
        if choice is None:
            choice = self.window.ask_new_choice()
            if choice is None:
                return False
        try:
            if choice == BLANK:
                session = blank_session()
            else:
                from ..core.inputs.presets import build_preset

                session = build_preset(choice, params).session
        except AttnExplorerError as err:
            self.window.show_error("Cannot start a new session", str(err))
            return False
        if not self.confirm_discard():
            return False
        self._replace(session, path=None)
        return True

    def adopt_session(self, session: Session, model=None) -> bool:
        """Switch to a session made in memory (a real model's layer, File ▸ Open model…, with
        ``model`` its ``app.document.ModelLayer``), after the unsaved-changes question; it
        belongs to no file. It starts unmodified: the model can make it again, so moving to
        another layer asks nothing until the user edits it. Returns True when the document was
        replaced."""
        if not self.confirm_discard():
            return False
        self._replace(session, path=None, model=model)
        return True

    def open_dialog(self) -> bool:
        path = self.window.ask_open_path()
        return bool(path) and self.open_path(path)

    def open_recent(self, path: Path) -> bool:
        if not Path(path).exists():
            self.window.show_error("Cannot open recent file", f"{path} no longer exists; it is removed from the list.")
            self.settings.remove_recent(path)
            self.rebuild_recent_menu()
            return False
        return self.open_path(path)

    def open_path(self, path) -> bool:
        """Load and validate ``path``; only when that succeeds ask about unsaved work and
        switch. A bad file shows why in ``window.show_error`` and changes nothing."""
        from ..io.lesson_file import is_lesson_file
        from ..io.session_file import load_session

        path = Path(path)
        if is_lesson_file(path):  # a lesson opens like a session, and starts teaching
            return self.window.open_lesson_path(path)
        try:
            session = load_session(path)
        except (AttnExplorerError, OSError) as err:
            self.window.show_error("Cannot open session", _with_path(err, path))
            return False
        if not self.confirm_discard():
            return False
        self._replace(session, path=path)
        self.settings.add_recent(path)
        self.settings.set_last_session(path)
        return True

    def restore(self, recovery) -> None:
        """Make a recovered session current, still unsaved, belonging to its original file.

        ``recovery`` is one this window claimed (``autosaver.claim``). Its file becomes this
        window's recovery file in one rename, before anything else, so the restored work is
        in a file the next start would offer at every moment (a kill right after restoring
        loses nothing); ``_replace`` would first discard, so it is not used here."""
        self.autosaver.take_over(recovery)
        self._dirty_override = True
        self.document.set_session(recovery.session)
        self._set_path(recovery.original_path)
        self._update_modified()
        self.autosaver.schedule()

    # -- Save ------------------------------------------------------------------------------
    def save(self) -> bool:
        if self.path is None:
            return self.save_as()
        return self._write(self.path)

    def save_as(self, path=None) -> bool:
        if path is None:
            path = self.window.ask_save_path(self.path)
            if not path:
                return False
        path = Path(path)
        if not path.suffix:
            path = path.with_suffix(".json")
        return self._write(path)

    def _write(self, path: Path) -> bool:
        from ..io.session_file import save_session

        session = self.document.session
        extra = dict(session.extra)
        extra["view"] = view_state(self.document.selection.current)
        try:
            save_session(session.replace(extra=extra), path)
        except (AttnExplorerError, OSError) as err:
            self.window.show_error("Save failed", f"{_with_path(err, path)}\nThe file on disk was not changed.")
            return False
        self._dirty_override = False
        self.document.undo_stack.setClean()
        self._set_path(path)
        self._update_modified()
        self.autosaver.discard()
        self.settings.add_recent(path)
        self.settings.set_last_session(path)
        self.saved.emit(self.path)
        return True


def _with_path(err: Exception, path: Path) -> str:
    text = str(err) if not isinstance(err, OSError) else (err.strerror or str(err))
    return text if str(path) in text or path.name in text else f"{path}: {text}"


def _short_text(text: str, limit: int = 32) -> str:
    """The start of a text on one line, elided past ``limit`` characters (a title's room)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"
