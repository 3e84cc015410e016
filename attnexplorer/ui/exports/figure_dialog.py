"""The "Export figure…" dialog and the panel context-menu entry that opens it.

``FigureExportDialog(panels, parent, current=panel)`` lets the user pick one panel or the
whole dashboard, the format (PNG, SVG, PDF), the PNG size (a scale factor, or a width and
height in pixels) and the file. It is driven through plain widgets and ``export()`` so tests
(and the main window) can use it without a file chooser: set ``path_edit`` and call
``export()``. A failure (unwritable folder, bad size) is shown in the dialog itself and
leaves no file behind; the dialog stays open so the user can fix it.

``install_export_menu(panel, parent_window, panels)`` adds "Export figure…" to the panel's
context menu (and replaces pyqtgraph's own "Export..." entry in the panel's plot menus, so
there is one way to export and it is ours).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pyqtgraph as pg
from PySide6.QtCore import QStandardPaths, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ...core.errors import AttnExplorerError
from . import figures

DASHBOARD = "dashboard"
FORMAT_NAMES = {"png": "PNG image", "svg": "SVG vector drawing", "pdf": "PDF document"}
ACTION_TEXT = "Export figure…"

# The folder of the last successful export in this run: the next export starts there.
_last_folder: Path | None = None


def _default_folder() -> Path:
    if _last_folder is not None and _last_folder.is_dir():
        return _last_folder
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    if pictures and Path(pictures).is_dir():
        return Path(pictures)
    return Path.home()


def _memory(parent) -> dict:
    """The window's memory of this dialog's last choice (each window its own)."""
    if parent is None:
        return {}
    memory = getattr(parent, "_figure_export_memory", None)
    if memory is None:
        memory = {}
        parent._figure_export_memory = memory
    return memory


class FigureExportDialog(QDialog):
    """Export one panel or the dashboard. ``exported(Path)`` is emitted after a success."""

    exported = Signal(object)

    def __init__(self, panels: Sequence, parent: QWidget | None = None, *, current=None,
                 title: str | None = None):
        super().__init__(parent)
        self.setWindowTitle("Export figure")
        self.panels = figures.exportable(panels)
        self.dashboard_title = title
        self.last_path: Path | None = None

        # The window remembers the last export's figure, format and selection choice.
        self._memory = _memory(parent)
        self.figure_box = QComboBox()
        for p in self.panels:
            self.figure_box.addItem(str(p.title), p)
        self.figure_box.addItem("Whole dashboard", DASHBOARD)
        remembered = [k for k, p in enumerate(self.panels) if p.kind == self._memory.get("kind")]
        if current is not None and current in self.panels:
            self.figure_box.setCurrentIndex(self.panels.index(current))
        elif current is None and remembered:
            self.figure_box.setCurrentIndex(remembered[0])
        elif current is not None or not self.panels or self._memory.get("kind") == DASHBOARD:
            self.figure_box.setCurrentIndex(self.figure_box.count() - 1)

        self.format_box = QComboBox()
        for fmt in figures.FORMATS:
            self.format_box.addItem(f"{fmt.upper()} — {FORMAT_NAMES[fmt]}", fmt)
        self.format_box.setCurrentIndex(max(0, self.format_box.findData(self._memory.get("format", "png"))))
        self.selection_check = QCheckBox("Include the selection (orange row box, dashed key column)")
        self.selection_check.setToolTip("Off: the figure shows the data alone, as on a slide")
        self.selection_check.setChecked(bool(self._memory.get("selection", True)))

        # PNG size: a scale of the on-screen size, or an explicit pixel size.
        self.scale_button = QRadioButton("Scale")
        self.pixels_button = QRadioButton("Pixel size")
        self.scale_button.setChecked(True)
        self.scale_spin = QDoubleSpinBox()
        self.scale_spin.setRange(0.25, figures.MAX_SCALE)
        self.scale_spin.setSingleStep(0.5)
        self.scale_spin.setValue(2.0)
        self.scale_spin.setSuffix(" ×")
        self.width_spin = QSpinBox()
        self.height_spin = QSpinBox()
        for spin in (self.width_spin, self.height_spin):
            spin.setRange(16, figures.MAX_SIDE)
            spin.setSuffix(" px")
        self.keep_shape = QCheckBox("Keep shape")
        self.keep_shape.setChecked(True)
        self.size_note = QLabel()
        self.size_note.setStyleSheet("color: gray")

        self.path_edit = QLineEdit()
        self.browse_button = QPushButton("Browse…")
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b00020")
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.hide()

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = self.buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.export_button.setDefault(True)

        scale_row = QHBoxLayout()
        scale_row.addWidget(self.scale_button)
        scale_row.addWidget(self.scale_spin)
        scale_row.addStretch(1)
        pixel_row = QHBoxLayout()
        pixel_row.addWidget(self.pixels_button)
        pixel_row.addWidget(self.width_spin)
        pixel_row.addWidget(QLabel("×"))
        pixel_row.addWidget(self.height_spin)
        pixel_row.addWidget(self.keep_shape)
        self.size_box = QWidget()
        size_layout = QVBoxLayout(self.size_box)
        size_layout.setContentsMargins(0, 0, 0, 0)
        size_layout.addLayout(scale_row)
        size_layout.addLayout(pixel_row)
        size_layout.addWidget(self.size_note)
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(self.browse_button)

        form = QFormLayout()
        form.addRow("Figure", self.figure_box)
        form.addRow("Format", self.format_box)
        form.addRow("PNG size", self.size_box)
        form.addRow("Selection", self.selection_check)
        form.addRow("File", path_row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)

        self._auto_name = ""
        self._set_default_path()
        self._reset_pixel_size()
        self._update_enabled()

        self.figure_box.currentIndexChanged.connect(self._on_figure_changed)
        self.format_box.currentIndexChanged.connect(self._on_format_changed)
        self.scale_button.toggled.connect(self._update_enabled)
        self.scale_spin.valueChanged.connect(self._update_note)
        self.width_spin.valueChanged.connect(self._on_width_changed)
        self.height_spin.valueChanged.connect(self._on_height_changed)
        self.keep_shape.toggled.connect(self._on_keep_shape)
        self.browse_button.clicked.connect(self._on_browse)
        self.buttons.rejected.connect(self.reject)
        self.export_button.clicked.connect(self.export)

    # -- what is chosen --------------------------------------------------------------------
    def target(self):
        """The chosen panel, or ``DASHBOARD``."""
        return self.figure_box.currentData()

    def set_target(self, panel_or_dashboard) -> None:
        index = self.figure_box.findData(panel_or_dashboard)
        if index < 0:
            raise ValueError("that panel is not one this dialog can export")
        self.figure_box.setCurrentIndex(index)

    def format(self) -> str:
        return self.format_box.currentData()

    def set_format(self, fmt: str) -> None:
        index = self.format_box.findData(fmt.lower())
        if index < 0:
            raise ValueError(f"unknown figure format {fmt!r}")
        self.format_box.setCurrentIndex(index)

    def size_options(self) -> dict:
        """The keyword arguments for the exporter: ``scale`` or ``width``/``height`` (PNG only)."""
        if self.format() != "png":
            return {}
        if self.scale_button.isChecked():
            return {"scale": float(self.scale_spin.value())}
        if self.keep_shape.isChecked():
            return {"width": int(self.width_spin.value())}
        return {"width": int(self.width_spin.value()), "height": int(self.height_spin.value())}

    def natural_size(self) -> tuple[int, int]:
        target = self.target()
        try:
            if target == DASHBOARD:
                return figures.dashboard_size(self.panels, self.dashboard_title)
            return figures.panel_size(target)
        except AttnExplorerError:
            return figures.FIGURE_SIZE

    def path(self) -> Path:
        """The file to write: the path field, with the format's extension."""
        text = self.path_edit.text().strip()
        if not text:
            raise figures.FigureError("choose a file to export the figure to")
        path = Path(text).expanduser()
        if path.suffix.lower() != f".{self.format()}":
            # A known other extension is the format's; anything else (a.b) is kept and extended.
            path = path.with_suffix(f".{self.format()}") if path.suffix.lower().lstrip(".") in figures.FORMATS \
                else path.with_name(f"{path.name}.{self.format()}")
        return path

    # -- doing it ------------------------------------------------------------------------------
    def export(self) -> Path | None:
        """Write the figure. On success: remember the folder, emit ``exported``, close, return
        the path. On failure: show why in the dialog, keep it open, return None."""
        global _last_folder
        try:
            path = self.path()
            target = self.target()
            # A large session computes only what is on screen; a figure may draw more. A long
            # session's panels draw from its streamed result (the pooled overview, titled so,
            # or the exact cells of the region zoomed into): never computed densely.
            document = getattr(self.panels[0] if self.panels else None, "document", None)
            compute = getattr(document, "compute", None)
            if compute is not None and hasattr(compute, "complete"):
                from .matrix_export import is_long_document

                if not is_long_document(document):
                    compute.complete()
            selection = self.selection_check.isChecked()
            if target == DASHBOARD:
                figures.export_dashboard(self.panels, path, self.format(), title=self.dashboard_title,
                                         selection=selection, **self.size_options())
            else:
                figures.export_panel(target, path, self.format(), selection=selection, **self.size_options())
        except AttnExplorerError as err:
            self.error_label.setText(str(err))
            self.error_label.show()
            return None
        self.error_label.hide()
        self.last_path = path
        _last_folder = path.parent
        self._memory.update(kind=DASHBOARD if target == DASHBOARD else getattr(target, "kind", None),
                            format=self.format(), selection=self.selection_check.isChecked())
        self.exported.emit(path)
        self.accept()
        return path

    # -- keeping the fields consistent ---------------------------------------------------------
    def _name_for(self) -> str:
        target = self.target()
        kind = DASHBOARD if target == DASHBOARD else getattr(target, "kind", "figure")
        return f"{kind}.{self.format()}"

    def _set_default_path(self) -> None:
        self._auto_name = self._name_for()
        self.path_edit.setText(str(_default_folder() / self._auto_name))

    def _follow_choice(self) -> None:
        """Keep the file name in step with the choice unless the user typed their own name."""
        text = self.path_edit.text().strip()
        current = Path(text) if text else _default_folder() / self._auto_name
        new_name = self._name_for()
        if current.name == self._auto_name:
            current = current.with_name(new_name)
        elif current.suffix.lower().lstrip(".") in figures.FORMATS:
            current = current.with_suffix(f".{self.format()}")
        self._auto_name = new_name
        self.path_edit.setText(str(current))

    def _on_figure_changed(self, _index) -> None:
        self._follow_choice()
        self._reset_pixel_size()

    def _on_format_changed(self, _index) -> None:
        self._follow_choice()
        self._update_enabled()

    def _reset_pixel_size(self) -> None:
        w, h = self.natural_size()
        self._shape = w / max(h, 1)
        for spin, value in ((self.width_spin, 2 * w), (self.height_spin, 2 * h)):
            spin.blockSignals(True)
            spin.setValue(min(value, figures.MAX_SIDE))
            spin.blockSignals(False)
        self._update_note()

    def _on_width_changed(self, value: int) -> None:
        if self.keep_shape.isChecked():
            self.height_spin.blockSignals(True)
            self.height_spin.setValue(max(1, round(value / self._shape)))
            self.height_spin.blockSignals(False)
        self._update_note()

    def _on_height_changed(self, value: int) -> None:
        if self.keep_shape.isChecked():
            self.width_spin.blockSignals(True)
            self.width_spin.setValue(max(1, round(value * self._shape)))
            self.width_spin.blockSignals(False)
        self._update_note()

    def _on_keep_shape(self, keep: bool) -> None:
        if keep:
            self._on_width_changed(self.width_spin.value())

    def _update_enabled(self, *_args) -> None:
        png = self.format() == "png"
        self.size_box.setEnabled(png)
        self.scale_spin.setEnabled(png and self.scale_button.isChecked())
        for w in (self.width_spin, self.height_spin, self.keep_shape):
            w.setEnabled(png and self.pixels_button.isChecked())
        self._update_note()

    def _update_note(self, *_args) -> None:
        w, h = self.natural_size()
        if self.format() != "png":
            self.size_note.setText(f"Vector figure, {w} × {h} px at 96 px per inch")
        elif self.scale_button.isChecked():
            s = self.scale_spin.value()
            self.size_note.setText(f"{round(w * s)} × {round(h * s)} px (on screen: {w} × {h})")
        else:
            self.size_note.setText(f"On screen: {w} × {h} px")

    def _on_browse(self) -> None:
        fmt = self.format()
        chosen, _ = QFileDialog.getSaveFileName(self, "Export figure", self.path_edit.text(),
                                                f"{FORMAT_NAMES[fmt]} (*.{fmt})")
        if chosen:
            self.path_edit.setText(chosen)


