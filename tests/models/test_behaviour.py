"""From attention to behaviour: the prediction, the ablations, the edited layers and the logit
lens against transformers (AutoModelForCausalLM / AutoModelForMaskedLM, eager attention), with
hooks and weight changes written here, apart from attnexplorer's code."""

import numpy as np
import pytest
import torch

from attnexplorer.io.session_file import session_from_dict
from attnexplorer.models import load_model
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball and she was happy"
SAME_LENGTH = "The ball fetched the dog and she was happy"
MASKED = "The dog fetched the [MASK] and she was happy"
TOL = 1e-4


def _reference(folder, masked=False):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    return auto.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32).eval()


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)])).logits[0].double().numpy()


def _ours(behaviour, interventions=Interventions()):
    residual = behaviour.residuals(interventions)[-1]
    return behaviour.logits(residual).double().numpy()


def _predicted_rows(behaviour, interventions, theirs):
    """A prediction's own route (``rows_at``: a decoder reruns rows 0…position only) at an
    early position and the last, against transformers' logits there."""
    for position in (2, len(behaviour.run.ids) - 1):
        row = behaviour.rows_at(interventions, position)[-1]
        assert np.abs(behaviour.logits(row).double().numpy() - theirs[position]).max() < TOL


def _projection(reference, kind, layer):
    """The module whose input is the concatenated heads' outputs."""
    if kind == "gpt2":
        return reference.transformer.h[layer].attn.c_proj
    if kind == "llama":
        return reference.model.layers[layer].self_attn.o_proj
    return reference.bert.encoder.layer[layer].attention.output.dense


@pytest.fixture(scope="module", params=["tiny_gpt2_lm", "tiny_llama_lm"])
def decoder(request):
    folder = request.getfixturevalue(request.param)
    loaded = load_model(str(folder))
    return loaded, Behaviour(loaded, loaded.run(TEXT)), _reference(folder)


def test_logits_at_every_position_equal_transformers(decoder):
    loaded, behaviour, reference = decoder
    assert loaded.engine == "attnexplorer" and behaviour.problem is None
    ours, theirs = _ours(behaviour), _logits(reference, behaviour.run.ids)
    assert ours.shape == theirs.shape == (len(behaviour.run.ids), reference.config.vocab_size)
    assert np.abs(ours - theirs).max() < TOL and np.abs(theirs).max() > 1.0


def test_the_transformers_route_predicts_the_same(decoder, request):
    loaded, behaviour, _reference_model = decoder
    other = load_model(str(loaded.source.folder), engine="transformers")
    assert other.engine == "transformers"
    theirs = Behaviour(other, other.run(TEXT))
    assert np.abs(_ours(theirs) - _ours(behaviour)).max() < TOL


@pytest.mark.parametrize("kind", ["zero", "mean", "patch"])
def test_an_ablated_head_equals_a_hook_on_the_output_projection(decoder, kind):
    loaded, behaviour, reference = decoder
    layer, head, size = 1, 2, loaded.head_dim
    columns = slice(head * size, (head + 1) * size)
    module = _projection(reference, loaded.family.name, layer)
    source = {}
    if kind == "patch":
        patch_ids = loaded.tokenize(SAME_LENGTH)[0]
        assert len(patch_ids) == len(behaviour.run.ids) and patch_ids != list(behaviour.run.ids)
        def keep(_module, args):
            source["x"] = args[0][0, :, columns].clone()

        grab = module.register_forward_pre_hook(keep)
        _logits(reference, patch_ids)
        grab.remove()

    def hook(_module, args):
        x = args[0].clone()
        if kind == "zero":
            x[0, :, columns] = 0.0
        elif kind == "mean":
            x[0, :, columns] = x[0, :, columns].mean(dim=0, keepdim=True)
        else:
            x[0, :, columns] = source["x"]
        return (x,)

    handle = module.register_forward_pre_hook(hook)
    try:
        theirs = _logits(reference, behaviour.run.ids)
    finally:
        handle.remove()
    interventions = Interventions().with_ablation(layer, head, kind)
    if kind == "patch":
        interventions = Interventions(interventions.ablations, patch_text=SAME_LENGTH)
    ours = _ours(behaviour, interventions)
    assert np.abs(ours - theirs).max() < TOL
    assert np.abs(ours - _ours(behaviour)).max() > 1e-3   # the ablation did something
    _predicted_rows(behaviour, interventions, theirs)   # a mean over the text still: all rows rerun


