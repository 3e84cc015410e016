"""``attnexplorer predict`` and ``attnexplorer export-model``: the JSON, the readable table, the
saved folder loaded back by transformers, and every refusal (one line, exit 2, nothing written).
The successful runs go through a subprocess, as a user runs them; the refusals in-process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnexplorer import cli
from attnexplorer.io.session_file import session_from_dict
from attnexplorer.models import load_model
from attnexplorer.models.interventions import Behaviour, Interventions

TEXT = "The dog fetched the ball and she was happy"


def _cli(*argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "attnexplorer", *argv], capture_output=True, text=True, env=env,
                          timeout=600)


def _edited_session(loaded, run, layer, path):
    parts = loaded.layer_session(run, layer)
    parts["heads"][1]["W_k"] = (np.asarray(parts["heads"][1]["W_k"]) * -2.0).tolist()
    path.write_text(json.dumps(parts))
    return session_from_dict(parts, "edited")


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2_lm):
    loaded = load_model(str(tiny_gpt2_lm))
    return tiny_gpt2_lm, loaded, Behaviour(loaded, loaded.run(TEXT))


def test_predict_json_is_the_prediction(gpt2, tmp_path):
    folder, loaded, behaviour = gpt2
    edited = _edited_session(loaded, behaviour.run, 1, tmp_path / "layer1.json")
    out = _cli("predict", str(folder), "--text", TEXT, "--ablate", "0.1,2.3", "--layer", "1", "--session",
               str(tmp_path / "layer1.json"), "--top", "4", "--target", " dog", "--versus", " ball", "--logit-lens",
               "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert list(result) == ["tokens", "position", "baseline", "intervened", "target", "logit_lens"]
    expected = behaviour.predict(Interventions().with_ablation(0, 1, "zero").with_ablation(2, 3, "zero")
                                 .with_edit(1, edited), top=4, target=" dog", versus=" ball", lens=True)
    assert result["tokens"] == list(behaviour.run.tokens) and result["position"] == len(behaviour.run.tokens) - 1
    for side in ("baseline", "intervened"):
        assert [e["id"] for e in result[side]["top"]] == [e["id"] for e in expected[side]["top"]]
        assert np.allclose([e["logit"] for e in result[side]["top"]], [e["logit"] for e in expected[side]["top"]],
                           atol=1e-6)
    assert result["intervened"]["interventions"] == ["layer 1 edited", "L0H1 zero", "L2H3 zero"]
    diff = result["target"]["logit_difference"]
    assert abs(diff["baseline"] - expected["target"]["logit_difference"]["baseline"]) < 1e-6
    assert diff["intervened"] != pytest.approx(diff["baseline"])
    assert len(result["logit_lens"]) == loaded.num_layers


def test_predict_prints_a_readable_table(gpt2):
    folder, loaded, behaviour = gpt2
    out = _cli("predict", str(folder), "--text", TEXT, "--ablate", "1.0", "--ablation", "mean", "--top", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == loaded.describe()
    assert "with L1H0 mean" in out.stdout and "Δlogit" in out.stdout
    best = behaviour.predict(top=1)["baseline"]["top"][0]
    assert any(line.split()[:2] == ["1", best["token"]] for line in lines)


def test_export_model_is_loaded_by_transformers_and_predicts_what_the_app_shows(gpt2, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, loaded, behaviour = gpt2
    edited = _edited_session(loaded, behaviour.run, 2, tmp_path / "layer2.json")
    saved = tmp_path / "edited-model"
    out = _cli("export-model", str(folder), "--ablate", "0.2", "--layer", "2", "--session", str(tmp_path / "layer2.json"),
               "--out", str(saved))
    assert out.returncode == 0, out.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in saved.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(str(saved), attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([list(behaviour.run.ids)])).logits[0].double().numpy()
    interventions = Interventions().with_ablation(0, 2, "zero").with_edit(2, edited)
    ours = behaviour.logits(behaviour.residuals(interventions)[-1]).double().numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    unedited = behaviour.logits(torch.from_numpy(behaviour.run.final)).double().numpy()
    assert np.abs(theirs - unedited).max() > 1e-3
    # and attnexplorer opens the saved folder like any other
    again = load_model(str(saved))
    assert np.abs(Behaviour(again, again.run(TEXT)).logits(torch.from_numpy(again.run(TEXT).final)).numpy() - theirs).max() < 1e-4


def _refused(capsys, argv, fragment, out=None):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err and "Traceback" not in err, err
    assert fragment in err, err
    if out is not None:
        assert not out.exists() and not any(p.name.startswith("." + out.name) for p in out.parent.iterdir())


def test_bad_input_is_one_line_and_exit_2(gpt2, tmp_path, capsys):
    folder, loaded, behaviour = gpt2
    model = str(folder)
    predict = ["predict", model, "--text", TEXT]
    _refused(capsys, predict + ["--ablate", "3.0"], "layer 3 is out of range")
    _refused(capsys, predict + ["--ablate", "0.4"], "head 4 is out of range")
    _refused(capsys, predict + ["--ablate", "zero"], "LAYER.HEAD")
    _refused(capsys, predict + ["--ablate", "0.1", "--ablation", "patch"], "needs --patch-text")
    _refused(capsys, predict + ["--ablate", "0.1", "--ablation", "patch", "--patch-text", "dog"], "same token length")
    _refused(capsys, predict + ["--target", " dog ball"], "not one")
    _refused(capsys, predict + ["--versus", " dog"], "--versus needs --target")
    _refused(capsys, predict + ["--position", "40"], "position 40 is out of range")
    _refused(capsys, predict + ["--ablation", "half"], "invalid choice")
    _edited_session(loaded, behaviour.run, 1, tmp_path / "layer1.json")
    _refused(capsys, predict + ["--layer", "2", "--session", str(tmp_path / "layer1.json")], "is layer 1")
    other = tmp_path / "other.json"
    other.write_text(json.dumps(loaded.layer_session(loaded.run("dog dog"), 1)))
    _refused(capsys, predict + ["--layer", "1", "--session", str(other)], "tokens are not the text's")
    _refused(capsys, predict + ["--layer", "1"], "give each --session with the --layer")
    out = tmp_path / "saved"
    export = ["export-model", model, "--out", str(out)]
    _refused(capsys, export + ["--ablate", "0.1", "--ablation", "mean"], "cannot save a mean ablation", out)
    _refused(capsys, export, "nothing to save", out)
    edited_input = loaded.layer_session(behaviour.run, 1)
    edited_input["embeddings"][0][0] += 1.0
    (tmp_path / "input.json").write_text(json.dumps(edited_input))
    _refused(capsys, export + ["--layer", "1", "--session", str(tmp_path / "input.json")], "not a weight", out)
    _refused(capsys, ["export-model", model, "--ablate", "0.1", "--out", str(tmp_path / "no" / "where")], "does not exist")


def test_a_minilm_like_encoder_says_why_there_are_no_tokens(tiny_bert, capsys):
    assert cli.main(["predict", str(tiny_bert), "--text", TEXT, "--ablate", "1.0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["baseline"] is None and "without a masked-LM head" in result["embedding"]["why"]
    assert 0 < result["embedding"]["cosine"] < 1


@pytest.mark.slow
def test_the_packaged_models_through_the_command_line(smollm2, model_cache):
    # SmolLM2 from the session's cache (the fixture filled it): the IOI sentence, a head ablated
    text = "When Mary and John went to the store, John gave a drink to"
    out = _cli("predict", "smollm2", "--text", text, "--ablate", "0.0", "--target", " Mary", "--versus", " John",
               "--top", "3", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["baseline"]["top"][0]["token"] == "␣Mary"
    diff = result["target"]["logit_difference"]
    assert diff["baseline"] > diff["intervened"] > 0
    cached = load_model("smollm2")
    expected = Behaviour(cached, cached.run(text)).predict(Interventions().with_ablation(0, 0, "zero"), top=3,
                                                          target=" Mary", versus=" John")
    assert abs(diff["intervened"] - expected["target"]["logit_difference"]["intervened"]) < 1e-5
    # MiniLM has no LM head: the pooled embedding's cosine, and why
    out = _cli("predict", "minilm", "--text", "The dog fetched the ball", "--ablate", "2.3")
    assert out.returncode == 0, out.stderr
    assert "no tokens to predict" in out.stdout and "cosine similarity to the unedited one 0.9" in out.stdout
