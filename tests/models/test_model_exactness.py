"""Every layer and every head of an imported model reproduces the model itself.

For each layer the session written by the import is recomputed from its own numbers (float64,
``model_reference``) and compared with what the model reported on the same text: its
``output_attentions`` (eager attention) within 1e-5, and its attention module's output before
the residual add within 1e-4.
"""

import json

import numpy as np
import pytest

from model_reference import attention_input, reference

from attnexplorer.models import load_model

TEXT = "The dog fetched the ball and she was happy"


def _check_every_layer(loaded, text=TEXT):
    run = loaded.run(text)
    assert run.attentions.shape == (loaded.num_layers, loaded.num_heads, len(run.ids), len(run.ids))
    worst_w = worst_o = 0.0
    for layer in range(loaded.num_layers):
        session = loaded.layer_session(run, layer)
        if layer == 0:   # what a file holds: the JSON round trip loses nothing
            session = json.loads(json.dumps(session))
        weights, output = reference(session)
        assert weights.shape == run.attentions[layer].shape
        worst_w = max(worst_w, float(np.abs(weights - run.attentions[layer]).max()))
        worst_o = max(worst_o, float(np.abs(output - run.attention_outputs[layer]).max()))
        assert worst_w < 1e-5 and worst_o < 1e-4, (layer, worst_w, worst_o)
    return run, worst_w, worst_o


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_gpt2", "tiny_llama"])
def test_tiny_models_match_every_layer_and_head(name, request):
    loaded = load_model(str(request.getfixturevalue(name)))
    run, _w, _o = _check_every_layer(loaded)
    # the weights are not trivially uniform: the check above would pass an all-equal matrix too easily
    assert run.attentions.std() > 0.05
    assert "[UNK]" not in run.tokens


def test_tiny_llama_shares_kv_heads_and_rotates(tiny_llama):
    loaded = load_model(str(tiny_llama))
    s = loaded.layer_session(loaded.run(TEXT), 1)
    assert len(s["heads"]) == 4 and len(s["kv_heads"]) == 2
    assert set(s["heads"][0]) == {"W_q", "b_q"}
    assert s["positions"] == {"kind": "rope", "theta": 500.0, "dims": 8, "layout": "half", "offset": 0,
                              "scaling": None, "angles": "float32"}   # the model's float32 angles
    assert s["norm"]["kind"] == "rms" and s["mask"] == "causal"
    # without the rotation the weights differ: RoPE is doing real work in the match above
    unrotated = dict(s, positions=None)
    assert np.abs(reference(unrotated)[0] - reference(s)[0]).max() > 1e-3


def test_bert_layer0_is_embeddings_positions_and_the_embedding_layernorm(tiny_bert):
    loaded = load_model(str(tiny_bert))
    run = loaded.run(TEXT)
    s0 = loaded.layer_session(run, 0)
    assert s0["positions"]["kind"] == "learned" and len(s0["positions"]["table"]) == len(run.ids)
    assert s0["norm"]["kind"] == "layer" and s0["mask"] == "none"
    # E + P through the norm is exactly what layer 0 reads
    assert np.abs(attention_input(s0) - run.layer_inputs[0]).max() < 1e-5
    s1 = loaded.layer_session(run, 1)
    assert s1["positions"] is None and s1["norm"] is None
    assert run.tokens[0] == "[CLS]" and run.tokens[-1] == "[SEP]"


def test_gpt2_splits_the_fused_conv1d(tiny_gpt2):
    loaded = load_model(str(tiny_gpt2))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 0)
    from transformers import GPT2Model

    model = GPT2Model.from_pretrained(str(tiny_gpt2))
    w = model.h[0].attn.c_attn.weight.detach().numpy()   # the model's own Conv1D: in × out, q | k | v
    d, dk = 24, 6
    assert np.array_equal(np.asarray(s["heads"][1]["W_k"]), w[:, d + dk:d + 2 * dk])
    assert s["positions"]["kind"] == "learned" and s["norm"]["kind"] == "layer"
    assert run.tokens[1].startswith("␣")   # " dog" shown with a visible space


@pytest.mark.slow
def test_minilm_matches_every_layer_and_head(minilm):
    assert (minilm.num_layers, minilm.num_heads, minilm.head_dim) == (6, 12, 32)
    run, worst_w, worst_o = _check_every_layer(minilm)
    assert run.tokens[:3] == ("[CLS]", "the", "dog") and run.tokens[-1] == "[SEP]"
    s = minilm.layer_session(run, 0)
    assert all(h["b_q"] is not None for h in s["heads"])


@pytest.mark.slow
def test_smollm2_matches_every_layer_and_head(smollm2):
    assert (smollm2.num_layers, smollm2.num_heads, smollm2.num_kv_heads, smollm2.head_dim) == (30, 9, 3, 64)
    run, _w, _o = _check_every_layer(smollm2)
    assert run.tokens[:3] == ("The", "␣dog", "␣fet")
    s = smollm2.layer_session(run, 0)
    assert s["positions"]["theta"] == 100000.0 and len(s["kv_heads"]) == 3


@pytest.mark.slow
def test_smollm2_second_open_reads_the_cache_and_agrees(smollm2, model_cache):
    # the first open dequantised the GGUF file through transformers; the second reads the cache
    # with attnexplorer's own forward, and must say what transformers said on the GGUF file
    assert not smollm2.from_cache and smollm2.engine == "transformers"
    cached = load_model("smollm2")
    assert cached.from_cache and cached.engine == "attnexplorer"
    a, b = smollm2.run("Attention is all"), cached.run("Attention is all")
    assert a.tokens == b.tokens and a.ids == b.ids
    assert np.abs(a.attentions - b.attentions).max() < 1e-5
    assert np.abs(a.attention_outputs - b.attention_outputs).max() < 1e-4
