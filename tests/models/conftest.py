"""Models for the import tests, each built or loaded once per test session.

Tiny BERT, GPT-2 and Llama models are made from a config with every parameter drawn at random
(biases and norm weights included, so that a bias read from the wrong place shows), each with a
small tokenizer trained here, and saved in Hugging Face layout: nothing is downloaded. The
packaged MiniLM and SmolLM2 are loaded once each; SmolLM2's dequantised cache goes to a
temporary folder, so the first load really dequantises.
"""

import os
import sys

import pytest


def pytest_collection_modifyitems(config, items):
    # The models extra (transformers 5.24+) installs only on Python 3.11 and newer; on 3.10 the
    # CLI and the window say so instead (tests/test_models_python310.py checks that message).
    if sys.version_info >= (3, 11):
        return
    skip = pytest.mark.skip(reason="real models need transformers 5.24+, which needs Python 3.11+")
    for item in items:
        if "tests/models/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


WORDS = ("the dog fetched ball and she was happy life is short eat dessert first "
         "a cat sat on mat attention reads every token").split()
TEXT = "The dog fetched the ball and she was happy"


def _randomise(model, seed, scale=0.5):
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)


def _bytelevel_tokenizer(special):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[special], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(WORDS), TEXT, TEXT.lower()], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=special, bos_token=special, unk_token=special)


def _save(folder, model, tokenizer):
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    from transformers import BertModel

    return _bert(tmp_path_factory.mktemp("tiny-bert"), BertModel, 1)


