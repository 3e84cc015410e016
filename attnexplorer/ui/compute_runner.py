"""The compute of a document, for widgets: ``app.compute.DocumentCompute`` with Qt signals.

The scheduling (inline or on the worker, newer requests superseding older ones, what is kept,
the fall-back to the CPU) is ``app/compute.py``'s, Qt-free and tested without Qt; this adapter
re-emits its answers as Qt signals, so a panel's connection dies with the panel, and waits
for it in Qt's event loop (``wait_idle``).

Signals: ``result_changed(AttentionResult)``, ``failed(str)``, ``progress(float)`` and
``overview_progress(session, {matrix: Pooled})`` while a long compute runs, ``settled()`` when
nothing is computing or waiting any more.
"""

from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import QObject, Signal

from ..app.compute import DocumentCompute as _Compute
from ..core.compute.engine import AttentionResult
from ..core.inputs.session import Session
from .gui_thread import wait_for


class DocumentCompute(QObject):
    """A Qt face on ``app.compute.DocumentCompute`` (``state``); see that class for what each
    method does."""

    result_changed = Signal(object)
    failed = Signal(str)
    progress = Signal(float)
    overview_progress = Signal(object, object)
    settled = Signal()

    def __init__(self, state: _Compute, parent=None):
        super().__init__(parent)
        self.state = state
        state.result_changed.connect(self._on_result)
        state.failed.connect(self._on_failed)
        state.settled.connect(self._on_settled)
        state.runner.progress.connect(self._on_progress)
        state.runner.overview_progress.connect(self._on_overview_progress)

    # -- reading ----------------------------------------------------------------------
    @property
    def result(self) -> AttentionResult | None:
        return self.state.result

    @property
    def computing(self) -> bool:
        return self.state.computing

    @property
    def idle(self) -> bool:
        return self.state.idle

    @property
    def device(self) -> str:
        return self.state.device

    @property
    def dtype(self) -> str:
        return self.state.dtype

    @property
    def pool(self) -> str:
        return self.state.pool

    @property
    def needs(self) -> frozenset[str] | None:
        return self.state.needs

    @property
    def last_compute_ms(self) -> float:
        return self.state.last_compute_ms

    @property
    def last_error(self) -> str | None:
        return self.state.last_error

    @property
    def worker_thread(self):
        """The compute's worker thread (None until a compute has gone to the worker)."""
        return self.state.runner.jobs.thread

    def keep_for(self, session: Session | None = None) -> tuple[str, ...] | None:
        return self.state.keep_for(session)

    def current_result(self) -> AttentionResult | None:
        return self.state.current_result()

    def full_result(self) -> AttentionResult:
        return self.state.full_result()

    def complete(self) -> AttentionResult:
        return self.state.complete()

    # -- changing -----------------------------------------------------------------------
    def set_needs(self, needs: Iterable[str] | None) -> None:
        self.state.set_needs(needs)

    def set_options(self, device: str | None = None, dtype: str | None = None) -> None:
        self.state.set_options(device, dtype)

    def set_pool(self, pool: str) -> None:
        self.state.set_pool(pool)

    def request(self, background: bool = False) -> None:
        self.state.request(background)

    def publish(self, result: AttentionResult) -> None:
        self.state.publish(result)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Apply what is posted (an edit from ``edit_later``, a recompute), then run Qt's event
        loop until the compute has ``settled``; False when ``timeout_s`` passes first (the
        bench, closing, tests)."""
        self.state.settle()
        return wait_for(self.settled, lambda: self.state.idle, timeout_s)

    def shutdown(self) -> None:
        self.state.shutdown()

    # -- relays -----------------------------------------------------------------------
    def _on_result(self, result) -> None:
        self.result_changed.emit(result)

    def _on_failed(self, error: str) -> None:
        self.failed.emit(error)

    def _on_settled(self) -> None:
        self.settled.emit()

    def _on_progress(self, fraction: float) -> None:
        self.progress.emit(fraction)

    def _on_overview_progress(self, session, overviews) -> None:
        self.overview_progress.emit(session, overviews)
