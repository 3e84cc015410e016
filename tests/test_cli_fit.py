"""``attnexplorer fit``: in a real process, and every bad input as one line with exit 2."""

import os
import subprocess
import sys

import numpy as np
import pytest

from attnexplorer.cli import main
from attnexplorer.core.compute.engine import compute
from attnexplorer.io.session_file import load_session, save_session
from attnexplorer.core.inputs.presets import build_preset, parse_assignments
from attnexplorer.core.inputs.session import Mask

RANDOM_8 = ["--preset", "random", "--set", "n=8", "--set", "d=8", "--set", "d_k=4", "--set", "heads=1", "--mask", "causal"]


def test_previous_token_fit_in_a_real_process(tmp_path):
    env = dict(os.environ)
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "fit", *RANDOM_8, "--target", "previous-token",
                           "--steps", "500", "--out", "fitted.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "loss" in done.stderr and "/500" in done.stderr  # the progress bar
    assert done.stdout.startswith("wrote fitted.json: matched the target")
    fitted = load_session(tmp_path / "fitted.json")
    w = compute(fitted).weights[0]
    target = np.zeros((8, 8))
    target[np.arange(8), np.maximum(np.arange(8) - 1, 0)] = 1.0
    assert np.abs(w - target).max() < 0.01
    start = build_preset("random", parse_assignments(["n=8", "d=8", "d_k=4", "heads=1"])).session
    np.testing.assert_array_equal(fitted.w_value, start.w_value)
    assert fitted.mask == Mask("causal")


def test_matrix_file_target_for_every_head(tmp_path, capsys):
    s = build_preset("random", parse_assignments(["n=5", "d=6", "d_k=3", "heads=2"])).session
    save_session(s, tmp_path / "s.json")
    np.save(tmp_path / "t.npy", np.eye(5) * 2.0)  # rows renormalised
    code = main(["fit", "--session", str(tmp_path / "s.json"), "--target", str(tmp_path / "t.npy"), "--head", "all",
                 "--steps", "800", "--out", str(tmp_path / "f.json")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "note: rows renormalised to sum to 1" in captured.err
    w = compute(load_session(tmp_path / "f.json")).weights
    assert np.abs(w - np.eye(5)).max() < 0.01


def test_sgd_and_one_head(tmp_path, capsys):
    s = build_preset("random", parse_assignments(["n=6", "d=6", "d_k=3", "heads=2"])).session
    save_session(s, tmp_path / "s.json")
    assert main(["fit", "--session", str(tmp_path / "s.json"), "--target", "first-token", "--head", "1",
                 "--optimizer", "sgd", "--lr", "1", "--steps", "20", "--train", "q", "--out", str(tmp_path / "f.json")]) == 0
    assert "wrote" in capsys.readouterr().out
    f = load_session(tmp_path / "f.json")
    np.testing.assert_array_equal(f.w_key, s.w_key)  # only W_q trains
    np.testing.assert_array_equal(f.w_query[0], s.w_query[0])  # only head 1
    assert not np.array_equal(f.w_query[1], s.w_query[1])


def test_rope_preset_with_trained_biases_in_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "fit", "--preset", "rope", "--set", "s=1",
                           "--target", "previous-token", "--train", "q,k,biases", "--steps", "500", "--out", "f.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote f.json: matched the target"), done.stdout
    start = build_preset("rope", {"s": 1.0}).session
    fitted = load_session(tmp_path / "f.json")
    target = np.zeros((6, 6))
    target[np.arange(6), np.maximum(np.arange(6) - 1, 0)] = 1.0
    assert np.abs(compute(start).weights[0] - target).max() > 0.5  # s = 1: far from it before
    assert np.abs(compute(fitted).weights[0] - target).max() < 0.01
    assert fitted.positions == start.positions  # RoPE stays; the gradient went through it
    assert not np.array_equal(fitted.b_query, start.b_query) and not np.array_equal(fitted.w_query, start.w_query)


def test_translate_preset_cross_attention_in_a_real_process(tmp_path):
    # Position instead of meaning: French word i to English word i (chat → black, noir → cat).
    target = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    np.save(tmp_path / "in_order.npy", target)
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "fit", "--preset", "translate", "--target",
                           "in_order.npy", "--train", "q,k,biases", "--steps", "500", "--out", "f.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fitted = load_session(tmp_path / "f.json")
    assert fitted.source == build_preset("translate", {}).session.source
    assert fitted.b_query.shape == (1, 3) and fitted.b_key.shape == (1, 3)  # added, trained and saved
    w = compute(fitted).weights[0]
    assert w.shape == (3, 3) and np.abs(w - target).max() < 0.01


def bad_cases(tmp_path):
    good = ["--preset", "random", "--set", "n=4", "--target", "self"]
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    np.save(tmp_path / "small.npy", np.eye(3))
    np.save(tmp_path / "wide.npy", np.ones((3, 4)))
    return [
        (["--preset", "random", "--target", "next-token"], "unknown target 'next-token'"),
        (good + ["--lr", "fast"], "--lr: the learning rate must be a number"),
        (good + ["--lr", "-1"], "the learning rate must be a number > 0"),
        (good + ["--steps", "lots"], "--steps: must be a whole number"),
        (good + ["--steps", "0"], "steps must be a whole number from 1"),
        (good + ["--optimizer", "rmsprop"], "unknown optimizer 'rmsprop'"),
        (good + ["--train", "v"], "cannot train 'v'"),
        (good + ["--train", "q,bias"], "cannot train 'bias'"),
        (["--preset", "translate", "--target", "previous-token"], "previous-token needs one sequence"),
        (["--preset", "translate", "--target", str(tmp_path / "wide.npy")],
         "must be 3×3 (a row per token, a column per source token), got 3×4"),
        (good + ["--head", "9"], "--head: the session has heads 0..1"),
        (good + ["--head", "x"], "--head: expected a head number or 'all'"),
        (good + ["--dtype", "float16"], "fitting runs in float32 or float64"),
        (good + ["--device", "tpu"], "device 'tpu' is not available"),
        (["--preset", "random", "--set", "n=4", "--target", "window:0"], "W >= 1"),
        (["--preset", "random", "--set", "n=4", "--target", str(tmp_path / "bad.npy")], "bad.npy"),
        (["--preset", "random", "--set", "n=4", "--target", str(tmp_path / "small.npy")], "must be 4×4"),
        (["--preset", "nosuch", "--target", "self"], "nosuch"),
        (["--session", str(tmp_path / "missing.json"), "--target", "self"], "missing.json"),
    ]


def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "f.json"
    for argv, fragment in bad_cases(tmp_path):
        code = main(["fit", *argv, "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, argv
        assert err.count("\n") == 1 and err.startswith("attnexplorer: "), err
        assert fragment in err, (fragment, err)
        assert not out.exists()


@pytest.mark.parametrize("out, fragment", [("f.txt", "is a .json file"), ("nodir/f.json", "does not exist"), (".", "is a .json file")])
def test_bad_out_is_refused_before_any_work(tmp_path, capsys, out, fragment):
    assert main(["fit", "--preset", "random", "--target", "self", "--out", str(tmp_path / out)]) == 2
    assert fragment in capsys.readouterr().err


def test_bad_input_in_a_real_process_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "fit", "--preset", "random", "--target", "self",
                           "--lr", "0", "--out", "f.json"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "learning rate" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "f.json").exists()
