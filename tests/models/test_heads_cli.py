"""``attnexplorer heads``: the CSV and JSON rows against the library's numbers, every refusal (one
line, exit 2, nothing written), and SmolLM2's induction heads on the repeated probe (slow)."""

import csv
import json

import numpy as np
import pytest

from attnexplorer import cli
from attnexplorer.models import load_model
from attnexplorer.models.head_attribution import direct_logit_attribution, pick
from attnexplorer.models.head_scores import HeadScores, make_probe, parse_scores
from attnexplorer.models.interventions import Behaviour

TEXT = "the dog fetched the ball and the dog was happy"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_heads_writes_one_row_per_head_with_scores_and_dla(tiny_llama_lm, tmp_path, capsys):
    out = tmp_path / "scores.csv"
    assert cli.main(["heads", str(tiny_llama_lm), "--text", TEXT, "--attribution", "dla", "--target", " ball",
                     "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    rows = _rows(out)
    loaded = load_model(str(tiny_llama_lm))
    assert [(int(r["layer"]), int(r["head"])) for r in rows] == [(layer, head) for layer in range(loaded.num_layers)
                                                                  for head in range(loaded.num_heads)]
    assert list(rows[0]) == ["layer", "head", "previous-token", "first-token", "self", "window:3", "duplicate-token",
                             "induction", "dla"]
    assert json.loads(captured.out) == [{k: (int(v) if k in ("layer", "head") else float(v)) for k, v in r.items()}
                                        for r in rows]
    ids = loaded.tokenize(TEXT)[0]
    scorer = HeadScores(parse_scores("self"), ids, loaded.num_layers, loaded.num_heads)
    run = loaded.run(TEXT, observe=scorer)
    assert np.allclose([float(r["self"]) for r in rows], scorer.result()["self"].ravel(), atol=1e-12)
    behaviour = Behaviour(loaded, run)
    dla, rest, logit = direct_logit_attribution(behaviour, pick(behaviour, " ball"))
    assert np.allclose([float(r["dla"]) for r in rows], dla.ravel(), atol=1e-9)
    assert f"= heads {dla.sum():.4f} + rest {rest:.4f}" in captured.err


def test_heads_on_a_probe_and_an_ablation_sweep(tiny_gpt2_lm, tmp_path, capsys):
    out = tmp_path / "probe.csv"
    assert cli.main(["heads", str(tiny_gpt2_lm), "--probe", "repeated:6:2", "--scores", "induction,window:2",
                     "--attribution", "ablate:zero", "--target", " ball", "--versus", " dog", "--out", str(out)]) == 0
    rows = _rows(out)
    assert list(rows[0]) == ["layer", "head", "induction", "window:2", "ablate_zero"]
    loaded = load_model(str(tiny_gpt2_lm))
    probe = make_probe(loaded, "repeated:6:2")
    scorer = HeadScores(parse_scores("induction"), probe.ids, loaded.num_layers, loaded.num_heads, probe)
    loaded.run_ids(list(probe.ids), [loaded.tokenizer.piece(i) for i in probe.ids], probe.name, observe=scorer)
    assert np.allclose([float(r["induction"]) for r in rows], scorer.result()["induction"].ravel(), atol=1e-12)
    assert any(abs(float(r["ablate_zero"])) > 1e-4 for r in rows)


@pytest.mark.parametrize("argv, words", [
    (["--out", "X"], "exactly one of --text"),
    (["--text", "a", "--probe", "repeated:3", "--out", "X"], "exactly one of --text"),
    (["--text", "  ", "--out", "X"], "the text is empty"),
    (["--probe", "repeated:zero", "--out", "X"], "repeated:N"),
    (["--text-file", "/nonexistent.txt", "--out", "X"], "no such file"),
    (["--text", "a", "--scores", "induktion", "--out", "X"], "unknown score"),
    (["--text", "a", "--attribution", "dla", "--out", "X"], "needs --target"),
    (["--text", "a", "--attribution", "logit", "--target", " a", "--out", "X"], "choose dla"),
    (["--text", "a", "--target", " a", "--out", "X"], "are for --attribution"),
    (["--text", "a", "--out", "/nonexistent/x.csv"], "does not exist"),
    (["--text", TEXT, "--attribution", "dla", "--target", " dogball", "--out", "X"], "not one"),
    (["--text", TEXT, "--attribution", "dla", "--target", " ball", "--position", "99", "--out", "X"], "out of range"),
    (["--text", "a", "--scores", "pattern:{tmp}/eye.npy", "--out", "X"], "the target is 3 × 3"),
    (["--probe", "repeated:40", "--out", "X"], "reads at most"),
    (["--probe", "the dog", "--out", "X"], "repeated:N"),
    (["--text", "repeated:3:x", "--out", "X"], "repeated:N or repeated:N:SEED"),
    (["--text", TEXT, "--attribution", "ablate:patch", "--target", " ball", "--out", "X"], "needs --patch-text"),
    (["--text", TEXT, "--attribution", "ablate:zero", "--target", " ball", "--patch-text", TEXT, "--out", "X"],
     "only for --attribution ablate:patch"),
    (["--text", TEXT, "--attribution", "ablate:patch", "--target", " ball", "--patch-text", "the dog", "--out", "X"],
     "the patch text is 2 tokens long; the text is 10"),
    (["--text", TEXT, "--attribution", "ablate:patch", "--target", " ball", "--patch-text", "repeated:0",
      "--out", "X"], "repeated:N"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_gpt2_lm, tmp_path, capsys, argv, words):
    np.save(tmp_path / "eye.npy", np.eye(3))
    argv = [a.replace("{tmp}", str(tmp_path)).replace("X", str(tmp_path / "out.csv")) if a != "X" else
            str(tmp_path / "out.csv") for a in argv]
    assert cli.main(["heads", str(tiny_gpt2_lm), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "out.csv").exists()


def test_dla_on_bert_is_refused(tiny_bert_mlm, tmp_path, capsys):
    assert cli.main(["heads", str(tiny_bert_mlm), "--text", "the dog fetched the [MASK]", "--attribution", "dla",
                     "--target", "ball", "--out", str(tmp_path / "s.csv")]) == 2
    assert "pre-norm decoder" in capsys.readouterr().err


@pytest.mark.slow
def test_smollm2_induction_heads_on_the_repeated_probe(smollm2):
    """The issue's induction heads (TransformerLens on SmolLM2's weights: L18H6, L17H3, L17H4) on
    a probe long enough (512 tokens: SmolLM2's tokenizer adds no BOS) that the forward runs a
    block of rows at a time. Seed 0 ranks L18H6 0.875, L17H3 0.832, L18H7 0.701, L17H4 0.569."""
    probe = make_probe(smollm2, "repeated:256")
    scorer = HeadScores(parse_scores("induction"), probe.ids, smollm2.num_layers, smollm2.num_heads, probe)
    run = smollm2.run_ids(list(probe.ids), [smollm2.tokenizer.piece(i) for i in probe.ids], probe.name, observe=scorer)
    assert run.long
    scores = scorer.result()["induction"]
    ranked = [divmod(int(i), smollm2.num_heads) for i in np.argsort(-scores, axis=None)[:5]]
    assert ranked[:2] == [(18, 6), (17, 3)] and (17, 4) in ranked
    assert scores[18, 6] > 0.85 and np.median(scores) < 0.05


def test_heads_writes_each_columns_heatmap_as_figures(tiny_gpt2, tmp_path, capsys):
    figures = tmp_path / "figures"
    assert cli.main(["heads", str(tiny_gpt2), "--text", TEXT, "--scores", "self,window:2", "--out",
                     str(tmp_path / "s.csv"), "--figures", "png,svg", "--out-figures", str(figures)]) == 0
    assert sorted(p.name for p in figures.iterdir()) == ["heads-self.png", "heads-self.svg", "heads-window_2.png",
                                                         "heads-window_2.svg"]
    assert "window:2" in (figures / "heads-window_2.svg").read_text()
    assert cli.main(["heads", str(tiny_gpt2), "--text", TEXT, "--out", str(tmp_path / "t.csv"),
                     "--figures", "png"]) == 2
    assert "together" in capsys.readouterr().err and not (tmp_path / "t.csv").exists()
    assert cli.main(["heads", str(tiny_gpt2), "--text", TEXT, "--out", str(tmp_path / "t.csv"),
                     "--figures", "gif", "--out-figures", str(figures)]) == 2
    assert "unknown format 'gif'" in capsys.readouterr().err


def test_heads_patch_sweep_and_a_probe_given_as_the_text(tiny_gpt2_lm, tmp_path, capsys):
    from attnexplorer.models.head_attribution import ablation_sweep

    out = tmp_path / "patch.csv"
    other = "the ball fetched the dog and the ball was happy"
    assert cli.main(["heads", str(tiny_gpt2_lm), "--text", TEXT, "--scores", "self", "--attribution", "ablate:patch",
                     "--target", " ball", "--patch-text", other, "--out", str(out)]) == 0
    rows = _rows(out)
    assert list(rows[0]) == ["layer", "head", "self", "ablate_patch"]
    loaded = load_model(str(tiny_gpt2_lm))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    effects, _base = ablation_sweep(behaviour, pick(behaviour, " ball"), "patch", patch_text=other)
    assert np.allclose([float(r["ablate_patch"]) for r in rows], effects.ravel(), atol=1e-9)
    assert np.abs(effects).max() > 1e-4
    # a probe typed as the text is the probe (the window's text box reads it so too)
    by_text, by_probe = tmp_path / "t.csv", tmp_path / "p.csv"
    assert cli.main(["heads", str(tiny_gpt2_lm), "--text", "repeated:6:2", "--scores", "induction", "--out", str(by_text)]) == 0
    assert cli.main(["heads", str(tiny_gpt2_lm), "--probe", "repeated:6:2", "--scores", "induction", "--out", str(by_probe)]) == 0
    assert by_text.read_text() == by_probe.read_text()
