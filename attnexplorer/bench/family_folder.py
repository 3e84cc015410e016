"""A random model of a family attnexplorer reads beside the packaged two, written as a Hugging
Face folder for the bench's "open a model from a folder" row (``real_models.bench_family_folders``).

No such model ships with attnexplorer, and nothing is downloaded, so the bench builds one: a
transformers config of the family at about MiniLM's size (6 layers × 6 heads sharing 2 K/V
heads, d = 384, head_dim 64), every weight random, and a byte-level BPE tokenizer trained on a
paragraph. Only the folder's shape matters for the timing (what is read, how it is run), not
what the weights say. Building it imports transformers, which the timed opens never do.
"""

from __future__ import annotations

from pathlib import Path

# The families the row opens: Gemma 2 (soft-caps, four norms a layer, alternating windows) and
# Qwen3 (QK-norm), the two with the most stages beside Llama's.
FAMILIES = ("gemma2", "qwen3")

_TEXT = ("The dog fetched the ball and she was happy because the sun was warm, the grass was green and the whole "
         "long afternoon lay ahead of them all. Attention reads every token; life is short, eat dessert first.")


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([_TEXT, _TEXT.lower()], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<s>", bos_token="<s>", unk_token="<s>")


def build_family_folder(folder: Path, model_type: str, layers: int = 6, hidden: int = 384) -> Path:
    """Write a random ``model_type`` causal LM (with its tokenizer) into ``folder``; returns it."""
    import torch
    import transformers

    tokenizer = _tokenizer()
    heads, head_dim = 6, hidden // 6
    common = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=2, head_dim=head_dim, intermediate_size=4 * hidden, max_position_embeddings=512,
                  pad_token_id=0, bos_token_id=0, eos_token_id=0)
    if model_type == "gemma2":
        config = transformers.Gemma2Config(**common, query_pre_attn_scalar=head_dim, sliding_window=64)
        model_class = transformers.Gemma2ForCausalLM
    elif model_type == "qwen3":
        config = transformers.Qwen3Config(**common, tie_word_embeddings=True)
        model_class = transformers.Qwen3ForCausalLM
    else:
        raise ValueError(f"no bench folder for {model_type!r}: {', '.join(FAMILIES)}")
    model = model_class(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    folder = Path(folder)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
