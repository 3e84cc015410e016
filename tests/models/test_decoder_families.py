"""Phi-3, GPT-NeoX / Pythia, Gemma and SmolLM3 (issue 26): what each family's session holds, and
its own part checked where it shows. ``test_families.py`` holds every layer and head of each to
transformers' eager attention, its logits and generation; here each family's difference from
Llama is checked to be read from the right place: a session built from a wrong reading would
fail those, and these say which part."""

import json
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


# ---- the families with version 3's stages ---------------------------------------------------

def test_qwen3_normalises_each_query_and_key_head(tiny_qwen3_lm):
    loaded = load_model(str(tiny_qwen3_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 1)
    norm = s["qk_norm"]
    assert s["version"] == 3 and norm["over"] == "head" and len(norm["query_weight"]) == 8
    w = loaded.weights["layers.1.self_attn.q_norm.weight"].numpy()
    assert np.array_equal(np.asarray(norm["query_weight"], np.float32), w)
    assert s["mask"] == {"window": 3} and loaded.layer_session(run, 0)["mask"] == "causal"
    bare = dict(s, qk_norm=None)   # without the QK-norm the weights are another model's
    assert np.abs(reference(bare)[0] - run.attentions[1]).max() > 1e-3


def test_olmo2_norms_the_whole_projection_and_after_the_attention(tiny_olmo2_lm):
    loaded = load_model(str(tiny_olmo2_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 0)
    assert s["norm"] is None   # its attention reads the stream; its norms come after
    assert s["qk_norm"]["over"] == "all" and len(s["qk_norm"]["query_weight"]) == 32
    assert len(s["qk_norm"]["key_weight"]) == 16   # 2 K/V heads × 8
    per_head = dict(s, qk_norm=dict(s["qk_norm"], over="head"))
    assert np.abs(reference(per_head)[0] - run.attentions[0]).max() > 1e-3


def test_gemma2_caps_its_scores_and_logits_and_scales_by_its_query_scalar(tiny_gemma2_lm):
    from attnexplorer.models.interventions import Behaviour, Interventions

    loaded = load_model(str(tiny_gemma2_lm))
    run = loaded.run(TEXT)
    first, second = (loaded.layer_session(run, layer) for layer in range(2))
    assert first["softcap"] == 2.0 and first["scale"] == {"factor": 12 ** -0.5}
    assert first["mask"] == {"window": 3} and second["mask"] == "causal"   # local, then global
    uncapped = dict(first, softcap=None)
    assert np.abs(reference(uncapped)[0] - run.attentions[0]).max() > 1e-3
    behaviour = Behaviour(loaded, run)
    logits = behaviour.logits(behaviour.residuals(Interventions())[-1]).numpy()
    assert np.abs(logits).max() <= 3.0 and np.abs(logits).max() > 2.0   # the final cap of 3 bites


def test_gemma3_turns_local_and_global_layers_by_their_own_rope(tiny_gemma3_lm):
    loaded = load_model(str(tiny_gemma3_lm))
    run = loaded.run(TEXT)
    local, overall = (loaded.layer_session(run, layer)["positions"] for layer in range(2))
    assert local["theta"] == 100.0 and local["scaling"] is None
    assert overall["theta"] == 500.0 and overall["scaling"] == {"kind": "linear", "factor": 2.0}
    s = loaded.layer_session(run, 0)
    w = loaded.weights["layers.0.self_attn.k_norm.weight"].numpy()   # read as 1 + w, as Gemma 3 multiplies
    assert s["qk_norm"]["over"] == "head" and np.array_equal(np.asarray(s["qk_norm"]["key_weight"], np.float32), w)
    assert s["scale"] == "inv_sqrt_dk" and s["mask"] == {"window": 3}


def test_gemma3_hub_config_names_its_local_base_apart(tiny_gemma3_lm, tmp_path):
    """Gemma 3's config.json on the hub gives rope_theta and rope_local_base_freq, not a nested table."""
    folder = _with_config(tiny_gemma3_lm, tmp_path, "gemma3-hub", rope_parameters=None, rope_theta=500.0,
                          rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 2.0})
    loaded, run = _same_as_transformers(folder)
    assert loaded.layer_session(run, 0)["positions"]["theta"] == 100.0


def test_an_edited_qk_norm_weight_is_saved_into_the_model(tiny_qwen3_lm, tmp_path):
    from transformers import AutoModelForCausalLM

    from attnexplorer.io.session_file import session_from_dict
    from attnexplorer.models.interventions import Behaviour, Interventions
    from attnexplorer.models.saving import save_edited_model

    loaded = load_model(str(tiny_qwen3_lm))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    parts = loaded.layer_session(behaviour.run, 0)
    parts["qk_norm"]["query_weight"] = (np.asarray(parts["qk_norm"]["query_weight"]) * -1.5).tolist()
    interventions = Interventions().with_edit(0, session_from_dict(parts, "edited"))
    edit = behaviour.layer_edit(0, session_from_dict(parts, "edited"))
    assert "QK-norm" in edit.changed and not edit.unfoldable
    saved = save_edited_model(behaviour, interventions, tmp_path / "edited")
    model = AutoModelForCausalLM.from_pretrained(str(saved), attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([list(behaviour.run.ids)])).logits[0].numpy()
    ours = behaviour.logits(behaviour.residuals(interventions)[-1]).numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    assert np.abs(ours - behaviour.logits(behaviour.residuals(Interventions())[-1]).numpy()).max() > 1e-3


def test_a_changed_softcap_is_refused_as_the_models_setting(tiny_gemma2_lm):
    from attnexplorer.io.session_file import session_from_dict
    from attnexplorer.models.interventions import Behaviour

    loaded = load_model(str(tiny_gemma2_lm))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    parts = loaded.layer_session(behaviour.run, 0)
    parts["softcap"] = 5.0
    with pytest.raises(ModelError, match="soft-cap is 5.0, the model's 2.0"):
        behaviour.layer_edit(0, session_from_dict(parts, "edited"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny_mistral_lm", "tiny_llama3_lm", "tiny_gemma3_lm"])
def test_a_thousand_tokens_keep_scaled_rope_and_windows_exact(name, request, tmp_path):
    """Over 1,000 tokens, where Mistral's window of 4 blocks nearly every cell and Llama 3's
    scaling and Gemma 3's local window show: the own forward
    (RoPE angles in float32, as transformers makes them) against transformers' eager attention,
    and a late layer's session (angles float32) against the model's weights."""
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.io.session_file import session_from_dict

    folder = _with_config(request.getfixturevalue(name), tmp_path, "long", max_position_embeddings=2048)
    own, theirs = load_model(str(folder)), load_model(str(folder), engine="transformers")
    text = " ".join([TEXT] * 110)
    a, b = own.run(text), theirs.run(text)
    assert len(a.ids) >= 1000 and a.ids == b.ids and not a.long
    assert np.abs(a.attentions - b.attentions).max() < 1e-5
    assert np.abs(a.attention_outputs - b.attention_outputs).max() < 1e-4
    session = session_from_dict(own.layer_parts(a, 1), "layer 1")
    assert session.positions.angles == "float32"
    assert np.abs(compute(session).weights - b.attentions[1]).max() < 1e-5
    if name == "tiny_mistral_lm":
        assert np.all(np.tril(a.attentions, -4) == 0)


@pytest.mark.parametrize("name", ["tiny_gemma3_lm", "tiny_olmo2_lm"])
def test_import_model_writes_a_version_3_file_that_computes_the_models_weights(name, request, tmp_path):
    """The CLI's path: the file it writes holds the new stages, loads by the session rules and
    the engine computes the model's own weights from it."""
    from attnexplorer import cli
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.io.session_file import load_session

    folder = request.getfixturevalue(name)
    out = tmp_path / "layer.json"
    assert cli.main(["import-model", str(folder), "--text", TEXT, "--layer", "1", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["version"] == 3 and saved["qk_norm"] is not None
    session = load_session(out)
    run = load_model(str(folder)).run(TEXT)
    assert np.abs(compute(session).weights - run.attentions[1]).max() < 1e-5


def test_a_gemma3_with_its_vision_tower_is_refused_pointing_at_the_text_model(tiny_gemma3_lm, tmp_path):
    folder = _with_config(tiny_gemma3_lm, tmp_path, "gemma3-vision", model_type="gemma3")
    with pytest.raises(ModelError, match=r"says gemma3_text\): attnexplorer opens .*gemma2, gemma3_text\)") as err:
        load_model(str(folder))
    assert "\n" not in str(err.value)
