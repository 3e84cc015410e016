"""Phi-3, GPT-NeoX / Pythia, Gemma and SmolLM3 (issue 26): what each family's session holds, and
its own part checked where it shows. ``test_families.py`` holds every layer and head of each to
transformers' eager attention, its logits and generation; here each family's difference from
Llama is checked to be read from the right place: a session built from a wrong reading would
fail those, and these say which part."""

import shutil

import numpy as np
import pytest
import torch

from model_folders import config_variant as _with_config
from model_reference import reference

from attnexplorer.models import load_model
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball and she was happy"


def _same_as_transformers(folder):
    own, theirs = load_model(str(folder)), load_model(str(folder), engine="transformers")
    assert own.engine == "attnexplorer", own.notes
    a, b = own.run(TEXT), theirs.run(TEXT)
    assert np.abs(a.attentions - b.attentions).max() < 1e-5
    assert np.abs(a.attention_outputs - b.attention_outputs).max() < 1e-4
    assert np.abs(a.final - b.final).max() < 1e-4
    return own, a


def test_phi3_splits_its_fused_projections_and_rotates_half_of_each_head(tiny_phi3_lm):
    from safetensors import safe_open

    loaded = load_model(str(tiny_phi3_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 0)
    assert s["positions"]["dims"] == 4 and s["mask"] == {"window": 4} and len(s["kv_heads"]) == 2
    with safe_open(str(tiny_phi3_lm / "model.safetensors"), framework="pt") as fh:
        fused = fh.get_tensor("model.layers.0.self_attn.qkv_proj.weight").numpy()
    # query head 1 is rows 8..16, K/V head 1 rows 32 + 8..16 and 48 + 8..16 of qkv_proj
    assert np.array_equal(np.asarray(s["heads"][1]["W_q"], np.float32), fused[8:16].T)
    assert np.array_equal(np.asarray(s["kv_heads"][1]["W_k"], np.float32), fused[40:48].T)
    assert np.array_equal(np.asarray(s["kv_heads"][1]["W_v"], np.float32), fused[56:64].T)
    # a full rotation would be another model
    full = dict(s, positions=dict(s["positions"], dims=8))
    assert np.abs(reference(full)[0] - run.attentions[0]).max() > 1e-3


def test_neox_reads_its_per_head_fused_qkv_layernorms_and_partial_rotary(tiny_neox_lm):
    from safetensors import safe_open

    loaded = load_model(str(tiny_neox_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 1)
    assert s["norm"]["kind"] == "layer" and s["norm"]["bias"] is not None
    assert s["positions"]["dims"] == 4 and s["positions"]["theta"] == 500.0 and s["b_o"] is not None
    with safe_open(str(tiny_neox_lm / "model.safetensors"), framework="pt") as fh:
        fused = fh.get_tensor("gpt_neox.layers.1.attention.query_key_value.weight").numpy()
        bias = fh.get_tensor("gpt_neox.layers.1.attention.query_key_value.bias").numpy()
    # head h's query, key and value are rows h·24 + 0/8/16 … + 8
    assert np.array_equal(np.asarray(s["heads"][2]["W_q"], np.float32), fused[48:56].T)
    assert np.array_equal(np.asarray(s["kv_heads"][2]["W_k"], np.float32), fused[56:64].T)
    assert np.array_equal(np.asarray(s["kv_heads"][2]["b_v"], np.float32), bias[64:72])


def test_neox_without_the_parallel_residual(tiny_neox_lm, tmp_path):
    folder = _with_config(tiny_neox_lm, tmp_path, "neox-sequential", use_parallel_residual=False)
    sequential, run = _same_as_transformers(folder)
    parallel = load_model(str(tiny_neox_lm)).run(TEXT)
    assert np.abs(parallel.final - run.final).max() > 1e-3   # the switch does change the model


def test_neox_hub_config_with_rotary_pct_and_rotary_emb_base(tiny_neox_lm, tmp_path):
    """Pythia's config.json on the hub says rotary_pct and rotary_emb_base, not rope_parameters."""
    folder = _with_config(tiny_neox_lm, tmp_path, "neox-legacy", rope_parameters=None, rotary_pct=0.25,
                          rotary_emb_base=1000)
    loaded, run = _same_as_transformers(folder)
    positions = loaded.layer_session(run, 0)["positions"]
    assert positions["dims"] == 2 and positions["theta"] == 1000.0


def test_gemma_scales_its_embeddings_and_norms_by_one_plus_w(tiny_gemma_lm):
    from safetensors import safe_open

    loaded = load_model(str(tiny_gemma_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 0)
    with safe_open(str(tiny_gemma_lm / "model.safetensors"), framework="pt") as fh:
        w = fh.get_tensor("model.layers.0.input_layernorm.weight")
        table = fh.get_tensor("model.embed_tokens.weight")
    assert np.array_equal(np.asarray(s["norm"]["weight"], np.float32), (1.0 + w).numpy())
    scaled = (table[list(run.ids)] * torch.tensor(32 ** 0.5)).numpy()
    assert np.array_equal(np.asarray(s["embeddings"], np.float32), scaled)
    assert loaded.layer_session(run, 1)["positions"]["dims"] == 8


def test_gemma_legacy_gelu_means_the_tanh_one(tiny_gemma_lm, tmp_path):
    folder = _with_config(tiny_gemma_lm, tmp_path, "gemma-gelu", hidden_act="gelu")
    _same_as_transformers(folder)


def test_smollm3_skips_rope_on_its_nope_layer(tiny_smollm3_lm):
    loaded = load_model(str(tiny_smollm3_lm))
    run = loaded.run(TEXT)
    first, second = (loaded.layer_session(run, layer) for layer in range(2))
    assert first["positions"]["kind"] == "rope" and first["mask"] == "causal"
    assert second["positions"] is None and second["mask"] == {"window": 3}
    assert np.all(np.tril(run.attentions[1][0], -3) == 0)


def test_a_missing_fused_tensor_is_named_as_the_file_names_it(tiny_phi3_lm, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "phi3-broken"
    shutil.copytree(tiny_phi3_lm, folder)
    state = load_file(str(folder / "model.safetensors"))
    del state["model.layers.1.self_attn.qkv_proj.weight"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"lack layers\.1\.self_attn\.qkv_proj\.weight;"):
        load_model(str(folder))


def test_a_partial_rotation_is_refused_where_the_family_ignores_it(tiny_gemma_lm, tmp_path):
    folder = _with_config(tiny_gemma_lm, tmp_path, "gemma-partial",
                          rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5})
    with pytest.raises(ModelError, match="partial_rotary_factor 0.5"):
        load_model(str(folder))
