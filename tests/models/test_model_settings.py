"""A model setting the import does not reproduce is refused by name (issue 27, item 1), on both
routes (attnexplorer's own reader and transformers'): a scaled RoPE imported as plain RoPE put
attention 0.22 away from the model's with exit 0."""

import pytest

from attnexplorer import cli
from attnexplorer.models import load_model
from attnexplorer.models.sources import ModelError

from model_folders import config_variant as _variant

TEXT = "The dog fetched the ball"


ROPE_VARIANTS = {
    "dynamic": ({"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "dynamic"),
    "longrope": ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 500.0, "short_factor": [1.0] * 4,
                                      "long_factor": [2.0] * 4}}, "longrope"),
    "yarn-beta": ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "beta": 1.0}},
                  "beta"),
    "llama3-no-factor": ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0}}, "gives no factor"),
    "partial-in-parameters": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0,
                                                   "partial_rotary_factor": 0.5}}, "partial_rotary_factor"),
    "partial-top-level": ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    "theta-zero": ({"rope_parameters": {"rope_type": "default", "rope_theta": 0.0}}, "rope_theta"),
}
# The scalings the kernel reproduces (core.kernel.attention.rope_inv_freq): transformers 5 writes
# rope_parameters; older files say rope_scaling, with "type" or "rope_type"
SCALED_ROPES = {
    "linear": ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}}, "linear"),
    "old-linear": ({"rope_parameters": None, "rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 500.0},
                   "linear"),
    "llama3": ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, "llama3"),
    "yarn": ({"rope_parameters": None, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 16}, "rope_theta": 500.0},
             "yarn"),
    # DeepSeek-style: mscale and mscale_all_dim choose YaRN's attention factor
    "yarn-mscale": ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "mscale": 0.8,
                                         "mscale_all_dim": 0.5, "original_max_position_embeddings": 16}}, "yarn"),
    # rope_parameters says default but rope_scaling scales: transformers runs the scaling
    "default-plus-scaling": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                              "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "linear"),
}


