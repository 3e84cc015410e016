"""Families beside Llama from a .gguf file (issue 26): a tiny random Qwen3 (QK-norm) and Gemma 2
(norms stored as 1 + w, soft-caps, a sliding window) written as GGUF with llama.cpp's tensor
names, opened through transformers' GGUF reader, then from the dequantised cache through
attnexplorer's own reader: both give the model's own attention weights, every layer's session
reproduces them, and the logits are the model's."""

import json

import numpy as np
import pytest
import torch

from model_reference import reference

from attnexplorer.models import load_model

TEXT = "The dog fetched the ball and she was happy"
SIZES = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
             max_position_embeddings=64, num_hidden_layers=2, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=0,
             pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 500.0})


def _model(family, vocabulary):
    """The transformers model, every parameter random, its norms' weights near 1 (Gemma's w near
    0: its RMSNorm multiplies by 1 + w). Qwen3's head_dim is 128: transformers' GGUF reader takes
    its default, not the file's key length; Gemma 2's is read from the file."""
    import transformers

    if family == "qwen3":
        config = transformers.Qwen3Config(vocab_size=vocabulary, head_dim=128, tie_word_embeddings=False, **SIZES)
        model = transformers.Qwen3ForCausalLM(config)
    else:   # its GGUF keeps the tied embeddings and transformers' default caps and query scalar
        config = transformers.Gemma2Config(vocab_size=vocabulary, head_dim=8, sliding_window=3, **SIZES)
        model = transformers.Gemma2ForCausalLM(config)
    generator = torch.Generator().manual_seed(21)
    near_one = 0.0 if family == "gemma2" else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5 + (near_one if "norm" in name else 0.0))
    model.config._attn_implementation = "eager"
    return model.eval()


def _write_gguf(path, family, tokenizer_folder):
    """The model and its GGUF file: float32 tensors under llama.cpp's names
    (``gguf.get_tensor_name_map``; Gemma's norms as 1 + w, as llama.cpp stores them), the tiny
    models' byte-level tokenizer as a gpt2 one."""
    import gguf

    if family == "qwen3":   # byte-level BPE, as Qwen's files hold it
        inner = json.loads((tokenizer_folder / "tokenizer.json").read_text())["model"]
        tokens = [t for t, _ in sorted(inner["vocab"].items(), key=lambda kv: kv[1])]
        merges = [" ".join(m) if isinstance(m, list) else m for m in inner["merges"]]
    else:   # sentencepiece, as Gemma's: its specials, the word mark and the text's letters (no merges)
        tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "\u2581"] + sorted(set(TEXT.replace(" ", "")))
        merges = None
    model = _model(family, len(tokens))
    config = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3 if family == "qwen3" else gguf.MODEL_ARCH.GEMMA2, 2)
    writer = gguf.GGUFWriter(str(path), family)
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_block_count(2)
    writer.add_feed_forward_length(48)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_freq_base(500.0)
    writer.add_layer_norm_rms_eps(1e-6)
    if family == "gemma2":
        writer.add_sliding_window(3)
    writer.add_tokenizer_model("gpt2" if merges else "llama")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    if merges:
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_merges(merges)
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(0)
    else:
        writer.add_token_scores([0.0] * len(tokens))
        writer.add_bos_token_id(2)
        writer.add_eos_token_id(1)
        writer.add_unk_token_id(3)
        writer.add_pad_token_id(0)
    for name, tensor in model.state_dict().items():
        base, _, end = name.rpartition(".")
        if base == "lm_head" and config.tie_word_embeddings:
            continue
        value = tensor.detach().float()
        if family == "gemma2" and name.endswith("norm.weight"):
            value = value + 1.0
        writer.add_tensor(f"{names.get_name(base)}.{end}", value.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def _theirs(model, ids):
    with torch.no_grad():
        result = model(input_ids=torch.tensor([list(ids)]), output_attentions=True)
    return torch.stack([a[0] for a in result.attentions]).double().numpy(), result.logits[0].double().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "gemma2"])
def test_a_gguf_opens_exactly_then_from_its_cache(family, tmp_path, model_cache, tiny_qwen3_lm):
    from attnexplorer.models.interventions import Behaviour, Interventions

    path = tmp_path / f"tiny-{family}.gguf"
    model = _write_gguf(path, family, tiny_qwen3_lm)
    first = load_model(str(path))
    assert first.engine == "transformers" and first.family.name == family and not first.from_cache
    run = first.run(TEXT)
    weights, logits = _theirs(model, run.ids)
    assert weights.std() > 0.05
    assert np.abs(run.attentions - weights).max() < 1e-5
    for layer in range(2):
        session = json.loads(json.dumps(first.layer_session(run, layer)))
        assert np.abs(reference(session)[0] - weights[layer]).max() < 1e-5
    if family == "gemma2":
        assert session["softcap"] == 50.0 and first.layer_session(run, 0)["mask"] == {"window": 3}
    else:
        assert session["qk_norm"]["over"] == "head" and len(session["qk_norm"]["query_weight"]) == 128
    again = load_model(str(path))   # the dequantised cache, read without transformers
    assert again.from_cache and again.engine == "attnexplorer"
    cached = again.run(TEXT)
    assert cached.ids == run.ids and np.abs(cached.attentions - weights).max() < 1e-5
    behaviour = Behaviour(again, cached)
    ours = behaviour.logits(behaviour.residuals(Interventions())[-1]).double().numpy()
    assert np.abs(ours - logits).max() < 1e-4
