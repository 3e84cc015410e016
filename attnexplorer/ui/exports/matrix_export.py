"""File ▸ Export matrices…, File ▸ Copy matrix as TSV and File ▸ Copy as PyTorch code.

The window only chooses; the writing is ``io.matrices`` (the same writers as
``attnexplorer export``), so a file from the window and one from the command line agree.

- One matrix (``X``, ``W_q_head0``, ``weights_head1``, ``output`` … the names of
  ``io.matrices.labelled_matrices``) to one file: CSV, LaTeX, Markdown and JSON carry the token
  labels; NPY holds the bare array; NPZ holds it under its name.
- All matrices: NPZ and JSON write one file holding every intermediate under the CLI's names
  (``result_arrays``); CSV, LaTeX, Markdown and NPY write one file per matrix and head into a
  folder.

- A part of the attention matrices (one head, a query row range, the selected query, or the
  pooled overview; weights, scores or scaled scores): written into a folder a block of rows
  at a time by ``io.region_export``, exactly as ``attnexplorer export --head/--rows/
  --selected-rows/--overview/--attention`` does, after the same check of the choice and of
  the disk and memory it needs (``io.export_choice``). A long session (``core/compute/long``) is
  always exported this way; its n × n matrices are never made whole.

``MatrixExportDialog`` is driven in tests without a modal loop: ``set_choice``,
``set_format``, ``set_path``, ``set_part``, then ``accept()``; ``written`` lists the files.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QWidget,
)

from ...core.errors import AttnExplorerError
from ...io.export_choice import LargeExportError

ALL = "all"
# The part of the attention matrices an "all matrices" export writes: (id, what the combo shows).
PARTS = (("whole", "Every query row"), ("rows", "Query rows start:stop"), ("selected", "The selected query"),
         ("max", "Pooled overview (max)"), ("mean", "Pooled overview (mean)"))
ATTENTION_CHOICES = (("weights", "weights"), ("scores", "scores"), ("scaled_scores", "scaled scores"),
                     ("weights,scores,scaled_scores", "weights, scores and scaled scores"))
# (format id, what the combo shows, file suffix)
FORMATS = (
    ("csv", "CSV with token labels", ".csv"),
    ("npy", "NumPy .npy", ".npy"),
    ("npz", "NumPy .npz", ".npz"),
    ("json", "JSON", ".json"),
    ("tex", "LaTeX table", ".tex"),
    ("md", "Markdown table", ".md"),
)
_SUFFIX = {f: s for f, _, s in FORMATS}
# Formats that put every matrix in one file; the others need a folder for "all".
ONE_FILE_FOR_ALL = ("npz", "json")


def _current(document):
    """A result of the current session with every intermediate (``result.session`` is what
    gets exported). A large session computes only what is on screen, and a compute may still
    be in flight: then the current session is computed now, so matrices and session never
    come from two different edits. A long session's own streamed result is used as it is
    (its n × n matrices are read in tiles); one still being computed is refused."""
    document.flush()
    result = document.compute.current_result()
    if result is not None and result.tiled:
        return result
    if is_long_document(document):
        raise AttnExplorerError("this long session is still being computed; export it when the status bar says done")
    return document.compute.full_result()


def is_long_document(document) -> bool:
    """Whether the document's session goes the streamed way (``core.compute.long.result.is_long``)."""
    compute = document.compute
    result = compute.current_result()
    if result is not None:
        return result.tiled
    from ...core.compute.long.result import is_long

    return is_long(document.session, compute.dtype, compute.device)


def matrices_by_name(document) -> dict:
    """``{name: LabelledMatrix}`` for the current session, in display order."""
    from ...io.export_choice import SQUARE
    from ...io.matrices import labelled_matrices

    result = _current(document)
    matrices = labelled_matrices(result)
    if result.tiled:  # n × n: exported in part (export_part), never whole
        matrices = [m for m in matrices if m.name.split("_head")[0] not in SQUARE]
    return {m.name: m for m in matrices}


def describe(name: str) -> str:
    """``weights_head1`` → ``weights (head 1)``, for menus and the dialog."""
    match = re.fullmatch(r"(.+)_head(\d+)", name)
    return f"{match[1]} (head {match[2]})" if match else name


