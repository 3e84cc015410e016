"""attnexplorer's own forward (native.py + forward.py) against transformers, the reference.

The fast route must say exactly what the model itself says: the same token ids and pieces as
transformers' tokenizer, each layer's attention within 1e-6 of transformers' eager
``output_attentions``, each layer input and attention output within 1e-5 (both routes run a
short text on one thread, ``forward.threads_for``: on two, transformers' own numbers move by
1.5e-5 on a tiny Llama's second layer). And a folder the fast route cannot vouch for goes
through transformers instead of being read wrongly.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from attnexplorer.models import load_model

TEXT = "The dog fetched the ball and she was happy"
# accents, CJK, emoji, a newline and a tab, runs of spaces, an over-long word, punctuation
HARD_TEXTS = ["Ünïcödé café naïve", "中文字符 and 日本語", "a dog 🐕 and a cat 🐈", "line one\nline\ttwo  spaced",
              "x" * 120, "Don't stop—really?!", "   leading and trailing   "]


def _agree(own, reference, texts=(TEXT,)):
    assert own.engine == "attnexplorer", own.notes
    assert reference.engine == "transformers"
    for text in texts:
        a, b = own.run(text), reference.run(text)
        assert a.ids == b.ids and a.pieces == b.pieces and a.tokens == b.tokens, text
        assert a.attentions.shape == b.attentions.shape
        assert np.abs(a.attentions - b.attentions).max() < 1e-6, text
        for x, y in zip(a.layer_inputs, b.layer_inputs):
            assert np.abs(x - y).max() < 1e-5, text
        assert np.abs(a.attention_outputs - b.attention_outputs).max() < 1e-5, text


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_gpt2", "tiny_llama"])
def test_own_forward_says_what_transformers_says(name, request):
    folder = str(request.getfixturevalue(name))
    _agree(load_model(folder), load_model(folder, engine="transformers"), (TEXT, "dog dog dog cat", TEXT.lower()))


def test_gpt2_scaled_by_layer_follows_its_config(tiny_gpt2, tmp_path):
    folder = tmp_path / "gpt2-scaled"
    shutil.copytree(tiny_gpt2, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(scale_attn_by_inverse_layer_idx=True, activation_function="relu")
    (folder / "config.json").write_text(json.dumps(config))
    _agree(load_model(str(folder)), load_model(str(folder), engine="transformers"))


@pytest.mark.slow
def test_minilm_own_forward_and_tokenizer_match_transformers(minilm):
    _agree(minilm, load_model("minilm", engine="transformers"), (TEXT, *HARD_TEXTS))


@pytest.mark.slow
def test_smollm2_cache_tokenizer_matches_transformers(smollm2, model_cache):
    cached = load_model("smollm2")   # the fixture's open filled the cache
    assert cached.engine == "attnexplorer"
    for text in (TEXT, *HARD_TEXTS):
        assert cached.tokenizer.encode(text) == smollm2.tokenizer.encode(text), text


def test_an_activation_it_does_not_know_goes_through_transformers(tiny_bert, tmp_path):
    folder = tmp_path / "bert-gelu-fast"
    shutil.copytree(tiny_bert, folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_act"] = "gelu_fast"
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_model(str(folder))
    assert loaded.engine == "transformers" and "gelu_fast" in loaded.notes[0]
    assert loaded.run(TEXT).attentions.shape[:2] == (2, 3)


def test_a_tokenizer_transformers_would_change_is_left_to_transformers(tiny_llama, tmp_path):
    # add_bos_token may make transformers rewrite the tokenizer's template (update_post_processor):
    # the own route does not guess how, it asks transformers' tokenizer and still runs its own forward
    folder = tmp_path / "llama-bos"
    shutil.copytree(tiny_llama, folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["add_bos_token"] = True
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    own, reference = load_model(str(folder)), load_model(str(folder), engine="transformers")
    from attnexplorer.models.hf import TransformersTokenizer

    assert isinstance(own.tokenizer, TransformersTokenizer)
    _agree(own, reference)


def test_the_fast_route_never_imports_transformers_and_the_hub_stays_offline(tiny_bert):
    code = ("import os, sys; from attnexplorer.models import load_model; "
            "m = load_model(sys.argv[1]); m.run('the dog'); print(m.engine, 'transformers' in sys.modules); "
            "load_model(sys.argv[1], engine='transformers'); "
            "print(os.environ.get('HF_HUB_OFFLINE'), sys.modules['huggingface_hub'].constants.HF_HUB_OFFLINE)")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code, str(tiny_bert)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    # own route: no transformers; transformers route: the hub offline inside, the user's environment untouched
    assert out.stdout.split() == ["attnexplorer", "False", "None", "True"]
