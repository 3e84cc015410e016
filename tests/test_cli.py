"""`attnexplorer export` end to end: what it writes, and how it refuses bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnexplorer.cli import main
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.session import Mask, Scale, Session
from attnexplorer.io.export_command import parse_mask, parse_scale
from attnexplorer.io.session_file import load_session, save_session, session_to_dict
from walkthroughs import DESSERT_OUTPUT, DESSERT_SCORES_2, DESSERT_WEIGHTS_2

ROOT = Path(__file__).resolve().parents[1]


def make_session(**changes):
    rng = np.random.default_rng(3)
    s = Session(tokens=("The", "dog", ",", "she"), embeddings=rng.normal(size=(4, 3)),
                w_query=rng.normal(size=(2, 3, 2)), w_key=rng.normal(size=(2, 3, 2)),
                w_value=rng.normal(size=(2, 3, 4)))
    return s.replace(**changes) if changes else s


@pytest.fixture
def session_file(tmp_path):
    path = tmp_path / "session.json"
    save_session(make_session(), path)
    return path


def listing(folder):
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def test_export_every_matrix_format(tmp_path, session_file, capsys):
    out = tmp_path / "out"
    code = main(["export", "--session", str(session_file), "--out", str(out), "--matrices", "npz,npy,csv,json,tex,md",
                 "--dtype", "float64"])
    assert code == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("wrote ") and str(out) in printed and "csv/ (" in printed
    s = load_session(session_file)
    r = compute(s, dtype="float64")
    with np.load(out / "attention.npz", allow_pickle=False) as z:
        assert list(z["tokens"]) == list(s.tokens)
        for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs", "output", "mask"):
            assert np.array_equal(z[name], getattr(r, name)), name
        assert np.array_equal(z["X"], s.embeddings) and np.array_equal(z["W_v"], s.w_value)
    obj = json.loads((out / "attention.json").read_text())
    assert np.array_equal(np.array(obj["weights"]), r.weights)
    assert np.array_equal(np.load(out / "npy" / "scores.npy"), r.scores)
    for folder, ext in (("csv", "csv"), ("tex", "tex"), ("md", "md")):
        assert (out / folder / f"weights_head1.{ext}").is_file()
        assert (out / folder / f"Q_head0.{ext}").is_file()
        assert (out / folder / f"output.{ext}").is_file()
    assert load_session(out / "session.json") == s
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_export_writes_the_sine_reference_curve(tmp_path):
    # A notebook can redraw the Signal figure from the export alone.
    out = tmp_path / "out"
    assert main(["export", "--preset", "sine", "--set", "N=30", "--out", str(out), "--dtype", "float64"]) == 0
    with np.load(out / "attention.npz", allow_pickle=False) as z:
        position, clean = z["reference_position"], z["reference_clean"]
        assert position.shape == clean.shape == (30,)
        np.testing.assert_allclose(position, np.arange(30) / 29)
        np.testing.assert_allclose(clean, np.sin(2 * np.pi * position))
    obj = json.loads((out / "attention.json").read_text())
    np.testing.assert_allclose(obj["reference_clean"], clean)
    # Curves come from the session, so an export of the saved session.json writes the same.
    again = tmp_path / "again"
    assert main(["export", "--session", str(out / "session.json"), "--out", str(again)]) == 0
    with np.load(again / "attention.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["reference_clean"], clean)


def test_default_formats_and_overrides(tmp_path, session_file):
    out = tmp_path / "out"
    assert main(["export", "--session", str(session_file), "--out", str(out), "--mask", "window:2",
                 "--scale", "temperature:0.5"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["attention.json", "attention.npz", "session.json"]
    s = make_session(mask=Mask("window", window=2), scale=Scale("temperature", 0.5))
    r = compute(s)
    with np.load(out / "attention.npz") as z:
        assert np.array_equal(z["mask"], s.mask.matrix(s.n))
        np.testing.assert_allclose(z["weights"], r.weights, rtol=1e-6)
        assert z["weights"][0, 0, 0] == 1.0 and z["weights"][0, 3, 1] == 0.0
    assert load_session(out / "session.json").scale == Scale("temperature", 0.5)


def test_existing_files_in_out_are_kept_or_replaced(tmp_path, session_file):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "attention.json").write_text("old")
    assert main(["export", "--session", str(session_file), "--out", str(out), "--matrices", "json"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "attention.json").read_text())["tokens"] == ["The", "dog", ",", "she"]


@pytest.mark.parametrize("text, mask", [
    ("none", Mask("none")), ("causal", Mask("causal")), (" Causal ", Mask("causal")),
    ("window:3", Mask("window", window=3)), ("padding:0, 2", Mask("padding", padding=(0, 2))),
])
def test_parse_mask(text, mask):
    assert parse_mask(text) == mask


@pytest.mark.parametrize("text, scale", [
    ("inv_sqrt_dk", Scale("inv_sqrt_dk")), ("none", Scale("none")), ("temperature:0.02", Scale("temperature", 0.02)),
    ("factor:256**-0.5", Scale("factor", multiplier=0.0625)), ("factor: 0.3", Scale("factor", multiplier=0.3)),
])
def test_parse_scale(text, scale):
    assert parse_scale(text) == scale


def bad_cases(tmp_path, session_file):
    """(argv after `export`, expected fragment of the one stderr line)."""
    d = session_to_dict(make_session())
    d["heads"][1]["W_k"] = d["heads"][1]["W_k"][:2]
    wrong_shape = tmp_path / "wrong.json"
    wrong_shape.write_text(json.dumps(d))
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(session_to_dict(make_session())).replace("[[", "[[NaN, ", 1))
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"format": "attnexplorer-session", "version": 1, "tokens": [')
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(dict(session_to_dict(make_session()), version=4)))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    src = ["--session", str(session_file)]
    return [
        (["--session", str(tmp_path / "missing.json")], f"{tmp_path / 'missing.json'}: cannot be read: No such file"),
        (["--session", str(malformed)], f"{malformed}: is not valid JSON"),
        (["--session", str(wrong_shape)], f"{wrong_shape}: heads[1].W_k has 2 rows, expected 3 (the embedding width)"),
        (["--session", str(nan)], f"{nan}: embeddings[0][0] is NaN; every number must be finite"),
        (["--session", str(newer)], "written by a newer attnexplorer (version 4); this one reads version 3"),
        (["--preset", "nosuch"], "unknown preset 'nosuch'"),
        (["--preset", "dessert", "--set", "bogus=1"], "has no parameter 'bogus'"),
        (["--preset", "dessert", "--set", "novalue"], "--set expects KEY=VALUE, got 'novalue'"),
        (src + ["--set", "seed=1"], "--set applies to presets only"),
        (src + ["--device", "tpu"], "device 'tpu' is not available here; available: cpu"),
        (src + ["--dtype", "float8"], "dtype 'float8' is not supported"),
        (src + ["--mask", "diagonal"], "--mask: expected none, causal, window:W or padding:J,K,..., got 'diagonal'"),
        (src + ["--mask", "window:x"], "--mask: the window must be a whole number, got 'x'"),
        (src + ["--mask", "padding:9"], "--mask: mask.padding: padding position 9 is outside 0..3"),
        (src + ["--scale", "temperature:-1"], "--scale: the temperature must be a finite number > 0, got '-1'"),
        (src + ["--scale", "temperature:abc"], "--scale: the temperature must be a number, got 'abc'"),
        (src + ["--scale", "loud"], "--scale: expected inv_sqrt_dk, none, temperature:T or factor:F, got 'loud'"),
        (src + ["--scale", "factor:0"], "--scale: the factor must be a finite number > 0, got '0'"),
        (src + ["--scale", "factor:x"], "--scale: the factor 'x' is not a number"),
        (src + ["--matrices", "npz,xlsx"], "--matrices: unknown format 'xlsx'; choose from npz, npy, csv, json, tex, md"),
        (src + ["--figures", "gif"], "--figures: unknown format 'gif'; choose from png, svg, pdf"),
        (src + ["--out", str(a_file)], f"--out {a_file} is a file, not a folder"),
        (src + ["--out", str(a_file / "sub")], f"{a_file} is a file, not a folder"),
    ]


def test_bad_input_exits_2_with_one_line_and_leaves_out_alone(tmp_path, session_file, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "attention.npz").write_bytes(b"from an earlier run")
    before = listing(out)
    for argv, fragment in bad_cases(tmp_path, session_file):
        if "--out" not in argv:
            argv = argv + ["--out", str(out)]
        code = main(["export", *argv, "--matrices", "npz,csv"] if "--matrices" not in argv else ["export", *argv])
        err = capsys.readouterr().err
        assert code == 2, argv
        assert err.count("\n") == 1 and err.startswith("attnexplorer: "), err
        assert fragment in err, (fragment, err)
        assert "Traceback" not in err
        assert listing(out) == before, argv
    assert not (tmp_path / "a_file").is_dir() and (tmp_path / "a_file").read_text() == "x"


def test_failure_while_writing_leaves_out_unchanged(tmp_path, session_file, monkeypatch, capsys):
    import attnexplorer.io.matrices as mx

    out = tmp_path / "out"
    out.mkdir()
    (out / "attention.npz").write_bytes(b"previous")
    before = listing(out)

    def disk_full(path, arrays):
        raise mx.MatrixError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(mx, "write_json_bundle", disk_full)
    code = main(["export", "--session", str(session_file), "--out", str(out), "--matrices", "npz,csv,json"])
    assert code == 2
    assert "No space left on device" in capsys.readouterr().err
    assert listing(out) == before
    fresh = tmp_path / "fresh"
    assert main(["export", "--session", str(session_file), "--out", str(fresh), "--matrices", "npz,json"]) == 2
    assert not fresh.exists()


def test_missing_figure_support_is_one_clear_line(tmp_path, session_file, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "attnexplorer.ui.exports.figure_batch", None)  # import fails as without PySide6
    out = tmp_path / "out"
    assert main(["export", "--session", str(session_file), "--out", str(out), "--figures", "png"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnexplorer: figure export needs PySide6 and pyqtgraph: ") and err.count("\n") == 1
    assert not out.exists()


def test_help_and_required_arguments(capsys):
    with pytest.raises(SystemExit) as info:
        main(["export", "--help"])
    assert info.value.code == 0
    assert "--matrices" in capsys.readouterr().out
    # A usage error is one line like every other error (tests/hostile has the rest).
    assert main(["export", "--preset", "dessert"]) == 2  # no --out
    assert capsys.readouterr().err == ("attnexplorer: the following arguments are required: --out "
                                       "(see `attnexplorer export --help`)\n")


def test_dessert_export_in_a_real_process_matches_the_walkthrough(tmp_path):
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "export", "--preset", "dessert", "--out", "d"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("wrote 3 files to d: attention.npz, attention.json, session.json")
    with np.load(tmp_path / "d" / "attention.npz", allow_pickle=False) as z:
        assert list(z["tokens"]) == ["Life", "is", "short", "eat", "dessert", "first"]
        np.testing.assert_allclose(z["scores"][0, 1], DESSERT_SCORES_2, atol=2e-4)
        np.testing.assert_allclose(z["weights"][0, 1], DESSERT_WEIGHTS_2, atol=2e-4)
        np.testing.assert_allclose(z["output"], DESSERT_OUTPUT, atol=2e-4)
        assert not z["mask"].any()
    obj = json.loads((tmp_path / "d" / "attention.json").read_text())
    np.testing.assert_allclose(obj["output"], DESSERT_OUTPUT, atol=2e-4)


def test_export_without_figures_never_imports_qt(tmp_path, session_file):
    code = ("import sys; from attnexplorer.cli import main; "
            f"rc = main(['export', '--session', {str(session_file)!r}, '--out', {str(tmp_path / 'o')!r}, "
            "'--matrices', 'npz,csv,tex,md,json,npy']); "
            # nor the model stack, nor torch.optim's torch._dynamo: the cold export is torch and numpy
            "assert rc == 0; assert not [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', "
            "'transformers', 'tokenizers', 'safetensors', 'matplotlib', 'torch._dynamo', 'attnexplorer.ui', "
            "'attnexplorer.models', 'attnexplorer.app', 'attnexplorer.bench'))]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_a_command_skips_the_interpreter_teardown_but_not_atexit_or_its_output(tmp_path, session_file):
    # The `attnexplorer` command (cli.run) ends a command with os._exit: the teardown of an
    # interpreter holding torch cost 0.5 s of CPU. What an ordinary exit does that matters still
    # happens: atexit functions run, the output is flushed, the status is the command's.
    code = ("import atexit, sys\n"
            "class Teardown:\n"
            "    def __del__(self): print('torn down', flush=True)\n"
            "kept = Teardown()  # dropped only by the interpreter's teardown\n"
            "atexit.register(print, 'atexit ran')\n"
            f"sys.argv = ['attnexplorer', 'export', '--session', {str(session_file)!r}, '--out', "
            f"{str(tmp_path / 'o')!r}, '--matrices', 'npz']\n"
            "from attnexplorer.cli import run\n"
            "run()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [f"wrote 2 files to {tmp_path / 'o'}: attention.npz, session.json",
                                             "atexit ran"]
    assert "torn down" not in done.stdout
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["attention.npz", "session.json"]
    # A refused command keeps its status 2 and its one line.
    bad = subprocess.run([sys.executable, "-m", "attnexplorer", "export", "--session", str(tmp_path / "none.json"),
                          "--out", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "none.json" in bad.stderr


def test_figures_are_written_headless_into_figures_folder(tmp_path):
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)  # export must choose the offscreen platform itself
    env.pop("DISPLAY", None)
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "export", "--preset", "dessert", "--out", "d",
                           "--matrices", "", "--figures", "png"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    pngs = sorted((tmp_path / "d" / "figures").glob("*.png"))
    assert tmp_path / "d" / "figures" / "dashboard.png" in pngs and len(pngs) > 1
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["figures", "session.json"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="PySide6 6.12.0 is harmless from Python 3.12")
def test_the_known_bad_pyside6_refuses_to_start_with_one_line():
    code = ("import sys, PySide6; PySide6.__version__ = '6.12.0'\n"
            "from attnexplorer.cli import main\n"
            "sys.exit(main(['--preset', 'pronoun']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "PySide6 6.12.0 crashes on Python 3." in lines[0]
    assert "PySide6-Essentials!=6.12.0" in lines[0] and "Python 3.12" in lines[0]
