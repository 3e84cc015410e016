"""The Controls dock's Compute group: the device and the number type torch computes in.

Which devices and dtypes torch offers is asked once torch is in (the document's first result
or failure): asking at start-up would import torch (1-3 s) before the window first paints.
Until then the lists hold the document's own device and dtype. A choice goes through
``user_actions.set_compute_options``; the lists follow the document with their signals
blocked.
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QComboBox, QGroupBox

from .. import user_actions
from ..document import SessionDocument


class ComputeBox(QGroupBox):
    """The device and dtype lists (see the module)."""

    def __init__(self, document: SessionDocument, form, parent=None):
        super().__init__("Compute", parent)
        self.document = document
        self._engine_listed = False
        self.device_combo = QComboBox()
        self.device_combo.setToolTip("Where torch computes (only devices present here are listed)")
        self.dtype_combo = QComboBox()
        self.dtype_combo.setToolTip("Number type of the computation")
        self.device_combo.currentIndexChanged.connect(self._on_device)
        self.dtype_combo.currentIndexChanged.connect(self._on_dtype)
        layout = form(self)
        layout.addRow("device", self.device_combo)
        layout.addRow("dtype", self.dtype_combo)
        # A method, not a lambda: PySide holds a lambda strongly, out of the collector's sight,
        # so the document kept this box (and through it itself) alive after its window closed.
        document.compute.failed.connect(self._on_failed)
        document.result_changed.connect(self._on_first_result)
        self.sync()
        if document.result is not None:
            self._on_first_result(document.result)

    def _on_device(self, _index: int) -> None:
        device = self.device_combo.currentData()
        if device and device != self.document.compute.device:
            self._fill_dtypes(device)
            user_actions.set_compute_options(self.document, device=device, dtype=self.dtype_combo.currentData())
            self.document.message.emit(f"Computing on {device}")

    def _on_dtype(self, _index: int) -> None:
        dtype = self.dtype_combo.currentData()
        if dtype and dtype != self.document.compute.dtype:
            user_actions.set_compute_options(self.document, dtype=dtype)

    def _on_failed(self, _message: str) -> None:
        self.sync()

    def _on_first_result(self, _result) -> None:
        """The engine has run, so torch is in: list every device and dtype it offers."""
        self.document.result_changed.disconnect(self._on_first_result)
        self._list_devices()

    def _list_devices(self) -> None:
        from ...core.compute.engine import available_devices

        self._engine_listed = True
        with QSignalBlocker(self.device_combo):
            self.device_combo.clear()
            for device in available_devices():
                self.device_combo.addItem(device, device)
        self.sync()

    def _fill_dtypes(self, device: str) -> None:
        current = self.dtype_combo.currentData() or self.document.compute.dtype
        if self._engine_listed:
            from ...core.compute.engine import supported_dtypes

            dtypes = supported_dtypes(device)
        else:
            dtypes = [self.document.compute.dtype]
        with QSignalBlocker(self.dtype_combo):
            self.dtype_combo.clear()
            for dtype in dtypes:
                self.dtype_combo.addItem(dtype, dtype)
            index = self.dtype_combo.findData(current)
            self.dtype_combo.setCurrentIndex(index if index >= 0 else 0)

    def sync(self) -> None:
        """Show the document's device and dtype."""
        if not self._engine_listed and self.document.compute.last_error is not None:
            self._list_devices()  # the first compute failed: torch is in (or says why not)
            return
        with QSignalBlocker(self.device_combo):
            index = self.device_combo.findData(self.document.compute.device)
            if index < 0:
                self.device_combo.addItem(self.document.compute.device, self.document.compute.device)
                index = self.device_combo.count() - 1
            self.device_combo.setCurrentIndex(index)
        self._fill_dtypes(self.document.compute.device)
        with QSignalBlocker(self.dtype_combo):
            index = self.dtype_combo.findData(self.document.compute.dtype)
            if index >= 0:
                self.dtype_combo.setCurrentIndex(index)