def open_export_dialog(panels: Sequence, parent: QWidget | None = None, current=None,
                       title: str | None = None) -> FigureExportDialog:
    """Open the dialog (window-modal, not blocking) and return it; it deletes itself on close."""
    dialog = FigureExportDialog(panels, parent, current=current, title=title)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, True)
    dialog.open()
    return dialog


def install_export_menu(panel, parent_window: QWidget | None = None,
                        panels: Sequence | Callable[[], Sequence] | None = None,
                        title: str | Callable[[], str] | None = None) -> QAction | None:
    """Add "Export figure…" to ``panel``'s context menu; return the action (None for a
    text-only panel, which has no figure).

    ``panels`` (a list, or a function returning the current list) are offered next to this
    one, with the whole dashboard; by default only this panel. ``title`` (or a function
    giving it) heads a dashboard. The dialog opens over ``parent_window`` (default: the
    panel's window) with this panel chosen.
    """
    item = panel.export_item()
    if item is None:
        return None
    action = QAction(ACTION_TEXT, panel)
    action.setObjectName(f"export-figure-{panel.kind}")
    action.setStatusTip(f"Export the {panel.title} panel (or the whole dashboard) as PNG, SVG or PDF")

    def _open() -> None:
        chosen = panels() if callable(panels) else panels
        heading = title() if callable(title) else title
        open_export_dialog(list(chosen) if chosen else [panel], parent_window or panel.window(),
                           current=panel, title=heading)

    action.triggered.connect(_open)
    panel.addAction(action)
    plot_menus = any(isinstance(it, pg.ViewBox) and it.menuEnabled() for it in figures._tree(item))
    if not plot_menus and panel.contextMenuPolicy() == Qt.ContextMenuPolicy.DefaultContextMenu:
        # With pyqtgraph's plot menus off, a right-click on the figure reaches the panel and
        # shows its actions. With them on, pyqtgraph's menu carries our entry (below), and a
        # second, panel-level menu would pop up after it.
        panel.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
    scene = item.scene()
    entries = getattr(scene, "contextMenu", None)
    if isinstance(entries, list):
        # pyqtgraph adds these to every plot menu of the scene; its "Export..." would open
        # pyqtgraph's own exporter, so ours takes its place.
        scene.contextMenu = [action if e.text().startswith("Export") else e for e in entries]
    return action
