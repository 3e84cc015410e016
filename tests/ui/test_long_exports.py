"""Exports of a long session from the window (#16): the matrix dialog writes a part of the
attention matrices as the command line does, and refuses exactly what it refuses."""

from collections import namedtuple

import numpy as np
import pytest
from ui_helpers import close_window, open_window

from attnexplorer.cli import main
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.compute.long import result as long_result
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.io import export_choice
from attnexplorer.io.session_file import save_session
from attnexplorer.ui.exports.matrix_export import ALL, MatrixExportDialog
from attnexplorer.ui.panels import long_matrix

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def long_window(qtbot, monkeypatch):
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)  # every session goes the streamed way
    monkeypatch.setattr(long_result, "OVERVIEW_CELLS", 8)  # pooled 5 × 5 cells at n = 40
    monkeypatch.setattr(long_matrix, "TILE_CELLS", 400)  # the whole 40 × 40 shows the overview, as 16k would
    session = build_preset("random", {"n": 40, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    session = session.replace(mask=Mask("causal"))
    document, window = open_window(session)
    assert document.compute.wait_idle()
    yield document, window
    close_window(document, window)


def _dialog(qtbot, document, window, fmt, path, **part):
    dialog = MatrixExportDialog(document, window)
    qtbot.addWidget(dialog)
    dialog.set_choice(ALL)
    dialog.set_format(fmt)
    dialog.set_part(**part)
    dialog.set_path(path)
    return dialog


def test_the_dialog_writes_a_heads_rows_and_the_overview_of_a_long_session(long_window, qtbot, tmp_path):
    document, window = long_window
    assert document.result.streamed is not None
    dense = compute(document.session)
    dialog = _dialog(qtbot, document, window, "npz", tmp_path / "rows", head="1", part="rows", rows="10:30")
    assert dialog.wants_part() and dialog.wants_folder()
    dialog.accept()
    assert dialog.error_label.text() == ""
    saved = np.load(tmp_path / "rows" / "attention.npz")
    np.testing.assert_allclose(saved["weights"][0], np.asarray(dense.weights)[1, 10:30], atol=1e-6)
    document.selection.set(query=17)
    dialog = _dialog(qtbot, document, window, "csv", tmp_path / "sel", part="selected")
    dialog.accept()
    text = (tmp_path / "sel" / "csv" / "weights_head0.csv").read_text().splitlines()
    assert len(text) == 2 and text[1].startswith(document.session.tokens[17] + ",")
    dialog = _dialog(qtbot, document, window, "npz", tmp_path / "ov", part="max")
    dialog.accept()
    assert np.load(tmp_path / "ov" / "attention.npz")["weights_max_pooled"].shape == (2, 8, 8)
    # Single small matrices still export as before; no n × n one is offered whole.
    names = [dialog.choice_box.itemData(i) for i in range(dialog.choice_box.count())]
    assert "Q_head0" in names and not any(str(n).startswith(("weights", "scores", "mask")) for n in names)


PARITY = [
    {"part": "rows", "rows": "5:1"},
    {"part": "rows", "rows": "0:41"},
    {"part": "rows", "rows": "a:b"},
    {"part": "rows", "rows": "3:9", "head": "1"},
    {"part": "mean", "attention": "scores"},
]


def _cli_args(part, rows="", head="all", attention="weights"):
    args = ["--head", head, "--attention", attention]
    if part == "rows":
        args += ["--rows", rows]
    elif part in ("max", "mean"):
        args += ["--overview", part]
    return args


@pytest.mark.parametrize("small_disk", [False, True])
def test_window_and_command_line_accept_and_refuse_the_same(long_window, qtbot, tmp_path, capsys, monkeypatch,
                                                            small_disk):
    document, window = long_window
    source = tmp_path / "s.json"
    save_session(document.session, source)
    if small_disk:
        monkeypatch.setattr(export_choice.shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - 500, 500))
    for i, part in enumerate(PARITY):
        cli_out, win_out = tmp_path / f"cli{i}", tmp_path / f"win{i}"
        rc = main(["export", "--session", str(source), "--out", str(cli_out), "--matrices", "npz",
                   *_cli_args(**part)])
        cli_error = capsys.readouterr().err.strip().removeprefix("attnexplorer: ")
        dialog = _dialog(qtbot, document, window, "npz", win_out, **part)
        dialog.accept()
        assert (rc == 0) == (dialog.error_label.text() == ""), part
        assert cli_error == dialog.error_label.text(), part
        assert cli_out.exists() == win_out.exists() == (rc == 0)
        if rc == 0:
            a, b = np.load(cli_out / "attention.npz"), np.load(win_out / "attention.npz")
            for name in a.files:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert list(tmp_path.glob("**/.attnexplorer-staging-*")) == []


def test_figures_of_a_long_session_draw_its_overview_never_a_dense_compute(long_window, qtbot, tmp_path,
                                                                           monkeypatch):
    from attnexplorer.app import compute as compute_runner
    from attnexplorer.ui.exports.figure_batch import export_figures
    from attnexplorer.ui.exports.figure_dialog import FigureExportDialog

    document, window = long_window

    def dense(*args, **kwargs):
        raise AssertionError("a long session's figure computed the dense matrices")

    monkeypatch.setattr(compute_runner, "compute", dense)
    weights = next(p for p in window.panels if p.kind == "weights")
    window.docks["weights"].raise_()
    qtbot.waitUntil(lambda: not weights.is_stale)
    assert "max-pooled, 5×5 cells a pixel" in weights.heading.text  # the figure's title
    dialog = FigureExportDialog(window.panels, window, current=weights)
    qtbot.addWidget(dialog)
    dialog.path_edit.setText(str(tmp_path / "w.png"))
    assert dialog.export() == tmp_path / "w.png" and (tmp_path / "w.png").stat().st_size > 0
    # Headless: the overview, titled as pooled; zoomed to 8 rows × 8 keys, exact cells.
    result = document.result
    written = export_figures(result, tmp_path / "all", ["png"])
    assert tmp_path / "all" / "figures" / "weights.png" in written
    zoomed = export_figures(result, tmp_path / "zoomed", ["png"], rows=(8, 16), cols=(0, 8), head=1)
    assert tmp_path / "zoomed" / "figures" / "weights.png" in zoomed


def test_a_dense_whole_export_that_does_not_fit_is_refused_in_the_window(qtbot, tmp_path, monkeypatch):
    session = build_preset("random", {"n": 30, "d": 8, "d_k": 4, "d_v": 4, "heads": 2}).session
    document, window = open_window(session)
    try:
        assert document.compute.wait_idle() and document.result.streamed is None
        monkeypatch.setattr(export_choice.shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - 500, 500))
        dialog = _dialog(qtbot, document, window, "npz", tmp_path / "all.npz")
        assert not dialog.wants_part()
        dialog.accept()
        assert dialog.error_label.text().startswith("all the matrices of 2 heads at 30 tokens as NPZ need about ")
        assert list(tmp_path.iterdir()) == []
    finally:
        close_window(document, window)
