"""A real model on a long text: no layer's n × n weights kept, and the opened layer still the
model's own numbers.

The tiny random models stand in for SmolLM2 at 4,096 tokens: ``DENSE_RUN_BYTES`` is set to 0
so that their few-token texts run the long way (attention a block of rows at a time, pooled
thumbnails, log Σ exp per query, sampled attention outputs), and ``DENSE_BUDGET`` to 0 so that
the opened layer is computed by the streamed path. Each is compared with the same model's
ordinary run, which keeps every weight.
"""

import json

import numpy as np
import pytest

from model_reference import reference

from attnexplorer import cli
from attnexplorer.core.compute.long import result as long_result
from attnexplorer.io.session_file import session_from_dict
from attnexplorer.models import Cancelled, load_model, loading
from attnexplorer.models import forward as own_forward
from attnexplorer.models.views import long_badge_text, long_differences

TEXTS = {"tiny_bert": "The dog fetched the ball and she was happy",
         "tiny_gpt2": "The dog fetched the ball and she was happy because the cat sat on the mat",
         "tiny_llama": "The dog fetched the ball and she was happy because life is short, eat dessert first"}
# the families of issue 26: Qwen2's sliding layer and Mistral's window cut across the blocks
TEXTS.update(tiny_qwen2_lm=TEXTS["tiny_llama"], tiny_mistral_lm=TEXTS["tiny_llama"], tiny_roberta_mlm=TEXTS["tiny_bert"],
             tiny_distilbert_mlm=TEXTS["tiny_bert"],
             # Gemma 2's soft-cap and alternating window, Gemma 3's QK-norm and two RoPEs, OLMo 2's
             # QK-norm over the whole projection, GPT-NeoX's partial rotation
             tiny_gemma2_lm=TEXTS["tiny_llama"], tiny_gemma3_lm=TEXTS["tiny_llama"],
             tiny_olmo2_lm=TEXTS["tiny_llama"], tiny_neox_lm=TEXTS["tiny_llama"])


@pytest.fixture
def long_runs(monkeypatch):
    """Every text runs the long way, in blocks of a few rows, pooled 4 × 4 thumbnails."""
    def force():
        monkeypatch.setattr(loading, "DENSE_RUN_BYTES", 0)
        monkeypatch.setattr(own_forward, "THUMBNAIL_CELLS", 4)
        monkeypatch.setattr(own_forward, "BLOCK_BYTES", 1)   # one pooled row of cells per block
        monkeypatch.setattr(own_forward, "OUTPUT_ROWS", 4)
    return force


