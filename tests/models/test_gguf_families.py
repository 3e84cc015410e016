"""A family beside Llama from a .gguf file (issue 26): a tiny random Qwen3 (QK-norm) written as
GGUF with llama.cpp's tensor names, opened through transformers' GGUF reader, then from the
dequantised cache through attnexplorer's own reader: both give the model's own attention
weights, every layer's session reproduces them, and the logits are the model's."""

import json

import numpy as np
import pytest
import torch

from model_reference import reference

from attnexplorer.models import load_model

TEXT = "The dog fetched the ball and she was happy"


def _write_qwen3_gguf(path, tokenizer_folder):
    """The model (transformers' Qwen3ForCausalLM) and its GGUF file: float32 tensors under
    llama.cpp's names (``gguf.get_tensor_name_map``), the tiny models' byte-level tokenizer as a
    gpt2 one. head_dim 128: transformers' GGUF reader takes Qwen3's default, not the file's key
    length."""
    import gguf
    from transformers import Qwen3Config, Qwen3ForCausalLM

    inner = json.loads((tokenizer_folder / "tokenizer.json").read_text())["model"]
    config = Qwen3Config(vocab_size=len(inner["vocab"]), hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=48, max_position_embeddings=64, num_hidden_layers=2, head_dim=128,
                         rope_parameters={"rope_type": "default", "rope_theta": 500.0}, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = Qwen3ForCausalLM(config)
    generator = torch.Generator().manual_seed(21)
    with torch.no_grad():   # every parameter random, the norms' weights near 1
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5 + (1.0 if "norm" in name else 0.0))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
    writer = gguf.GGUFWriter(str(path), "qwen3")
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_block_count(2)
    writer.add_feed_forward_length(48)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(128)
    writer.add_value_length(128)
    writer.add_rope_freq_base(500.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([t for t, _ in sorted(inner["vocab"].items(), key=lambda kv: kv[1])])
    writer.add_token_types([1] * len(inner["vocab"]))
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in inner["merges"]])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    for name, tensor in model.state_dict().items():
        base, _, end = name.rpartition(".")
        writer.add_tensor(f"{names.get_name(base)}.{end}", tensor.detach().float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model.config._attn_implementation = "eager"
    return model.eval()


@pytest.fixture(scope="module")
def qwen3_gguf(tmp_path_factory, model_cache, tiny_qwen3_lm):
    path = tmp_path_factory.mktemp("qwen3-gguf") / "tiny-qwen3.gguf"
    return path, _write_qwen3_gguf(path, tiny_qwen3_lm)


def _theirs(model, ids):
    with torch.no_grad():
        result = model(input_ids=torch.tensor([list(ids)]), output_attentions=True)
    return torch.stack([a[0] for a in result.attentions]).double().numpy(), result.logits[0].double().numpy()


@pytest.mark.slow
def test_a_qwen3_gguf_opens_exactly_then_from_its_cache(qwen3_gguf):
    from attnexplorer.models.interventions import Behaviour, Interventions

    path, model = qwen3_gguf
    first = load_model(str(path))
    assert first.engine == "transformers" and first.family.name == "qwen3" and not first.from_cache
    run = first.run(TEXT)
    weights, logits = _theirs(model, run.ids)
    assert weights.std() > 0.05
    assert np.abs(run.attentions - weights).max() < 1e-5
    for layer in range(2):
        session = json.loads(json.dumps(first.layer_session(run, layer)))
        assert session["qk_norm"]["over"] == "head" and len(session["qk_norm"]["query_weight"]) == 128
        assert np.abs(reference(session)[0] - weights[layer]).max() < 1e-5
    again = load_model(str(path))   # the dequantised cache, read without transformers
    assert again.from_cache and again.engine == "attnexplorer"
    cached = again.run(TEXT)
    assert cached.ids == run.ids and np.abs(cached.attentions - weights).max() < 1e-5
    behaviour = Behaviour(again, cached)
    ours = behaviour.logits(behaviour.residuals(Interventions())[-1]).double().numpy()
    assert np.abs(ours - logits).max() < 1e-4
