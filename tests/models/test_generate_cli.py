"""``attnexplorer generate``: the growing text, the JSON, the trace, and every refusal (one line,
exit 2). The successful runs go through a subprocess, as a user runs them; the refusals in-process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from attnexplorer import cli
from attnexplorer.models import load_model
from attnexplorer.models.generation import Generation, Sampling
from attnexplorer.models.interventions import Behaviour, Interventions

TEXT = "The dog fetched the ball"


def _cli(*argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "attnexplorer", *argv], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def gpt2(long_gpt2_lm):
    loaded = load_model(str(long_gpt2_lm))
    return long_gpt2_lm, loaded, Behaviour(loaded, loaded.run(TEXT))


def test_json_and_trace_are_the_generation(gpt2, tmp_path):
    folder, loaded, behaviour = gpt2
    trace = tmp_path / "run.npz"
    out = _cli("generate", str(folder), "--text", TEXT, "--steps", "6", "--temperature", "1.3", "--top-k", "40",
               "--seed", "5", "--ablate", "0.1,2.3", "--ablation", "mean", "--json", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    expected = Generation(behaviour, Interventions().with_ablation(0, 1, "mean").with_ablation(2, 3, "mean"),
                          Sampling(greedy=False, temperature=1.3, top_k=40, seed=5))
    steps = expected.run(6)
    assert result["generated"]["ids"] == [s.token_id for s in steps]
    assert result["ids"] == expected.ids and result["prompt"]["ids"] == list(behaviour.run.ids)
    assert result["interventions"] == ["L0H1 mean", "L2H3 mean"]
    assert [len(s["top"]) for s in result["steps"]] == [5] * len(steps)
    assert result["steps"][0]["top"][0]["id"] == steps[0].top[0]["id"]
    assert abs(sum(t["prob"] for t in result["steps"][0]["top"]) - sum(t["prob"] for t in steps[0].top)) < 1e-9
    assert result["cache"]["bytes"] == result["cache"]["numbers"] * 4 == steps[-1].cache_bytes
    saved = np.load(trace)
    n = len(behaviour.run.ids)
    assert saved["attention"].shape == (len(steps), loaded.num_layers, loaded.num_heads, n + len(steps))
    assert list(saved["keys"]) == list(range(n + 1, n + len(steps) + 1))
    for i, s in enumerate(steps):
        assert np.abs(saved["attention"][i, :, :, :s.attention.shape[-1]] - s.attention).max() < 1e-6
        assert not saved["attention"][i, :, :, s.attention.shape[-1]:].any()
    assert list(saved["cache_bytes"]) == [s.cache_bytes for s in steps]
    assert list(saved["ids"]) == [s.token_id for s in steps]


def test_the_text_grows_on_stdout(gpt2):
    folder, loaded, behaviour = gpt2
    out = _cli("generate", str(folder), "--text", TEXT, "--steps", "5", "--greedy")
    assert out.returncode == 0, out.stderr
    generation = Generation(behaviour)
    generation.run(5)
    assert out.stdout == TEXT + generation.generated_text() + "\n"
    assert "5 tokens added" in out.stderr and "greedy" in out.stderr


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps 0"),
    (["--steps", "3", "--greedy", "--seed", "1"], "--greedy"),
    (["--steps", "3", "--temperature", "0"], "--temperature"),
    (["--steps", "3", "--top-p", "2"], "--top-p"),
    (["--steps", "3", "--top-k", "0"], "--top-k"),
    (["--steps", "3", "--ablate", "9.0"], "out of range"),
    (["--steps", "3", "--ablation", "patch", "--ablate", "0.0"], "invalid choice"),
    (["--steps", "3", "--trace", "out.txt"], ".npz"),
    (["--steps", "3", "--trace", "/no/such/folder/t.npz"], "does not exist"),
    (["--steps", "3", "--layer", "1"], "--session"),
])
def test_bad_input_is_one_line_and_exit_2(gpt2, capsys, argv, message):
    folder, _loaded, _behaviour = gpt2
    assert cli.main(["generate", str(folder), "--text", TEXT, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_an_encoder_is_refused(tiny_bert_mlm, capsys):
    assert cli.main(["generate", str(tiny_bert_mlm), "--text", "the dog", "--steps", "2"]) == 2
    assert "not a decoder" in capsys.readouterr().err