@pytest.mark.parametrize("name", sorted(ROPE_VARIANTS))
def test_a_rope_the_import_does_not_reproduce_is_refused_naming_it(tiny_llama, tmp_path, capsys, name):
    changes, fragment = ROPE_VARIANTS[name]
    folder = _variant(tiny_llama, tmp_path, name, **changes)
    out = tmp_path / "s.json"
    assert cli.main(["import-model", str(folder), "--text", TEXT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(SCALED_ROPES))
def test_a_scaled_rope_is_imported_as_the_model_turns_it(tiny_llama, tmp_path, name):
    """Each scaling, wherever the config writes it, gives transformers' weights on both routes,
    and the session carries it (with the model's float32 angles)."""
    import numpy as np

    from model_reference import reference

    changes, kind = SCALED_ROPES[name]
    folder = _variant(tiny_llama, tmp_path, name, **changes)
    own, theirs = load_model(str(folder)), load_model(str(folder), engine="transformers")
    a, b = own.run(TEXT), theirs.run(TEXT)
    assert np.abs(a.attentions - b.attentions).max() < 1e-5
    session = own.layer_session(a, 1)
    assert session["positions"]["scaling"]["kind"] == kind and session["positions"]["angles"] == "float32"
    assert session["version"] == 3
    if kind != "yarn":   # the reference knows linear and llama3; yarn is the kernel's, checked against transformers
        assert np.abs(reference(session)[0] - b.attentions[1]).max() < 1e-5
    plain = dict(session, positions=dict(session["positions"], scaling=None))
    assert np.abs(reference(plain)[0] - b.attentions[1]).max() > 1e-4   # the scaling does show


@pytest.mark.slow
def test_the_transformers_route_refuses_an_unreproduced_rope_too(tiny_llama, tmp_path):
    folder = _variant(tiny_llama, tmp_path, "dynamic", **ROPE_VARIANTS["dynamic"][0])
    with pytest.raises(ModelError, match="dynamic"):
        load_model(str(folder), engine="transformers")


def test_plain_rope_with_theta_in_either_place_still_opens(tiny_llama, tmp_path):
    folder = _variant(tiny_llama, tmp_path, "old-plain", rope_parameters=None, rope_theta=500.0,
                      rope_scaling={"type": "default"})
    model = load_model(str(folder))
    assert model.layer_session(model.run(TEXT), 0)["positions"]["theta"] == 500.0


def _tensors_changed(tiny_llama, tmp_path, name, drop=(), add=None, **config):
    import torch
    from safetensors.torch import load_file, save_file

    folder = _variant(tiny_llama, tmp_path, name, **config)
    weights = load_file(str(folder / "model.safetensors"))
    for key in drop:
        weights.pop(key)
    for key, shape in (add or {}).items():
        weights[key] = torch.ones(shape)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


TENSOR_CASES = {
    "missing-q": ({"drop": ["layers.1.self_attn.q_proj.weight"]}, "layers.1.self_attn.q_proj.weight"),
    "missing-bias": ({"drop": ["layers.0.self_attn.k_proj.bias"]}, "layers.0.self_attn.k_proj.bias"),
    # biases in the file of a config without them: transformers would drop them, the own forward add them
    "stray-bias": ({"attention_bias": False}, "self_attn."),
    "extra-layer": ({"add": {"layers.7.self_attn.q_proj.weight": (32, 32)}}, "layers.7.self_attn.q_proj.weight"),
}


@pytest.mark.parametrize("engine", ["auto", "transformers"])
@pytest.mark.parametrize("name", sorted(TENSOR_CASES))
def test_missing_or_unexpected_tensors_are_refused_naming_them(tiny_llama, tmp_path, name, engine):
    changes, fragment = TENSOR_CASES[name]
    config = {k: v for k, v in changes.items() if k not in ("drop", "add")}
    folder = _tensors_changed(tiny_llama, tmp_path, name, changes.get("drop", ()), changes.get("add"), **config)
    with pytest.raises(ModelError, match="the weights (lack|hold)") as err:
        load_model(str(folder), engine=engine)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_packaged_minilm_has_exactly_its_tensors(minilm):
    assert minilm.engine == "attnexplorer"   # its pooler and position ids are known, nothing refused


def _poisoned(tiny_llama, tmp_path, name, key, value):
    import torch
    from safetensors.torch import load_file, save_file

    folder = _variant(tiny_llama, tmp_path, name)
    weights = load_file(str(folder / "model.safetensors"))
    weights[key][:, 0] = value
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("key, value, fragment", [
    ("layers.0.self_attn.q_proj.weight", float("nan"), "not finite"),
    ("embed_tokens.weight", float("inf"), "not finite"),
])
def test_a_model_with_a_nan_or_inf_weight_is_one_line_and_writes_nothing(tiny_llama, tmp_path, capsys, key, value,
                                                                          fragment):
    # issue 27, item 8: a 23-line traceback ending "Out of range float values are not JSON compliant"
    folder = _poisoned(tiny_llama, tmp_path, "poisoned", key, value)
    out = tmp_path / "s.json"
    assert cli.main(["import-model", str(folder), "--text", TEXT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err and "Traceback" not in err, err
    # named where the run first meets it: the weight itself (it once read "layer 0 of poisoned:
    # embeddings[0][0] is nan … cannot be opened as a session", naming no weight)
    assert f"poisoned cannot run on this text from layer {int(key.startswith('layers.'))}'s input on" in err, err
    assert f"the weight {key} is not finite" in err, err
    assert not out.exists()


def test_a_nan_weight_past_the_layer_asked_for_is_named_too(tiny_llama, tmp_path, capsys):
    # a NaN in layer 0's MLP left layer 0's session finite: import wrote it, and the window
    # opened the model with blank thumbnails from layer 1 on and NaN predictions, no word why
    folder = _poisoned(tiny_llama, tmp_path, "late", "layers.0.mlp.up_proj.weight", float("nan"))
    assert cli.main(["predict", str(folder), "--text", TEXT]) == 2
    err = capsys.readouterr().err.strip()
    assert "late cannot run on this text from layer 1's input on" in err and "\n" not in err, err
    assert "layers.0.mlp.up_proj.weight is not finite" in err


@pytest.mark.parametrize("eps", [-1e-5, 0.0])
def test_an_eps_a_session_refuses_is_refused_at_import(tiny_llama, tmp_path, capsys, eps):
    # issue 27, item 9: import wrote files that load_session and the window then refused
    folder = _variant(tiny_llama, tmp_path, "eps", rms_norm_eps=eps)
    out = tmp_path / "s.json"
    assert cli.main(["import-model", str(folder), "--text", TEXT, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "norm.eps" in err and "\n" not in err, err
    assert not out.exists()


def test_control_characters_in_the_text_become_visible_tokens_and_the_file_loads(tiny_llama, tmp_path, capsys):
    from attnexplorer.io.session_file import load_session

    out = tmp_path / "s.json"
    text = "the dog\x1b[31m ran\x7f and\x00 she\x85 was"
    assert cli.main(["import-model", str(tiny_llama), "--text", text, "--out", str(out)]) == 0, capsys.readouterr().err
    session = load_session(out)
    joined = "".join(session.tokens)
    assert "␛" in joined and "␡" in joined and "␀" in joined and "\x85" not in joined
    model = load_model(str(tiny_llama))
    assert model.layer_session(model.run(text), 1)["tokens"] == list(session.tokens)


@pytest.mark.parametrize("call, message", [
    (lambda m: m.layer_session(m.run(TEXT), "1"), "the layer must be a whole number (0..1), got '1'"),
    (lambda m: m.layer_session(m.run(TEXT), 2), "layer 2 is out of range"),
    (lambda m: m.run(b"hello"), "the text must be a string, got bytes"),
])
def test_notebook_misuse_is_named(tiny_llama, call, message):
    # issue 27, item 11
    model = load_model(str(tiny_llama))
    with pytest.raises(ModelError) as err:
        call(model)
    assert message in str(err.value)


def test_each_control_character_has_a_visible_form():
    from attnexplorer.core.inputs.session import control_character
    from attnexplorer.models.tokens import readable_piece

    for code in list(range(0x20)) + list(range(0x7F, 0xA0)):
        for style in ("bytelevel", "sentencepiece", "wordpiece"):
            shown = readable_piece(f"a{chr(code)}b", style)
            assert not any(control_character(ch) for ch in shown), (hex(code), style, shown)


def test_a_malformed_or_missing_tokenizer_is_named(tiny_llama, tmp_path):
    # issue 27, item 10: "'added_tokens'" and "the text gives no tokens"
    garbled = _variant(tiny_llama, tmp_path, "garbled")
    (garbled / "tokenizer.json").write_text('{"version": "1.0", "model": 3')
    with pytest.raises(ModelError, match="tokenizer.json cannot be read"):
        load_model(str(garbled))
    bare = _variant(tiny_llama, tmp_path, "bare")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    with pytest.raises(ModelError, match="holds no tokenizer"):
        load_model(str(bare))


def test_dequantising_reports_the_wait_and_every_tensor():
    # issue 27, item 14: the first SmolLM2 open sat at "20 %" for 43 s and import-model printed nothing
    import threading

    from attnexplorer.models import hf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    said = []
    heard = threading.Event()

    def say(fraction, message):
        said.append((fraction, message))
        heard.set()

    with hf.gguf_progress(say, lambda: None, 0.2, 0.7):
        assert heard.wait(30)            # the parse before the first tensor: counted in seconds
        assert said[0] == (0.2, said[0][1]) and "reading the GGUF file" in said[0][1]
        list(gguf_utils.tqdm(range(20), desc="tensors"))
    assert said[-1] == (0.7, "dequantising tensor 20 of 20")
    assert "dequantising tensor 1 of 20" in [m for _, m in said]
    assert gguf_utils.tqdm is not None and gguf_utils.tqdm.__module__ != hf.__name__


def test_import_model_shows_progress_only_for_a_first_gguf_open(tmp_path, model_cache):
    from attnexplorer.models.loading import CACHE_DONE, first_gguf_open
    from attnexplorer.models.sources import ModelSource, gguf_cache_folder

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    source = ModelSource(label="m", folder=tmp_path, gguf="m.gguf")
    assert first_gguf_open(source)
    cache = gguf_cache_folder(source)
    cache.mkdir(parents=True)
    (cache / CACHE_DONE).write_text("done")
    assert not first_gguf_open(source)
    assert not first_gguf_open(ModelSource(label="f", folder=tmp_path, gguf=None))


# Hostile config.json sizes (a hand-edited or corrupt file): each was one of a traceback (a null
# hidden_size opened, then crashed describing the model), a torch message from deep in the
# forward (0 heads: "shape '[2, 0, 8]' is invalid"), a hang (a billion layers), or NaN
# predictions shown as an empty table (a NaN eps).
CONFIG_CASES = {
    "no-hidden-size": ({"hidden_size": None}, "config.json gives no hidden_size"),
    "text-hidden-size": ({"hidden_size": "32"}, "hidden_size is '32'"),
    "fractional-hidden-size": ({"hidden_size": 32.5}, "hidden_size is 32.5"),
    "no-heads": ({"num_attention_heads": 0}, "num_attention_heads is 0"),
    "bool-heads": ({"num_attention_heads": True}, "num_attention_heads is True"),
    "no-kv-heads": ({"num_key_value_heads": 0}, "num_key_value_heads is 0"),
    "negative-layers": ({"num_hidden_layers": -1}, "num_hidden_layers is -1"),
    "too-many-layers": ({"num_hidden_layers": 100_000}, "num_hidden_layers is 100,000, but the weights hold 2 layers"),
    "nan-eps": ({"rms_norm_eps": float("nan")}, "rms_norm_eps is nan"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_CASES))
def test_a_config_with_impossible_sizes_is_one_line_naming_the_key(tiny_llama, tmp_path, capsys, name):
    changes, fragment = CONFIG_CASES[name]
    folder = _variant(tiny_llama, tmp_path, name, **changes)
    assert cli.main(["predict", str(folder), "--text", TEXT]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnexplorer: ") and "\n" not in err, err
    assert fragment in err, err


def test_integer_weights_are_refused_naming_the_tensor(tiny_llama, tmp_path):
    # an int8 q_proj failed in torch: "self and mat2 must have the same dtype, but got Float and Char"
    import torch
    from safetensors.torch import load_file, save_file

    folder = _variant(tiny_llama, tmp_path, "int-weights")
    weights = load_file(str(folder / "model.safetensors"))
    weights["layers.1.self_attn.q_proj.weight"] = weights["layers.1.self_attn.q_proj.weight"].to(torch.int8)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"layers\.1\.self_attn\.q_proj\.weight holds int8 numbers"):
        load_model(str(folder))



def test_a_model_whose_stream_overflows_its_norm_is_refused(tiny_llama, tmp_path, capsys):
    """A W_o row of 1e30 (an edited model saved by export-model and opened again) keeps every
    number finite, but the next RMSNorm squares 5e29 to infinity and reads zeros: every logit
    was 0 and predict showed a uniform guess as the model's prediction."""
    folder = _poisoned(tiny_llama, tmp_path, "overflowing", "layers.0.self_attn.o_proj.weight", 1e30)
    assert cli.main(["predict", str(folder), "--text", TEXT]) == 2
    err = capsys.readouterr().err.strip()
    assert "overflowing cannot run on this text from layer 1's input on: its stream reaches" in err, err
    assert "\n" not in err