def _max_pool(a: np.ndarray, f: int) -> np.ndarray:
    *lead, n, m = a.shape
    out = np.zeros((*lead, -(-n // f), -(-m // f)), dtype=a.dtype)
    for i in range(out.shape[-2]):
        for j in range(out.shape[-1]):
            out[..., i, j] = a[..., i * f:(i + 1) * f, j * f:(j + 1) * f].max(axis=(-1, -2))
    return out


@pytest.mark.parametrize("name", list(TEXTS))
def test_a_long_run_keeps_the_models_numbers_without_its_weights(name, request, long_runs):
    loaded = load_model(str(request.getfixturevalue(name)))
    text = TEXTS[name]
    dense = loaded.run(text)
    long_runs()
    run = loaded.run(text)
    n = len(run.ids)
    assert run.long and not dense.long and run.attentions is None and n > 8
    f = -(-n // 4)
    assert run.thumbnails.shape == (loaded.num_layers, loaded.num_heads, -(-n // f), -(-n // f))
    # the thumbnails are the model's weights max-pooled, each block's largest weight
    assert np.abs(run.thumbnails - _max_pool(dense.attentions, f)).max() < 1e-5
    for x, y in zip(run.layer_inputs, dense.layer_inputs):   # float32 rounding, as test_own_forward allows
        assert np.abs(x - y).max() < 1e-4
    rows = run.output_rows
    assert 1 < len(rows) < n and rows[0] == 0
    assert np.abs(run.attention_outputs - dense.attention_outputs[:, rows]).max() < 1e-4
    assert run.log_sum_exp.shape == (loaded.num_layers, loaded.num_heads, n)


@pytest.mark.parametrize("name", list(TEXTS))
def test_an_opened_long_layer_goes_the_streamed_way_and_equals_the_model(name, request, long_runs, monkeypatch):
    loaded = load_model(str(request.getfixturevalue(name)))
    dense = loaded.run(TEXTS[name])
    long_runs()
    monkeypatch.setattr(long_result, "DENSE_BUDGET", 0)
    run = loaded.run(TEXTS[name])
    n = len(run.ids)
    for layer in range(loaded.num_layers):
        session = session_from_dict(loaded.layer_parts(run, layer), f"layer {layer}")
        assert long_result.is_long(session)
        result = long_result.compute_any(session)
        assert result.weights is None and result.streamed is not None
        for h in range(loaded.num_heads):
            tile = result.streamed.tile(h, slice(0, n), slice(0, n))
            assert np.abs(tile - dense.attentions[layer, h]).max() < 1e-5, (layer, h)
        assert np.abs(result.output - dense.attention_outputs[layer]).max() < 1e-4, layer
        found = long_differences(run, layer, result.output, result.streamed.log_sum_exp)
        assert found["output"] < 1e-4 and found["lse"] < 1e-4, found
        assert long_badge_text(found).startswith("matches the model: attention output max |Δ| = ")
    # an edit of the tables shows: the badge says by how much
    x = session.embeddings.copy()
    x[3, 0] += 3.0
    edited = long_result.compute_any(session.replace(embeddings=x))
    found = long_differences(run, layer, edited.output, edited.streamed.log_sum_exp)
    assert long_badge_text(found).startswith("edited: the attention output differs from the model's by up to")


def test_llama_long_layer_keeps_rope_rmsnorm_and_shared_kv_heads(tiny_llama, long_runs):
    loaded = load_model(str(tiny_llama))
    long_runs()
    run = loaded.run(TEXTS["tiny_llama"])
    s = json.loads(json.dumps(loaded.layer_session(run, 1)))
    assert len(s["heads"]) == 4 and len(s["kv_heads"]) == 2
    assert s["positions"]["kind"] == "rope" and s["norm"]["kind"] == "rms" and s["mask"] == "causal"
    weights, output = reference(s)   # float64, written apart from the engine
    assert np.abs(output[run.output_rows] - run.attention_outputs[1]).max() < 1e-4
    # the thumbnails (here 4 × 4 cells) are the reference weights max-pooled
    f = -(-len(run.ids) // 4)
    assert np.abs(run.thumbnails[1] - _max_pool(weights, f)).max() < 1e-5


def test_a_model_opened_through_transformers_runs_a_long_text_with_the_own_forward(tiny_llama, long_runs):
    reference_model = load_model(str(tiny_llama), engine="transformers")
    dense = reference_model.run(TEXTS["tiny_llama"])
    long_runs()
    run = reference_model.run(TEXTS["tiny_llama"])
    assert run.long and reference_model.engine == "transformers"
    assert np.abs(run.attention_outputs - dense.attention_outputs[:, run.output_rows]).max() < 1e-4


def test_progress_comes_layer_by_layer_and_cancel_stops_the_run(tiny_gpt2, long_runs):
    loaded = load_model(str(tiny_gpt2))
    long_runs()
    said = []
    loaded.run(TEXTS["tiny_gpt2"], progress=lambda f, m: said.append((f, m)))
    assert [f for f, _m in said] == [0.0, 0.5, 1.0]
    assert said[1][1].endswith("layer 2 of 2") and "tokens" in said[0][1]
    said.clear()
    with pytest.raises(Cancelled):
        loaded.run(TEXTS["tiny_gpt2"], progress=lambda f, m: said.append(f), cancelled=lambda: bool(said))
    assert said == [0.0]   # stopped inside layer 1, between two blocks


def test_import_model_shows_a_bar_for_a_long_text(tiny_gpt2, tmp_path, capsys, long_runs):
    loaded = load_model(str(tiny_gpt2))
    dense = loaded.run(TEXTS["tiny_gpt2"])
    long_runs()
    out = tmp_path / "layer1.json"
    assert cli.main(["import-model", str(tiny_gpt2), "--text", TEXTS["tiny_gpt2"], "--layer", "1",
                     "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "\r[" + "#" * 30 + "] tiny-gpt2" in err and "ran all 2 layers" in err
    weights, output = reference(json.loads(out.read_text()))
    assert np.abs(weights - dense.attentions[1]).max() < 1e-5


def test_long_badge_texts():
    found = {"output": 2e-5, "output_scale": 40.0, "lse": 3e-6, "lse_scale": 9.0, "rows": 512}
    assert long_badge_text(found) == ("matches the model: attention output max |Δ| = 2e-5 on 512 queries, "
                                      "every row's log Σ exp max |Δ| = 3e-6 (checked to 1e-4 of the values' size)")
    assert long_badge_text(dict(found, lse=None)) == ("matches the model: attention output max |Δ| = 2e-5 on 512 "
                                                      "queries (checked to 1e-4 of the values' size)")
    assert long_badge_text(dict(found, output=0.5)).startswith("edited: the attention output differs")
    assert "normalisers by up to 0.1" in long_badge_text(dict(found, lse=0.1))
    assert long_badge_text(dict(found, output=float("inf"))).startswith("edited: the shape no longer")


def test_the_bench_row_reads_as_figures():
    from attnexplorer.bench.real_models import format_rows

    row = {"kind": "long", "model": "smollm2", "tokens": 4096, "layer": 12, "heads": 9, "streamed": True,
           "run_s": 61.0, "layer_s": 9.5, "seconds": 70.5, "peak_mb": 1500.0, "target_peak_mb": 2048, "met": True,
           "longest_block_ms": 40.0, "badge": "Tables: layer 12: matches the model", "load_before": 1.0,
           "load_after": 2.0}
    lines = format_rows([row])
    assert "4,096 tokens, layer 12 × 9 heads" in lines[1] and "peak memory 1500 MB (target < 2048)  ok" in lines[1]
    assert "longest GUI block 40 ms" in lines[2] and "load average 1.00 before" in lines[3]
    assert "MISSED" in format_rows([dict(row, peak_mb=2100.0, met=False)])[1]
    assert "not measured: boom" in format_rows([{"kind": "long", "model": "smollm2", "seconds": None,
                                                 "error": "boom"}])[1]
