"""Bad input to the model commands (``predict``, ``export-model``, ``import-model``, ``heads``,
``generate``): one line on stderr naming what is wrong, exit status 2, no traceback and no file
written; the same refusal the window gives where the window has the same input."""

import json
import os
import shutil

import numpy as np
import pytest

from attnexplorer import cli
from attnexplorer.models import load_model
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball and she was happy"


def _refused(capsys, argv, *fragments, out=None):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    if out is not None:
        assert not out.exists() and not any(p.name.startswith("." + out.name) for p in out.parent.iterdir())
    return err


def _copy(folder, tmp_path, name):
    return shutil.copytree(folder, tmp_path / name)


def test_an_edit_that_overflows_the_stream_is_not_saved(tiny_gpt2_lm, tmp_path, capsys):
    # a value weight of 1e38 is a float32 number, but the layer's output is infinity: the
    # prediction refused it, and export-model wrote a model that predicts NaN
    loaded = load_model(str(tiny_gpt2_lm))
    parts = loaded.layer_session(loaded.run(TEXT), 1)
    parts["heads"][0]["W_v"] = np.full_like(np.asarray(parts["heads"][0]["W_v"]), 1e38).tolist()
    (tmp_path / "huge.json").write_text(json.dumps(parts))
    out = tmp_path / "saved"
    _refused(capsys, ["export-model", str(tiny_gpt2_lm), "--layer", "1", "--session", str(tmp_path / "huge.json"),
                      "--out", str(out)], "cannot save", "after layer 1", out=out)


def test_a_wrong_shape_weight_is_named_with_both_shapes(tiny_gpt2_lm, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    folder = _copy(tiny_gpt2_lm, tmp_path, "bad-shape")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["transformer.h.1.attn.c_attn.weight"] = tensors["transformer.h.1.attn.c_attn.weight"][:, :60].copy()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    _refused(capsys, ["predict", str(folder), "--text", TEXT], "h.1.attn.c_attn.weight is 24×60",
             "makes it 24×72")
    # through transformers (the reference engine) the same tensor and shapes are named
    with pytest.raises(ModelError, match=r"h\.1\.attn\.c_attn\.weight is 24×60.*24×72"):
        load_model(str(folder), engine="transformers")


def test_an_unknown_activation_is_named_with_the_supported_ones(tiny_llama, tmp_path, capsys):
    folder = _copy(tiny_llama, tmp_path, "bad-act")
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "bogus"
    (folder / "config.json").write_text(json.dumps(config))
    _refused(capsys, ["import-model", str(folder), "--text", TEXT, "--out", str(tmp_path / "l.json")],
             "unknown activation 'bogus'", "hidden_act", "silu", "quick_gelu", out=tmp_path / "l.json")


def test_ablation_without_heads_is_refused(tiny_gpt2_lm, tmp_path, capsys):
    model = str(tiny_gpt2_lm)
    _refused(capsys, ["predict", model, "--text", TEXT, "--ablation", "mean"], "--ablation mean needs --ablate")
    _refused(capsys, ["predict", model, "--text", TEXT, "--ablation", "zero"], "--ablation zero needs --ablate")
    _refused(capsys, ["generate", model, "--text", TEXT, "--steps", "2", "--ablation", "mean"],
             "--ablation mean needs --ablate")


def test_a_target_of_several_tokens_shows_them_as_the_window_does(tiny_gpt2_lm, capsys):
    err = _refused(capsys, ["predict", str(tiny_gpt2_lm), "--text", TEXT, "--target", " happy dog"], "not one")
    assert "Ġ" not in err and "'␣happy' + '␣dog'" in err, err


def test_heads_given_empty_or_twice_are_refused(tiny_gpt2_lm, capsys):
    model = str(tiny_gpt2_lm)
    _refused(capsys, ["predict", model, "--text", TEXT, "--ablate", ""], "--ablate is empty")
    _refused(capsys, ["predict", model, "--text", TEXT, "--ablate", "0.1,2.3,0.1"], "names head 0.1 twice")


def test_heads_command_paths_and_empty_scores(tiny_gpt2_lm, tmp_path, capsys):
    model, out = str(tiny_gpt2_lm), tmp_path / "scores.csv"
    heads = ["heads", model, "--out", str(out)]
    _refused(capsys, heads + ["--text", TEXT, "--scores", " "], "--scores is empty", out=out)
    _refused(capsys, heads + ["--text-file", str(tmp_path)], "is a folder", out=out)
    (tmp_path / "pattern.npy").write_text("not an array")
    err = _refused(capsys, heads + ["--text", TEXT, "--scores", f"pattern:{tmp_path / 'pattern.npy'}"],
                   "not a NumPy .npy file", out=out)
    assert "pickle" not in err


def test_a_broken_model_folder_says_which_file(tiny_gpt2_lm, tmp_path, capsys):
    listed = _copy(tiny_gpt2_lm, tmp_path, "listed")
    (listed / "config.json").write_text("[1, 2]")
    _refused(capsys, ["predict", str(listed), "--text", TEXT], "config.json holds a JSON list")
    empty = _copy(tiny_gpt2_lm, tmp_path, "empty-weights")
    (empty / "model.safetensors").write_bytes(b"")
    _refused(capsys, ["predict", str(empty), "--text", TEXT], "cannot read the weights in model.safetensors")


def test_an_encoder_without_a_head_refuses_prediction_flags(tiny_bert, capsys):
    # they were ignored: the command printed the embeddings' cosine and exit status 0
    _refused(capsys, ["predict", str(tiny_bert), "--text", TEXT, "--target", " dog", "--logit-lens"],
             "--target, --logit-lens need a prediction of tokens", "without a masked-LM head")
    _refused(capsys, ["predict", str(tiny_bert), "--text", TEXT, "--position", "1"], "--position needs a prediction of tokens")


# A folder nothing can be created in, even by root (the CI's user may be either): Linux's /proc.
UNWRITABLE = "/proc/attnexplorer-test"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_folder_that_cannot_be_made_is_one_line_and_nothing_is_written(tiny_gpt2_lm, tmp_path, capsys):
    model = str(tiny_gpt2_lm)
    _refused(capsys, ["export-model", model, "--ablate", "0.1", "--out", UNWRITABLE], f"cannot write {UNWRITABLE}")
    session, scores = tmp_path / "layer0.json", tmp_path / "scores.csv"
    _refused(capsys, ["import-model", model, "--text", TEXT, "--out", str(session), "--figures", "png",
                      "--out-figures", UNWRITABLE], "cannot create the folder", out=session)
    _refused(capsys, ["heads", model, "--text", TEXT, "--out", str(scores), "--figures", "png",
                      "--out-figures", UNWRITABLE], "cannot create the folder", out=scores)
    (tmp_path / "a-file").write_text("x")
    _refused(capsys, ["import-model", model, "--text", TEXT, "--out", str(session), "--figures", "png",
                      "--out-figures", str(tmp_path / "a-file")], "is a file", out=session)