def test_an_edited_layer_equals_transformers_with_the_same_weights_changed(decoder):
    loaded, behaviour, reference = decoder
    kind, layer, head, size = loaded.family.name, 1, 3, loaded.head_dim
    parts = loaded.layer_parts(behaviour.run, layer)
    rng = np.random.default_rng(0)
    new_q = rng.normal(size=parts["heads"][head]["W_q"].shape).astype(np.float32)
    new_o = np.array(parts["W_o"], dtype=np.float32)
    new_o[5, :] += 0.7
    norm = np.array(parts["norm"]["weight"], dtype=np.float32) * 1.5
    parts["heads"][head]["W_q"] = new_q
    parts["W_o"] = new_o
    parts["norm"]["weight"] = norm
    edited = session_from_dict(parts, "edited")
    with torch.no_grad():
        if kind == "llama":
            attn = reference.model.layers[layer].self_attn
            attn.q_proj.weight[head * size:(head + 1) * size] = torch.from_numpy(new_q.T)
            attn.o_proj.weight.copy_(torch.from_numpy(new_o.T))
            reference.model.layers[layer].input_layernorm.weight.copy_(torch.from_numpy(norm))
        else:
            block = reference.transformer.h[layer]
            block.attn.c_attn.weight[:, head * size:(head + 1) * size] = torch.from_numpy(new_q)
            block.attn.c_proj.weight.copy_(torch.from_numpy(new_o))
            block.ln_1.weight.copy_(torch.from_numpy(norm))
    theirs = _logits(reference, behaviour.run.ids)
    reference_restored = _reference(loaded.source.folder)
    ours = _ours(behaviour, Interventions().with_edit(layer, edited))
    assert np.abs(ours - theirs).max() < TOL
    assert np.abs(theirs - _logits(reference_restored, behaviour.run.ids)).max() > 1e-3
    _predicted_rows(behaviour, Interventions().with_edit(layer, edited), theirs)
    # the edit recomputes only from its layer: the cached stream before it is the unedited run's
    edit = behaviour.layer_edit(layer, edited)
    assert set(edit.changed) == {"W_q", "W_o", "norm"} and edit.unfoldable == () and edit.change.residual is None


def test_the_unedited_session_is_no_change(decoder):
    loaded, behaviour, _reference_model = decoder
    for layer in range(loaded.num_layers):
        session = session_from_dict(loaded.layer_parts(behaviour.run, layer), "same")
        edit = behaviour.layer_edit(layer, session)
        assert edit.changed == () and not edit.change.weights and edit.change.residual is None


