"""The open document, without Qt: the current session, its undo history, its selection and
its compute.

Every edit goes through ``edit(new_session, text)`` (one undo step, ``history.py``). Beside
the session and its history the document holds two parts of its own:

- ``selection`` (``selection.CurrentSelection``): the selected head, query and key, kept
  inside the session as it changes;
- ``compute`` (``compute.DocumentCompute``): the results of the session, computed on a worker
  or inline, stale ones dropped; ``compute.result`` carries the session it was computed from,
  which may be one edit behind ``session`` while a big compute runs.

A document may be of a real model (``model``, a ``ModelLayer``: the model, its run on a text,
and the layer the session holds, File ▸ Open model…); edits keep it (the tables then hold
that layer, edited), a new session replaces it (``set_session``).

Signals (plain Python, ``psygnal``): ``session_changed(Session)`` after every edit, undo or
redo (and ``set_session``); ``model_changed(ModelLayer | None)``; ``message(str)``, a short
status text (a refused edit says why).

``post`` is how work reaches the app's thread at its next turn, from any thread (the Qt
adapter posts into the event loop; ``jobs.CallQueue`` is the Qt-free one). Bursts of edits (a
dragged slider) are coalesced with ``edit_later``: only the newest is applied, at the next
turn; ``flush()`` applies it now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from psygnal import Signal

from ..core.inputs.session import Session
from ..core.editing.session_change import SessionChange
from .compute import DocumentCompute
from .history import UNDO_BYTES, UNDO_STEPS, UndoHistory
from .jobs import Post
from .selection import CurrentSelection


@dataclass(frozen=True, eq=False)
class ModelLayer:
    """What a document of a real model holds beside its session: the model opened
    (``models.LoadedModel``), its run on a text (``models.ModelRun``: the text, its tokens, the
    model's own attention) and the layer of that run the session was made from."""

    model: Any
    run: Any
    layer: int

    @property
    def text(self) -> str:
        return self.run.text


class Document:
    session_changed = Signal(object)
    model_changed = Signal(object)
    message = Signal(str)

    def __init__(self, session: Session, post: Post, undo_steps: int = UNDO_STEPS, undo_bytes: int = UNDO_BYTES,
                 compute: bool = True):
        """``compute=False``: no compute until ``compute.request()`` (the window starts the first
        one once it has painted, so that torch loads after that)."""
        self._session = session
        self._model: ModelLayer | None = None
        self._post = post
        self._posted: Callable[[], None] | None = None
        self._flush_posted = False
        self.history = UndoHistory(lambda: self._session, self._set, undo_steps, undo_bytes)
        self.selection = CurrentSelection(session)
        self.compute = DocumentCompute(self, post, start=compute)

    # -- reading ----------------------------------------------------------------------
    @property
    def session(self) -> Session:
        return self._session

    @property
    def model(self) -> ModelLayer | None:
        """The real model this document's session is a layer of, or None."""
        return self._model

    @property
    def result(self):
        """The newest result (it may lag the session by one edit while a big one runs)."""
        return self.compute.result

    # -- changing -----------------------------------------------------------------------
    def edit(self, session: Session, text: str, merge_key=None) -> None:
        """Make ``session`` current as one undo step named ``text``.

        Consecutive edits with the same non-None ``merge_key`` (e.g. ``("cell", "W_q", 0, 1, 2)``)
        merge into one step, so typing into one cell again and again is one undo.
        """
        if self._posted is not None:
            self.flush()  # a coalesced edit posted earlier goes first
        if session == self._session:
            return
        self.history.push(self._session, session, text, merge_key)

    def live_edit(self, text: str) -> "LiveEdit":
        """Begin an edit shown as it happens (see ``LiveEdit``): one undo step named ``text``."""
        if self._posted is not None:
            self.flush()
        return LiveEdit(self, text)

    def edit_later(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (which makes an edit) at the next turn of the app's loop, replacing
        one posted before and not yet run: while a slider is dragged faster than frames are
        drawn, only the newest value is computed and drawn. ``flush()`` runs it now."""
        self._posted = apply
        if not self._flush_posted:
            self._flush_posted = True
            self._post(self._run_posted)

    def flush(self) -> None:
        """Apply the edit posted with ``edit_later`` now, if any (a slider's release)."""
        apply, self._posted = self._posted, None
        if apply is not None:
            apply()

    def set_session(self, session: Session, model: ModelLayer | None = None) -> None:
        """Replace the document (New, Open, a preset; ``model``: a real model's layer): clears
        undo history. The model is in place before the session's first result comes."""
        self.history.clear()
        if model is not self._model:
            self._model = model
            self.model_changed.emit(model)
        self._set(session)
        self.selection.show_view(session)
        self.history.set_clean()

    def refuse(self, reason: str) -> None:
        """Report a refused edit; nothing changes."""
        self.message.emit(reason)

    def shutdown(self) -> None:
        """Stop the compute thread (idempotent)."""
        self.compute.shutdown()

    def _run_posted(self) -> None:
        self._flush_posted = False
        self.flush()

    def _set(self, session: Session, background: bool = False) -> None:
        """The one place a session becomes current."""
        self._session = session
        self.session_changed.emit(session)
        self.selection.follow(session)
        self.compute.request(background)


class LiveEdit:
    """An edit shown while it happens (a fit): every ``show`` makes the new session current
    without an undo step of its own, and the whole edit is ONE undo step, from the session
    before ``Document.live_edit`` to the last one shown.

    The step is pushed when the live edit begins, so undo, redo and other edits stay ordinary
    history business. ``attached`` turns False as soon as anything else changes the session
    (an edit, an undo, a new file): from then on ``show`` does nothing, and the step keeps what
    was shown last.
    """

    def __init__(self, doc: Document, text: str):
        self._doc = doc
        self.before = doc.session
        self._step = doc.history.push(self.before, self.before, text, None)
        self._index = doc.history.index()
        self._shown = doc.session

    @property
    def attached(self) -> bool:
        doc = self._doc
        return doc.session is self._shown and doc.history.index() == self._index

    def show(self, session: Session) -> bool:
        """Make ``session`` current as part of this step; False (nothing done) once detached."""
        if not self.attached:
            return False
        # The step records the change from before the live edit to what is shown now.
        self._step.change = SessionChange(self.before, session)
        self._shown = session
        # Computed on the worker: a live edit (a fit) keeps a core busy, and its frames come
        # faster than an inline compute leaves the window time to draw.
        self._doc._set(session, background=True)
        return True