def export_matrices(document, choice: str, fmt: str, path, allow_large: bool = False) -> list[Path]:
    """Write ``choice`` (a matrix name or ``ALL``) as ``fmt`` to ``path`` (a file, or a folder
    for ``ALL`` in a per-matrix format). Returns the files written; AttnExplorerError on a
    bad choice or a failed write (nothing half-written: every file is atomic)."""
    from ...io import matrices as io

    if fmt not in _SUFFIX:
        raise AttnExplorerError(f"unknown matrix format {fmt!r}; choose one of {', '.join(_SUFFIX)}")
    path = Path(path)
    result = _current(document)
    if choice == ALL:
        if result.tiled:  # a long session's n × n matrices: only ever in part
            return export_part(document, {}, fmt, path, allow_large=allow_large)
        from ...io.export_choice import ExportChoice, check_fits

        # Every matrix of every head: refused up front, as the command line does, when the
        # disk holding ``path`` is short (the result is already in memory).
        check_fits(result.session, ExportChoice(), [fmt], path, dtype=document.compute.dtype, whole_bundle=True,
                   compute=False, allow_large=allow_large)
        if fmt == "npz":
            io.write_npz(path, io.result_arrays(result))
            return [path]
        if fmt == "json":
            io.write_json_bundle(path, io.result_arrays(result))
            return [path]
        if fmt == "npy":
            return io.write_npy_bundle(path, io.result_arrays(result))
        return io.write_table_bundle(path, result, fmt)
    matrices = {m.name: m for m in io.labelled_matrices(result)}
    if choice not in matrices:
        raise AttnExplorerError(f"there is no matrix {choice!r} in this session; choose one of {', '.join(matrices)}")
    m = matrices[choice]
    if fmt == "npy":
        io.write_npy(path, m.values)
    elif fmt == "npz":
        io.write_npz(path, {m.name: m.values})
    else:
        from ...io.atomic import atomic_write_text

        atomic_write_text(path, io.matrix_to_text(fmt, m.values, m.row_labels, m.col_labels))
    return [path]


def export_part(document, texts: dict, fmt: str, folder, allow_large: bool = False) -> list[Path]:
    """Write the part of the attention matrices that ``texts`` name (``head``, ``rows``,
    ``selected_rows``, ``overview``, ``attention``: the texts ``attnexplorer export`` takes)
    and every other array as ``fmt`` into ``folder``, staged and moved in whole.

    The choice and the disk and memory it needs are checked first by the same functions as
    the command line's (``io.export_choice.parse_choice``, ``check_fits``), so both accept and
    refuse the same things with the same words; on refusal nothing is written."""
    from ...io.atomic import atomic_directory
    from ...io.export_choice import check_fits, parse_choice
    from ...io.region_export import write_region_export

    if fmt not in _SUFFIX:
        raise AttnExplorerError(f"unknown matrix format {fmt!r}; choose one of {', '.join(_SUFFIX)}")
    document.flush()
    session = document.session
    choice = parse_choice(session, selected=document.selection.current.query, **texts)
    long = is_long_document(document)
    held = document.compute.current_result()
    check_fits(session, choice, [fmt], folder, dtype=document.compute.dtype, long=long,
               compute=held is None or (not held.tiled and held.weights is None), allow_large=allow_large)
    result = _current(document)
    folder = Path(folder)
    with atomic_directory(folder) as stage:
        written = write_region_export(stage, result, choice, [fmt])
        return [folder / p.relative_to(stage) for p in written]


# What the copy button copies for each format: the format itself when it is text, else TSV.
COPY_AS = {"csv": "CSV", "json": "JSON", "tex": "LaTeX", "md": "Markdown"}


def copy_matrix_as(document, name: str, fmt: str) -> str:
    """Put matrix ``name`` on the clipboard as ``fmt`` text (with labels) when it is a text
    format (CSV, JSON, LaTeX, Markdown), else as tab-separated numbers."""
    if fmt not in COPY_AS:
        return copy_matrix_tsv(document, name)
    from ...io.matrices import matrix_to_text

    matrices = matrices_by_name(document)
    if name not in matrices:
        raise AttnExplorerError(f"there is no matrix {name!r} in this session")
    m = matrices[name]
    text = matrix_to_text(fmt, m.values, m.row_labels, m.col_labels)
    QGuiApplication.clipboard().setText(text)
    return text


def _is_long_quietly(document) -> bool:
    try:
        return is_long_document(document)
    except AttnExplorerError:
        return False


def _default_folder() -> Path:
    from PySide6.QtCore import QStandardPaths

    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return Path(documents) if documents and Path(documents).is_dir() else Path.home()


def _memory(parent) -> dict:
    """The window's memory of this dialog's last choice (matrix, format, where)."""
    if parent is None:
        return {}
    memory = getattr(parent, "_matrix_export_memory", None)
    if memory is None:
        memory = {}
        parent._matrix_export_memory = memory
    return memory


