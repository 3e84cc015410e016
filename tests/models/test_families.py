"""Qwen2, Mistral, RoBERTa and DistilBERT (issue 26): tiny random models built from each family's
transformers config, checked like the three first families.

For every layer and head: the imported session, recomputed from its own numbers in float64
(``model_reference``), reproduces transformers' eager ``output_attentions`` within 1e-5 and its
attention module's output within 1e-4; attnexplorer's own forward gives transformers' logits
within 1e-4; the transformers route agrees with the own one. Qwen2's sliding layers and
Mistral's window are short (3 and 4 tokens) so that they block cells of a 10-token text.
"""

import json
import shutil

import numpy as np
import pytest
import torch

from model_reference import reference

from attnexplorer.models import load_model
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball and she was happy"
MASKED = "The dog fetched the<mask> and she was happy"
FAMILIES = ["tiny_qwen2_lm", "tiny_mistral_lm", "tiny_roberta_mlm", "tiny_distilbert_mlm", "tiny_phi3_lm",
            "tiny_neox_lm", "tiny_gemma_lm", "tiny_smollm3_lm", "tiny_qwen3_lm", "tiny_olmo2_lm", "tiny_gemma2_lm",
            "tiny_gemma3_lm", "tiny_llama3_lm"]
MASKS = {"tiny_roberta_mlm": MASKED, "tiny_distilbert_mlm": "The dog fetched the [MASK] and she was happy"}


def _transformers(folder, masked):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    return auto.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    folder = request.getfixturevalue(request.param)
    masked = request.param in MASKS
    loaded = load_model(str(folder))
    text = MASKS.get(request.param, TEXT)
    return loaded, loaded.run(text), _transformers(folder, masked)