def _bert(folder, model_class, seed):
    from transformers import BertConfig, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS) - {"fetched"}) + ["fetch", "##ed"]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    config = BertConfig(vocab_size=len(vocab), hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=40, max_position_embeddings=20)
    model = model_class(config)
    _randomise(model, seed)
    return _save(folder, model, tokenizer)


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory):
    from transformers import GPT2Config, GPT2Model

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = _bytelevel_tokenizer("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=24, n_layer=2, n_head=4, n_positions=32)
    model = GPT2Model(config)
    _randomise(model, 2)
    return _save(folder, model, tokenizer)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaModel

    return _llama(tmp_path_factory.mktemp("tiny-llama"), LlamaModel, 3, LlamaConfig, num_hidden_layers=2)


def _llama(folder, model_class, seed, config_class, **extra):
    tokenizer = _bytelevel_tokenizer("<s>")
    # 4 query heads sharing 2 K/V heads, biases on, θ away from the default: every Llama part shows.
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
                          attention_bias=True, rope_theta=500.0, **extra)
    model = model_class(config)
    _randomise(model, seed)
    # the RMSNorm weights near 1 keep the random stream in float32's comfortable range
    import torch

    base = getattr(model, "model", model)
    with torch.no_grad():
        for layer in base.layers:
            layer.input_layernorm.weight.add_(1.0)
        if base is not model:
            base.norm.weight.add_(1.0)
    return _save(folder, model, tokenizer)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    """A fresh, empty cache folder for the whole test session (the user's is never touched)."""
    folder = tmp_path_factory.mktemp("model-cache")
    old = os.environ.get("ATTNEXPLORER_CACHE_DIR")
    os.environ["ATTNEXPLORER_CACHE_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("ATTNEXPLORER_CACHE_DIR", None)
    else:
        os.environ["ATTNEXPLORER_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def minilm():
    from attnexplorer.models import load_model

    return load_model("minilm")


@pytest.fixture(scope="session")
def smollm2(model_cache):
    from attnexplorer.models import load_model

    return load_model("smollm2")


# The same three families with their heads (an LM head, a masked-LM head), for the prediction
# tests: transformers' AutoModelForCausalLM / AutoModelForMaskedLM is the reference there.

@pytest.fixture(scope="session")
def tiny_gpt2_lm(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("tiny-gpt2-lm")
    tokenizer = _bytelevel_tokenizer("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=24, n_layer=3, n_head=4, n_positions=32)
    model = GPT2LMHeadModel(config)   # the LM head tied to wte, as GPT-2's is
    _randomise(model, 4)
    return _save(folder, model, tokenizer)


@pytest.fixture(scope="session")
def long_gpt2_lm(tmp_path_factory):
    """A tiny random GPT-2 LM with room for a prompt and 32 new tokens (generation), its weights
    small enough that greedy decoding wanders (7 different tokens in 32) instead of looping on 2."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = _bytelevel_tokenizer("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=24, n_layer=3, n_head=4, n_positions=64,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config)
    _randomise(model, 9, scale=0.15)
    return _save(tmp_path_factory.mktemp("long-gpt2-lm"), model, tokenizer)


@pytest.fixture(scope="session")
def tiny_llama_lm(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    # an untied LM head, so reading it from lm_head.weight (not the embeddings) is what is checked
    return _llama(tmp_path_factory.mktemp("tiny-llama-lm"), LlamaForCausalLM, 5, LlamaConfig, num_hidden_layers=3,
                  tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_bert_mlm(tmp_path_factory):
    from transformers import BertForMaskedLM

    return _bert(tmp_path_factory.mktemp("tiny-bert-mlm"), BertForMaskedLM, 6)


# Families beside the three (issue 26): Llama's kin with biases or a sliding window, and
# RoBERTa beside BERT, each with its task head so that the logits are compared too.

@pytest.fixture(scope="session")
def tiny_qwen2_lm(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # sliding-window layers from layer 1 on (max_window_layers), a window of 3 tokens: layer 0
    # full causal, layer 1 windowed, so both kinds of layer are checked in one model
    return _llama(tmp_path_factory.mktemp("tiny-qwen2"), Qwen2ForCausalLM, 7, Qwen2Config, num_hidden_layers=2,
                  use_sliding_window=True, sliding_window=3, max_window_layers=1)


@pytest.fixture(scope="session")
def tiny_mistral_lm(tmp_path_factory):
    from transformers import MistralConfig, MistralForCausalLM

    # a window of 4 tokens on every layer, and a head_dim apart from hidden_size / heads
    return _llama(tmp_path_factory.mktemp("tiny-mistral"), MistralForCausalLM, 8, MistralConfig, num_hidden_layers=2,
                  sliding_window=4, head_dim=6)


@pytest.fixture(scope="session")
def tiny_roberta_mlm(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]   # <pad> is id 1, RoBERTa's padding_idx
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(WORDS), TEXT, TEXT.lower()], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>", mask_token="<mask>")
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                           intermediate_size=40, max_position_embeddings=24, type_vocab_size=1, pad_token_id=1)
    model = RobertaForMaskedLM(config)
    _randomise(model, 9)
    return _save(tmp_path_factory.mktemp("tiny-roberta"), model, tokenizer)


@pytest.fixture
def model_in_window(qtbot, isolated):
    """``open(folder, text, layer)``: a main window (on the pronoun preset) whose model controller
    has opened the model on the text and drawn its first prediction; returns (window, controller).
    Errors are collected in ``window.errors``; everything is closed after the test."""
    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.document import SessionDocument
    from attnexplorer.ui.window import MainWindow
    from attnexplorer.ui.model.controller import ModelController
    from attnexplorer.ui.settings import AppSettings

    opened = []

    def open_model(folder, text, layer=1):
        doc = SessionDocument(build_preset("pronoun").session)
        window = MainWindow(doc, AppSettings())
        window.errors = []
        window.show_error = lambda title, message: window.errors.append(message)
        window.ask_unsaved = lambda: "discard"
        qtbot.addWidget(window)
        window.model_controller = controller = ModelController(window, doc, window.actions)
        opened.append((window, controller, doc))
        controller.start(str(folder), text, layer)
        qtbot.waitUntil(lambda: controller.behaviour.last_result is not None or bool(window.errors), timeout=120000)
        assert not window.errors, window.errors
        return window, controller

    yield open_model
    for window, controller, doc in opened:
        controller.window.close()
        controller.shutdown()
        window.actions.autosaver.discard()
        doc.shutdown()


@pytest.fixture(scope="session")
def tiny_distilbert_mlm(tmp_path_factory):
    from transformers import BertTokenizerFast, DistilBertConfig, DistilBertForMaskedLM

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS) - {"fetched"}) + ["fetch", "##ed"]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    config = DistilBertConfig(vocab_size=len(vocab), dim=24, n_layers=2, n_heads=3, hidden_dim=40,
                              max_position_embeddings=20, activation="gelu")
    model = DistilBertForMaskedLM(config)
    _randomise(model, 10)
    return _save(tmp_path_factory.mktemp("tiny-distilbert"), model, tokenizer)


# The Llama-shaped families read under Llama's names (models/decoders.py), each with its LM
# head: every parameter random, the RMSNorm/LayerNorm weights near 1 (Gemma's 1 + w is near 1
# already), RoPE θ away from the default, and each family's own part switched on where it is
# optional (a partial rotation, a sliding window, a layer without RoPE).

def _decoder(folder, model_class, config_class, seed, **settings):
    import torch

    tokenizer = _bytelevel_tokenizer("<s>")
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, num_attention_heads=4, intermediate_size=48,
                          max_position_embeddings=64, num_hidden_layers=2, pad_token_id=0, bos_token_id=0,
                          eos_token_id=0, **settings)
    model = model_class(config)
    _randomise(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight") and config.model_type != "gemma":
                p.add_(1.0)
    return _save(folder, model, tokenizer)


@pytest.fixture(scope="session")
def tiny_phi3_lm(tmp_path_factory):
    from transformers import Phi3Config, Phi3ForCausalLM

    # fused qkv_proj / gate_up_proj, half of each head rotated, a window of 4 on every layer
    return _decoder(tmp_path_factory.mktemp("tiny-phi3"), Phi3ForCausalLM, Phi3Config, 11, num_key_value_heads=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
                    sliding_window=4, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_neox_lm(tmp_path_factory):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    # per-head fused query_key_value with biases, half of each head rotated (4 of 8),
    # LayerNorms with biases, the parallel residual
    return _decoder(tmp_path_factory.mktemp("tiny-neox"), GPTNeoXForCausalLM, GPTNeoXConfig, 12,
                    rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
                    use_parallel_residual=True, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_gemma_lm(tmp_path_factory):
    from transformers import GemmaConfig, GemmaForCausalLM

    # embeddings × √32, RMSNorm × (1 + w), the tanh GELU gate, head_dim 8 apart from the default 256
    return _decoder(tmp_path_factory.mktemp("tiny-gemma"), GemmaForCausalLM, GemmaConfig, 13, num_key_value_heads=2,
                    head_dim=8, rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.fixture(scope="session")
def tiny_smollm3_lm(tmp_path_factory):
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    # layer 1 without RoPE, and (as SmolLM3 does by default) that layer sliding, with a window of 3
    return _decoder(tmp_path_factory.mktemp("tiny-smollm3"), SmolLM3ForCausalLM, SmolLM3Config, 14,
                    num_key_value_heads=2, no_rope_layers=[1, 0], use_sliding_window=True, sliding_window=3,
                    rope_parameters={"rope_type": "default", "rope_theta": 500.0}, tie_word_embeddings=False)


# The families whose attention has version 3's stages: QK-norm (Qwen3 per head, OLMo 2 over the
# whole projection, Gemma 3 per head with 1 + w), soft-capping and a query scale apart from
# head_dim^−½ (Gemma 2), Gemma 3's local and global RoPE, Llama 3's scaled RoPE.

@pytest.fixture(scope="session")
def tiny_qwen3_lm(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return _decoder(tmp_path_factory.mktemp("tiny-qwen3"), Qwen3ForCausalLM, Qwen3Config, 15, num_key_value_heads=2,
                    head_dim=8, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                    use_sliding_window=True, sliding_window=3, max_window_layers=1, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_olmo2_lm(tmp_path_factory):
    from transformers import Olmo2Config, Olmo2ForCausalLM

    return _decoder(tmp_path_factory.mktemp("tiny-olmo2"), Olmo2ForCausalLM, Olmo2Config, 20, num_key_value_heads=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 500.0}, tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_gemma2_lm(tmp_path_factory):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # caps small enough to bite on random scores and logits; layer 0 sliding (window 3), layer 1 global
    return _decoder(tmp_path_factory.mktemp("tiny-gemma2"), Gemma2ForCausalLM, Gemma2Config, 17, num_key_value_heads=2,
                    head_dim=8, query_pre_attn_scalar=12, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                    sliding_window=3, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                    tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_gemma3_lm(tmp_path_factory):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    # the local layer (0) turns by θ 100 with a window of 3, the global one by θ 500 stretched linearly
    return _decoder(tmp_path_factory.mktemp("tiny-gemma3"), Gemma3ForCausalLM, Gemma3TextConfig, 18,
                    num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=3,
                    layer_types=["sliding_attention", "full_attention"],
                    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                     "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}},
                    tie_word_embeddings=False)


@pytest.fixture(scope="session")
def tiny_llama3_lm(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    # Llama 3's scaling over an original length of 16: the low frequencies ÷ 8, the middle blended
    return _decoder(tmp_path_factory.mktemp("tiny-llama3"), LlamaForCausalLM, LlamaConfig, 19, num_key_value_heads=2,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                    tie_word_embeddings=False)