def copy_matrix_tsv(document, name: str) -> str:
    """Put matrix ``name`` on the clipboard as tab-separated numbers (exact, pastes back)."""
    from ...io.matrix_text import format_tsv

    matrices = matrices_by_name(document)
    if name not in matrices:
        raise AttnExplorerError(f"there is no matrix {name!r} in this session")
    text = format_tsv(matrices[name].values)
    QGuiApplication.clipboard().setText(text)
    return text


def copy_torch_code(session) -> str:
    """Put a runnable plain-torch snippet that recomputes ``session`` on the clipboard."""
    from ...io.torch_code import session_to_torch_code

    code = session_to_torch_code(session)
    QGuiApplication.clipboard().setText(code)
    return code


class MatrixExportDialog(QDialog):
    """Choose a matrix (or all), a format and where; Export writes and closes."""

    def __init__(self, document, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Export matrices")
        self.document = document
        self.written: list[Path] = []
        self.choice_box = QComboBox()
        self.choice_box.addItem("All matrices", ALL)
        try:
            for name in matrices_by_name(document):
                self.choice_box.addItem(describe(name), name)
        except AttnExplorerError:
            pass  # "all" still says why on export
        self.format_box = QComboBox()
        for fmt, label, _suffix in FORMATS:
            self.format_box.addItem(label, fmt)
        # Which part of the attention matrices (all matrices only): the command line's
        # --head, --rows/--selected-rows/--overview and --attention.
        self.long = _is_long_quietly(document)
        self.head_box = QComboBox()
        self.head_box.addItem("All heads", "all")
        for h in range(document.session.heads):
            self.head_box.addItem(f"Head {h}", str(h))
        self.part_box = QComboBox()
        for part, label in PARTS:
            self.part_box.addItem(label, part)
        self.rows_edit = QLineEdit()
        self.rows_edit.setPlaceholderText(f"e.g. 0:{min(64, document.session.n)}")
        self.attention_box = QComboBox()
        for names, label in ATTENTION_CHOICES:
            self.attention_box.addItem(label, names)
        self.path_edit = QLineEdit()
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QWidget()
        row_layout = QHBoxLayout(row)
        row_layout.setContentsMargins(0, 0, 0, 0)
        row_layout.addWidget(self.path_edit, 1)
        row_layout.addWidget(browse)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b00020")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.copy_button = buttons.addButton("Copy as TSV", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self._copy_tsv)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Matrix:", self.choice_box)
        form.addRow("Format:", self.format_box)
        form.addRow("Attention:", self.attention_box)
        form.addRow("Heads:", self.head_box)
        form.addRow("Part:", self.part_box)
        form.addRow("Rows:", self.rows_edit)
        form.addRow("Save to:", row)
        form.addRow(self.hint)
        form.addRow(self.error_label)
        form.addRow(buttons)
        for box in (self.choice_box, self.format_box, self.head_box, self.part_box, self.attention_box):
            box.currentIndexChanged.connect(self._update_hint)
        # Open on the last export's matrix, format and place (this window, this run).
        self._memory = _memory(parent)
        for box, key in ((self.choice_box, "choice"), (self.format_box, "format")):
            index = box.findData(self._memory.get(key))
            if index >= 0:
                box.setCurrentIndex(index)
        if self._memory.get("path"):
            last = Path(self._memory["path"])
            self.path_edit.setText(str(last if self.wants_folder() or last.suffix == "" else
                                       last.with_suffix(_SUFFIX[self.fmt])))
        else:  # a place to start from, never an empty field
            name = "attention-matrices" if self.wants_folder() else f"attention{_SUFFIX[self.fmt]}"
            self.path_edit.setText(str(_default_folder() / name))
        self._update_hint()
        self.resize(520, self.sizeHint().height())

    # -- driving it (tests use these too) --------------------------------------------------
    def set_choice(self, name: str) -> None:
        index = self.choice_box.findData(name)
        if index < 0:
            raise AttnExplorerError(f"no matrix {name!r} to export")
        self.choice_box.setCurrentIndex(index)

    def set_format(self, fmt: str) -> None:
        index = self.format_box.findData(fmt)
        if index < 0:
            raise AttnExplorerError(f"unknown matrix format {fmt!r}")
        self.format_box.setCurrentIndex(index)

    def set_path(self, path) -> None:
        self.path_edit.setText(str(path))

    def set_part(self, head: str = "all", part: str = "whole", rows: str = "",
                 attention: str = "weights") -> None:
        """Choose the part of the attention matrices, as the combos and the rows field do."""
        for box, value in ((self.head_box, head), (self.part_box, part), (self.attention_box, attention)):
            index = box.findData(value)
            if index < 0:
                raise AttnExplorerError(f"no choice {value!r} here")
            box.setCurrentIndex(index)
        self.rows_edit.setText(rows)

    def part_texts(self) -> dict:
        """The choice as the texts ``attnexplorer export`` takes (``io.export_choice.parse_choice``)."""
        part = self.part_box.currentData()
        return {"head": self.head_box.currentData(), "attention": self.attention_box.currentData(),
                "rows": self.rows_edit.text() if part == "rows" else None,
                "selected_rows": "selected" if part == "selected" else None,
                "overview": part if part in ("max", "mean") else None}

    def wants_part(self) -> bool:
        """Whether "all matrices" writes a part of the attention matrices (always for a long
        session, else when a head or a part other than every row is chosen)."""
        if self.choice != ALL:
            return False
        return self.long or self.head_box.currentData() != "all" or self.part_box.currentData() != "whole"

    @property
    def choice(self) -> str:
        return self.choice_box.currentData()

    @property
    def fmt(self) -> str:
        return self.format_box.currentData()

    def wants_folder(self) -> bool:
        return self.choice == ALL and (self.fmt not in ONE_FILE_FOR_ALL or self.wants_part())

    def _update_hint(self, *_):
        all_matrices = self.choice == ALL
        for widget in (self.head_box, self.part_box, self.attention_box):
            widget.setEnabled(all_matrices)
        self.rows_edit.setEnabled(all_matrices and self.part_box.currentData() == "rows")
        if self.wants_part():
            self.hint.setText("Writes the chosen part of the attention matrices, a block of rows at a time, and "
                              "every other array into the chosen folder; export.json says what was chosen "
                              "(and the pooling factors of an overview).")
        elif self.wants_folder():
            self.hint.setText("Writes one file per matrix and head into the chosen folder "
                              "(weights_head0, scores_head0, …).")
        elif self.choice == ALL:
            self.hint.setText("Writes one file holding every input and intermediate under the names "
                              "of `attnexplorer export` (tokens, X, W_q, …, weights, output).")
        else:
            self.hint.setText("Writes this one matrix" + (" with token labels." if self.fmt in ("csv", "tex", "md", "json")
                                                        else "."))
        self.copy_button.setEnabled(self.choice != ALL)
        self.copy_button.setText(f"Copy as {COPY_AS.get(self.fmt, 'TSV')}")
        text = self.path_edit.text().strip()
        if text and not self.wants_folder():
            self.path_edit.setText(str(Path(text).with_suffix(_SUFFIX[self.fmt])))

    def _browse(self) -> None:
        if self.wants_folder():
            path = QFileDialog.getExistingDirectory(self, "Export matrices into folder", self.path_edit.text())
        else:
            default = self.path_edit.text() or f"{'attention' if self.choice == ALL else self.choice}{_SUFFIX[self.fmt]}"
            path, _ = QFileDialog.getSaveFileName(self, "Export matrix", default)
        if path:
            self.set_path(path)

    def _copy_tsv(self) -> None:
        try:
            copy_matrix_as(self.document, self.choice, self.fmt)
            self.error_label.setText(f"{describe(self.choice)} copied to the clipboard.")
        except AttnExplorerError as err:
            self.error_label.setText(str(err))

    def _write(self, path: Path, allow_large: bool) -> list[Path]:
        if self.wants_part():
            return export_part(self.document, self.part_texts(), self.fmt, path, allow_large=allow_large)
        return export_matrices(self.document, self.choice, self.fmt, path, allow_large=allow_large)

    def ask_large(self, question: str):
        """Yes or No to an export above 2 GB (a method, so that tests can answer it)."""
        return QMessageBox.question(self, "Large export", question)

    def accept(self) -> None:
        """Write; on failure say why in the dialog and stay open (nothing was half-written)."""
        text = self.path_edit.text().strip()
        if not text:
            self.error_label.setText("Choose where to save first.")
            return
        try:
            self.written = self._write(Path(text).expanduser(), allow_large=False)
        except LargeExportError as err:
            # Above 2 GB the window asks, as the command line wants --allow-large.
            if self.ask_large(err.question) != QMessageBox.StandardButton.Yes:
                self.error_label.setText("Not exported: " + err.question.removesuffix(" Write it anyway?"))
                return
            try:
                self.written = self._write(Path(text).expanduser(), allow_large=True)
            except (AttnExplorerError, OSError) as again:
                self.error_label.setText(str(again))
                return
        except (AttnExplorerError, OSError) as err:
            self.error_label.setText(str(err))
            return
        self._memory.update(choice=self.choice, format=self.fmt, path=text)
        parent = self.parent()
        if parent is not None and hasattr(parent, "statusBar"):
            where = self.written[0] if len(self.written) == 1 else Path(text)
            parent.statusBar().showMessage(f"Exported {len(self.written)} file(s) to {where}", 5000)
        super().accept()