def test_an_edited_input_is_the_residual_stream_the_recompute_starts_from(decoder):
    loaded, behaviour, reference = decoder
    layer = 2
    parts = loaded.layer_parts(behaviour.run, layer)
    x = np.array(parts["embeddings"], dtype=np.float32)
    x[3, :] *= -1.0
    parts["embeddings"] = x
    edit = behaviour.layer_edit(layer, session_from_dict(parts, "edited input"))
    assert edit.changed == ("E",) and "activations" in edit.unfoldable[0]
    blocks = reference.model.layers if loaded.family.name == "llama" else reference.transformer.h

    def hook(_module, args, kwargs):
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        hidden[0] = torch.from_numpy(x)
        return ((hidden,) + tuple(args[1:]), kwargs) if args else (args, dict(kwargs, hidden_states=hidden))

    handle = blocks[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        theirs = _logits(reference, behaviour.run.ids)
    finally:
        handle.remove()
    ours = _ours(behaviour, Interventions().with_edit(layer, session_from_dict(parts, "edited input")))
    assert np.abs(ours - theirs).max() < TOL
    _predicted_rows(behaviour, Interventions().with_edit(layer, session_from_dict(parts, "edited input")), theirs)


def test_logit_lens_ends_at_the_logits_and_the_json_shape(decoder):
    loaded, behaviour, _reference_model = decoder
    tokens = behaviour.run.tokens
    target = " " + tokens[-1].lstrip("␣")
    result = behaviour.predict(Interventions().with_ablation(0, 1, "zero"), top=5, target=target, lens=True)
    assert set(result) == {"tokens", "position", "baseline", "intervened", "target", "logit_lens"}
    assert result["position"] == len(tokens) - 1 and len(result["baseline"]["top"]) == 5
    top = result["baseline"]["top"][0]
    assert set(top) == {"id", "token", "logit", "prob"}
    last = behaviour.logits(torch.from_numpy(behaviour.run.final[-1])).double()
    assert top["id"] == int(torch.argmax(last)) and abs(top["logit"] - float(last.max())) < 1e-6
    lens = result["logit_lens"]
    assert len(lens) == loaded.num_layers
    assert lens[-1]["baseline"]["top"]["id"] == top["id"]
    assert abs(lens[-1]["baseline"]["top"]["prob"] - top["prob"]) < 1e-9
    assert lens[-1]["intervened"]["top"]["id"] == result["intervened"]["top"][0]["id"]
    probs = [entry["prob"] for entry in result["baseline"]["top"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    edited = result["intervened"]["top"][0]
    assert {"delta_logit", "delta_rank"} <= set(edited)
    assert result["target"]["baseline"]["rank"] >= 1


def test_bad_interventions_are_refused(decoder):
    loaded, behaviour, _reference_model = decoder
    with pytest.raises(ModelError, match="out of range"):
        behaviour.predict(Interventions().with_ablation(loaded.num_layers, 0, "zero"))
    with pytest.raises(ModelError, match="same token length"):
        behaviour.predict(Interventions(Interventions().with_ablation(0, 0, "patch").ablations, patch_text="dog"))
    with pytest.raises(ModelError, match="not one"):
        behaviour.predict(target=" dog dog cat")
    with pytest.raises(ModelError, match="position 99"):
        behaviour.predict(position=99)
    other = loaded.layer_parts(loaded.run("dog dog"), 0)
    with pytest.raises(ModelError, match="tokens are not the text's"):
        behaviour.layer_edit(0, session_from_dict(other, "other"))


def test_masked_lm_head_equals_transformers(tiny_bert_mlm):
    loaded = load_model(str(tiny_bert_mlm))
    behaviour = Behaviour(loaded, loaded.run(MASKED))
    assert behaviour.problem is None
    reference = _reference(tiny_bert_mlm, masked=True)
    assert np.abs(_ours(behaviour) - _logits(reference, behaviour.run.ids)).max() < TOL
    result = behaviour.predict(top=3)
    assert result["position"] == behaviour.run.pieces.index("[MASK]")
    # a zero-ablated head through BERT's post-LN layers, against the hook
    module = _projection(reference, "bert", 0)
    size = loaded.head_dim

    def hook(_module, args):
        x = args[0].clone()
        x[0, :, size:2 * size] = 0.0
        return (x,)

    handle = module.register_forward_pre_hook(hook)
    theirs = _logits(reference, behaviour.run.ids)
    handle.remove()
    assert np.abs(_ours(behaviour, Interventions().with_ablation(0, 1, "zero")) - theirs).max() < TOL


def test_an_encoder_without_a_head_compares_its_embedding(tiny_bert):
    loaded = load_model(str(tiny_bert))
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    assert "without a masked-LM head" in behaviour.problem
    plain = behaviour.predict()
    assert plain["baseline"] is None and plain["embedding"]["cosine"] is None
    ablated = behaviour.predict(Interventions().with_ablation(1, 0, "zero"))
    assert 0.0 < ablated["embedding"]["cosine"] < 1.0


@pytest.mark.slow
def test_smollm2_logits_and_an_ablation_equal_transformers(smollm2, model_cache):
    from attnexplorer.models.sources import gguf_cache_folder

    cached = load_model("smollm2")   # the session fixture's open filled the cache: the own forward
    assert cached.engine == "attnexplorer"
    text = "When Mary and John went to the store, John gave a drink to"
    behaviour = Behaviour(cached, cached.run(text))
    reference = _reference(gguf_cache_folder(smollm2.source))
    assert np.abs(_ours(behaviour) - _logits(reference, behaviour.run.ids)).max() < TOL
    layer, head, size = 0, 0, cached.head_dim

    def hook(_module, args):
        x = args[0].clone()
        x[0, :, head * size:(head + 1) * size] = 0.0
        return (x,)

    handle = reference.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(hook)
    theirs = _logits(reference, behaviour.run.ids)
    handle.remove()
    ours = _ours(behaviour, Interventions().with_ablation(layer, head, "zero"))
    assert np.abs(ours - theirs).max() < TOL
    # the route through transformers (the fixture's first open) predicts the same
    assert np.abs(_ours(Behaviour(smollm2, smollm2.run(text))) - _ours(behaviour)).max() < TOL


def test_patched_heads_in_more_layers_reuse_and_extend_the_patch_run(decoder):
    loaded, behaviour, _reference_model = decoder
    one = Interventions(Interventions().with_ablation(1, 0, "patch").ablations, patch_text=SAME_LENGTH)
    two = Interventions(one.with_ablation(2, 1, "patch").ablations, patch_text=SAME_LENGTH)
    _ours(behaviour, one)          # the patch run kept for layer 1 only
    after_one = _ours(behaviour, two)
    fresh = Behaviour(loaded, behaviour.run)
    assert np.array_equal(after_one, _ours(fresh, two))
    assert np.abs(after_one - _ours(behaviour, one)).max() > 1e-4


@pytest.mark.parametrize("value", [1e30, 3e38])
def test_an_edit_that_overflows_the_stream_is_refused_not_predicted_from_zeros(decoder, value):
    """A W_o entry of 1e30 is a valid session, but the stream after that layer squares past
    float32's range in the next norm: every logit came out 0 (a uniform guess, shown as the
    edited model's prediction), and 3e38 made NaN, which crashed predict's table."""
    loaded, behaviour, _reference_model = decoder
    layer = 1
    parts = loaded.layer_parts(behaviour.run, layer)
    w_o = np.array(parts["W_o"], dtype=np.float32)
    w_o[0, :] = value
    parts["W_o"] = w_o
    interventions = Interventions().with_edit(layer, session_from_dict(parts, "overflowing"))
    with pytest.raises(ModelError, match=f"residual stream after layer {layer} .*float32"):
        behaviour.predict(interventions, lens=True)
    with pytest.raises(ModelError, match="float32"):
        behaviour.residuals(interventions)
    assert behaviour.predict(Interventions())["baseline"]["top"]   # the unedited model still predicts


def test_logits_that_are_not_finite_are_refused():
    from attnexplorer.models.prediction import Scores

    with pytest.raises(ModelError, match="NaN or infinite"):
        Scores(torch.tensor([0.5, float("nan"), 1.0]))
    assert Scores(torch.tensor([0.5, 2.0, 1.0])).top(1).tolist() == [1]
