"""Exports that fit (#16): a chosen part of the attention matrices, streamed from a long
result's exact tiles, equals the dense engine's numbers; what cannot fit is refused up front."""

import json
from collections import namedtuple

import numpy as np
import pytest

import attnexplorer.core.compute.long.result as long_result
from attnexplorer.cli import main
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.compute.long.result import compute_long
from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.io import export_choice
from attnexplorer.io.export_choice import ExportError, check_fits, parse_choice
from attnexplorer.io.matrices import matrix_to_csv, matrix_to_json, matrix_to_latex, matrix_to_markdown
from attnexplorer.io.matrix_stream import write_table_streamed
from attnexplorer.io.region_export import write_region_export

FORMATS = ["npz", "npy", "json"]
Usage = namedtuple("Usage", "total used free")


def random_session(n=160, heads=3, **changes):
    s = build_preset("random", {"n": n, "d": 16, "d_k": 8, "d_v": 8, "heads": heads}).session
    return s.replace(**changes) if changes else s


@pytest.fixture(scope="module")
def results():
    """One causal session, computed dense and by the streamed path (overview 32 cells a side:
    5 × 5 cells a pooled cell at n = 160)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(long_result, "OVERVIEW_CELLS", 32)
        s = random_session(mask=Mask("causal"))
        yield compute(s), compute_long(s)


def _export(tmp_path, result, choice, name, formats=FORMATS):
    out = tmp_path / name
    out.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(long_result, "OVERVIEW_CELLS", 32)
        write_region_export(out, result, choice, formats)
    return out


@pytest.mark.parametrize("texts", [
    {"head": "1", "rows": "100:151"},
    {"selected_rows": "5,159,7", "attention": "weights,scores,scaled_scores"},
    {"overview": "max"},
    {"overview": "mean", "head": "2", "attention": "scaled_scores"},
    {},
])
def test_streamed_export_equals_the_dense_engines(tmp_path, results, texts):
    dense, long = results
    choice = parse_choice(dense.session, **texts)
    a_dir, b_dir = _export(tmp_path, dense, choice, "dense"), _export(tmp_path, long, choice, "long")
    a, b = np.load(a_dir / "attention.npz"), np.load(b_dir / "attention.npz")
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        if a[name].dtype.kind == "f":
            np.testing.assert_allclose(b[name], a[name], atol=1e-6, rtol=0, equal_nan=True, err_msg=name)
        else:
            assert (a[name] == b[name]).all(), name
    assert not any(name in a.files for name in ("position_bias",))
    for name in a.files:  # NPY holds the same arrays
        np.testing.assert_array_equal(np.load(b_dir / "npy" / f"{name}.npy"), b[name])
    meta = json.loads((b_dir / "export.json").read_text())
    assert meta["heads"] == choice.head_list(dense.session)
    loaded = json.loads((b_dir / "attention.json").read_text())
    for name in b.files:
        if b[name].dtype.kind == "f":
            got = np.array([[np.nan if v is None else v for v in row] for row in np.reshape(loaded[name], (-1, b[name].shape[-1]))]) \
                if b[name].ndim >= 2 else np.asarray(loaded[name], dtype=float)
            np.testing.assert_array_equal(got.reshape(b[name].shape), b[name].astype(float))


def test_rows_and_their_tables_are_the_dense_slices(tmp_path, results):
    dense, long = results
    choice = parse_choice(dense.session, head="2", rows="40:97")
    out = _export(tmp_path, long, choice, "long", ["npz", "csv", "tex", "md"])
    saved = np.load(out / "attention.npz")
    weights = np.asarray(dense.weights)[2, 40:97]
    assert saved["weights"].shape == (1, 57, 160)
    np.testing.assert_allclose(saved["weights"][0], weights, atol=1e-6)
    np.testing.assert_array_equal(saved["query_rows"], np.arange(40, 97))
    np.testing.assert_array_equal(saved["mask"], np.asarray(dense.mask)[40:97])
    # The streamed tables are the whole-matrix writers' text for the same numbers.
    tile = long.streamed.tile(2, slice(40, 97), slice(None))
    rows, keys = list(dense.session.tokens[40:97]), list(dense.session.key_tokens)
    for fmt, writer in (("csv", matrix_to_csv), ("tex", matrix_to_latex), ("md", matrix_to_markdown)):
        assert (out / fmt / f"weights_head2.{fmt}").read_bytes().decode("utf-8") == writer(tile, rows, keys), fmt
    assert not (out / "csv" / "weights_head0.csv").exists()
    # The one-file JSON table (the window's single-matrix export) streams the same text too.
    write_table_streamed(tmp_path / "w.json", "json", iter([tile[:20], tile[20:]]), rows, keys)
    assert json.loads((tmp_path / "w.json").read_text()) == json.loads(matrix_to_json(tile, rows, keys))


def test_the_pooled_overview_is_each_blocks_max_or_mean_and_says_its_factors(tmp_path, results):
    dense, long = results
    weights = np.asarray(dense.weights, dtype=np.float64)
    blocked = np.asarray(dense.mask)
    blocks = weights.reshape(3, 32, 5, 32, 5)
    free = ~blocked.reshape(32, 5, 32, 5)
    expected_max = np.where(free.any(axis=(1, 3)), blocks.max(axis=(2, 4)), np.nan)
    with np.errstate(invalid="ignore"):
        expected_mean = (blocks * free).sum(axis=(2, 4)) / free.sum(axis=(1, 3))
    for pool, expected in (("max", expected_max), ("mean", expected_mean)):
        out = _export(tmp_path, long, parse_choice(dense.session, overview=pool), pool, ["npz", "csv"])
        saved = np.load(out / "attention.npz")
        np.testing.assert_allclose(saved[f"weights_{pool}_pooled"], expected, atol=1e-6, equal_nan=True)
        assert int(saved["overview_rows_per_cell"]) == 5 and int(saved["overview_keys_per_cell"]) == 5
        meta = json.loads((out / "export.json").read_text())
        assert meta["overview"]["pool"] == pool and meta["overview"]["rows_per_cell"] == 5
        table = (out / "csv" / f"weights_head0_{pool}_pooled.csv").read_text().splitlines()
        assert table[0].startswith(",keys 0-4,keys 5-9") and table[1].startswith("queries 0-4,")


def test_a_16k_choice_is_refused_naming_its_size(monkeypatch, tmp_path):
    session = build_preset("random", {"n": 16384, "d": 64, "d_k": 64, "d_v": 64, "heads": 4}).session
    monkeypatch.setattr(export_choice.shutil, "disk_usage", lambda path: Usage(100e9, 90.2e9, 9.8e9))
    with pytest.raises(ExportError) as err:
        check_fits(session, parse_choice(session), ["csv"], tmp_path, long=True)
    assert str(err.value) == ("the weights of 4 heads at 16,384 tokens as CSV need about 25 GB; the disk has "
                              "9.8 GB free: export one head, a row range or the pooled overview")
    # One head's rows 8000-8063 fit.
    check_fits(session, parse_choice(session, head="2", rows="8000:8064"), ["csv"], tmp_path, long=True)
    with pytest.raises(ExportError, match="of memory, more than the limit of 100 MB"):
        check_fits(session, parse_choice(session, overview="max"), ["npz"], tmp_path, long=True, limit=10**8)


def _disk_full(monkeypatch, free=10_000):
    monkeypatch.setattr(export_choice.shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - free, free))


@pytest.mark.parametrize("force_long", [False, True])
def test_an_export_that_does_not_fit_writes_nothing(monkeypatch, tmp_path, capsys, force_long):
    if force_long:
        monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    _disk_full(monkeypatch)
    out = tmp_path / "out"
    rc = main(["export", "--preset", "random", "--set", "n=200", "--out", str(out), "--matrices", "npz,csv"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "need about" in err and "free:" in err and "\n" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


BAD_CHOICES = [
    (["--head", "9"], "head 9 is not in this session: it has heads 0..3"),
    (["--head", "x"], "head must be a whole number, got 'x'"),
    (["--rows", "5:1"], "rows 5:1: choose start:stop"),
    (["--rows", "0:201"], "rows 0:201: choose start:stop"),
    (["--selected-rows", "3,200"], "selected row 200 is not in this session"),
    (["--overview", "median"], "overview: choose max or mean, got 'median'"),
    (["--rows", "1:3", "--overview", "max"], "choose one of a row range, selected rows or the pooled overview"),
    (["--attention", "keys"], "attention matrix 'keys': choose from weights, scores, scaled_scores"),
]


@pytest.mark.parametrize("extra, message", BAD_CHOICES)
def test_cli_refuses_bad_choices_in_one_line_writing_nothing(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    rc = main(["export", "--preset", "random", "--set", "n=200", "--set", "heads=4", "--out", str(out), *extra])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()


def test_cli_long_session_writes_a_head_and_rows_equal_to_dense(monkeypatch, tmp_path, capsys):
    args = ["export", "--preset", "random", "--set", "n=300", "--set", "heads=2", "--matrices", "npz",
            "--head", "1", "--rows", "10:74"]
    assert main([*args, "--out", str(tmp_path / "dense")]) == 0
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 1000)
    assert main([*args, "--out", str(tmp_path / "long")]) == 0
    a, b = np.load(tmp_path / "dense" / "attention.npz"), np.load(tmp_path / "long" / "attention.npz")
    assert b["weights"].shape == (1, 64, 300)
    np.testing.assert_allclose(b["weights"], a["weights"], atol=1e-6)
    assert "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "long").iterdir()) == ["attention.npz", "export.json", "session.json"]


def test_cli_refuses_columns_outside_the_keys(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "--preset", "random", "--set", "n=50", "--out", str(out), "--cols", "40:60"]) == 2
    assert "columns 40:60: choose start:stop with 0 ≤ start < stop ≤ 50" in capsys.readouterr().err
    assert not out.exists()