def _theirs(model, ids):
    """transformers' own numbers: every layer's weights, every attention module's output, the logits."""
    base = model.base_model
    layers = base.encoder.layer if hasattr(base, "encoder") else getattr(base, "layers", None) or base.transformer.layer
    outputs = []
    def attention(layer):   # the module whose output is the attention before the residual add
        if hasattr(layer, "self_attn"):
            return layer.self_attn
        inner = layer.attention
        if hasattr(inner, "out_lin") or hasattr(inner, "output"):   # DistilBERT's, BERT's
            return getattr(inner, "out_lin", None) or inner.output.dense
        return inner   # GPT-NeoX's

    hooks = [attention(layer)
             .register_forward_hook(lambda _m, _a, out: outputs.append((out[0] if isinstance(out, tuple) else out)[0]))
             for layer in layers]
    try:
        with torch.no_grad():
            result = model(input_ids=torch.tensor([list(ids)]), output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    weights = torch.stack([a[0] for a in result.attentions]).double().numpy()
    return weights, torch.stack(outputs).double().numpy(), result.logits[0].double().numpy()


def test_every_layer_and_head_reproduces_transformers(family):
    loaded, run, model = family
    assert loaded.engine == "attnexplorer", loaded.notes
    weights, outputs, _logits = _theirs(model, run.ids)
    assert weights.shape == (loaded.num_layers, loaded.num_heads, len(run.ids), len(run.ids))
    assert weights.std() > 0.05   # not near-uniform: the check below must be able to fail
    for layer in range(loaded.num_layers):
        session = json.loads(json.dumps(loaded.layer_session(run, layer)))   # what a file holds
        ours, output = reference(session)
        assert np.abs(ours - weights[layer]).max() < 1e-5, layer
        assert np.abs(output - outputs[layer]).max() < 1e-4, layer
        assert np.abs(run.attentions[layer] - weights[layer]).max() < 1e-5, layer   # the own forward too


def test_the_logits_equal_transformers(family):
    loaded, run, model = family
    behaviour = Behaviour(loaded, run)
    assert behaviour.problem is None
    ours = behaviour.logits(behaviour.residuals(Interventions())[-1]).double().numpy()
    theirs = _theirs(model, run.ids)[2]
    assert ours.shape == theirs.shape and np.abs(theirs).max() > 1.0
    assert np.abs(ours - theirs).max() < 1e-4
    # a prediction's own route (``rows_at``: a decoder reruns the rows up to the position and
    # makes the last layer's one row) gives the whole rerun's logits there
    zero = Interventions().with_ablation(0, 1, "zero")
    whole = behaviour.logits(behaviour.residuals(zero)[-1]).double().numpy()
    assert np.abs(whole - ours).max() > 1e-4   # the ablation did something
    for position in (2, len(run.ids) - 1):
        row = behaviour.logits(behaviour.rows_at(zero, position)[-1]).double().numpy()
        assert np.abs(row - whole[position]).max() < 1e-4, position


def test_the_transformers_route_says_the_same(family):
    loaded, run, _model = family
    other = load_model(str(loaded.source.folder), engine="transformers")
    theirs = other.run(run.text)
    assert theirs.ids == run.ids and theirs.tokens == run.tokens
    assert np.abs(theirs.attentions - run.attentions).max() < 1e-5
    assert np.abs(theirs.attention_outputs - run.attention_outputs).max() < 1e-4


def test_qwen2_biases_and_its_sliding_layers(tiny_qwen2_lm):
    loaded = load_model(str(tiny_qwen2_lm))
    run = loaded.run(TEXT)
    sessions = [loaded.layer_session(run, layer) for layer in range(2)]
    assert [s["mask"] for s in sessions] == ["causal", {"window": 3}]
    s = sessions[1]
    assert all(h["b_q"] is not None for h in s["heads"]) and all(g["b_k"] is not None for g in s["kv_heads"])
    assert s["b_o"] is None   # Qwen2's o_proj has no bias, whatever attention_bias says
    # the window does real work: beyond 3 tokens back every weight is exactly 0
    assert np.all(np.tril(run.attentions[1][0], -3) == 0) and np.tril(run.attentions[0][0], -3).max() > 1e-3


def test_mistral_windows_every_layer(tiny_mistral_lm):
    loaded = load_model(str(tiny_mistral_lm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 1)
    assert s["mask"] == {"window": 4} and s["positions"]["dims"] == 6 and len(s["kv_heads"]) == 2
    assert "mistral" in loaded.describe()
    causal = dict(s, mask="causal")
    assert np.abs(reference(causal)[0] - run.attentions[1]).max() > 1e-3


def test_mistral_without_a_window_is_plain_causal(tiny_mistral_lm, tmp_path):
    folder = tmp_path / "mistral-no-window"
    shutil.copytree(tiny_mistral_lm, folder)
    config = json.loads((folder / "config.json").read_text())
    config["sliding_window"] = None   # null: no window (not transformers' default 4096)
    (folder / "config.json").write_text(json.dumps(config))
    own, theirs = load_model(str(folder)), load_model(str(folder), engine="transformers")
    a, b = own.run(TEXT), theirs.run(TEXT)
    assert own.layer_session(a, 0)["mask"] == "causal"
    assert np.abs(a.attentions - b.attentions).max() < 1e-5


def test_roberta_positions_start_after_the_padding_index(tiny_roberta_mlm):
    loaded = load_model(str(tiny_roberta_mlm))
    run = loaded.run(TEXT)
    s = loaded.layer_session(run, 0)
    table = np.asarray(loaded.weights["embeddings.position_embeddings.weight"])
    assert np.array_equal(np.asarray(s["positions"]["table"], np.float32), table[2:2 + len(run.ids)])
    assert run.tokens[0] == "<s>" and run.tokens[1] == "The" and run.tokens[2] == "␣dog"
    assert loaded.max_positions == 24 - 2
    behaviour = Behaviour(loaded, loaded.run(MASKED))   # the masked-LM head fills RoBERTa's <mask>
    assert behaviour.run.pieces[behaviour.default_position()] == "<mask>"


def test_qwen2_sliding_layers_without_a_window_are_refused(tiny_qwen2_lm, tmp_path):
    folder = tmp_path / "qwen2-no-window"
    shutil.copytree(tiny_qwen2_lm, folder)
    config = json.loads((folder / "config.json").read_text())
    config["use_sliding_window"] = False
    config["layer_types"] = ["full_attention", "sliding_attention"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="sliding-window layer"):
        load_model(str(folder))


def test_an_unsupported_family_is_refused_naming_the_families(tiny_mistral_lm, tmp_path):
    folder = tmp_path / "falcon"
    shutil.copytree(tiny_mistral_lm, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "falcon"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="qwen2, mistral, phi3, gpt_neox, gemma, smollm3") as err:
        load_model(str(folder))
    assert "roberta, distilbert" in str(err.value)


@pytest.mark.parametrize("name", ["tiny_qwen2_lm", "tiny_mistral_lm", "tiny_phi3_lm", "tiny_neox_lm", "tiny_gemma_lm",
                                  "tiny_smollm3_lm", "tiny_qwen3_lm", "tiny_olmo2_lm", "tiny_gemma2_lm", "tiny_gemma3_lm",
                                  "tiny_llama3_lm"])
def test_generation_keeps_the_window_in_its_cache(name, request):
    """Greedy steps from the KV cache: transformers' generate's ids, and each step's attention
    row the last row of the whole text's weights (beyond the last layer's window, if it has one:
    exactly 0)."""
    from attnexplorer.models.forward import forward
    from attnexplorer.models.generation import Generation

    folder = request.getfixturevalue(name)
    loaded = load_model(str(folder))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    model = _transformers(folder, False)
    model.generation_config.eos_token_id = None
    prompt = list(behaviour.run.ids)
    with torch.no_grad():
        expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0)[0].tolist()
    generation = Generation(behaviour, stop=())
    steps = generation.run(12)
    assert generation.ids == expected and len(set(generation.ids[len(prompt):])) > 2
    whole = forward(loaded.family.kind, loaded.config, loaded.weights, generation.ids).attentions
    assert np.abs(steps[-1].attention - whole[:, :, -1].numpy()).max() < 1e-5
    window = loaded.layer_session(behaviour.run, loaded.num_layers - 1)["mask"]
    if window != "causal":   # the last layer's window: 3 or 4 tokens
        assert np.all(steps[-1].attention[-1, :, :-window["window"]] == 0)


def test_a_saved_edit_is_the_same_family_to_transformers(family, tmp_path):
    """A zero-ablated head and an edited W_q, saved: transformers reads the folder as the same
    family (its own names: DistilBERT's q_lin…, RoBERTa's lm_head) and predicts what the app shows."""
    from attnexplorer.io.session_file import session_from_dict
    from attnexplorer.models.saving import save_edited_model

    loaded, run, model = family
    behaviour = Behaviour(loaded, run)
    parts = loaded.layer_session(run, 1)
    parts["heads"][1]["W_q"] = (np.asarray(parts["heads"][1]["W_q"]) * -2.0).tolist()
    interventions = Interventions().with_ablation(0, 1, "zero").with_edit(1, session_from_dict(parts, "edited"))
    saved = save_edited_model(behaviour, interventions, tmp_path / "edited")
    assert json.loads((saved / "config.json").read_text())["model_type"] == loaded.family.name
    theirs = _theirs(_transformers(saved, loaded.family.kind == "bert"), run.ids)[2]
    ours = behaviour.logits(behaviour.residuals(interventions)[-1]).double().numpy()
    assert np.abs(ours - theirs).max() < 1e-4
    assert np.abs(theirs - _theirs(model, run.ids)[2]).max() > 1e-3
    again = load_model(str(saved))
    assert again.engine == "attnexplorer" and again.family.name == loaded.family.name


def test_distilbert_has_no_token_types_and_fills_its_mask(tiny_distilbert_mlm):
    loaded = load_model(str(tiny_distilbert_mlm))
    run = loaded.run(MASKS["tiny_distilbert_mlm"])
    s = loaded.layer_session(run, 0)
    words = np.asarray(loaded.weights["embeddings.word_embeddings.weight"])[list(run.ids)]
    assert np.array_equal(np.asarray(s["embeddings"], np.float32), words)   # no token-type row added
    assert run.tokens[0] == "[CLS]" and "fetch" in run.tokens and "##ed" in run.tokens
    behaviour = Behaviour(loaded, run)
    assert run.pieces[behaviour.default_position()] == "[MASK]"
