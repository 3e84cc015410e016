"""File ▸ Open model… on the families of issue 26: a layer of each goes into the tables exactly
(the badge), with its window mask, RoBERTa's position rows, GPT-NeoX's LayerNorm and partial
rotation, SmolLM3's layer without RoPE, QK-norm, soft-capping, a query scale factor and scaled RoPE."""

import numpy as np
import pytest

TEXT = "The dog fetched the ball and she was happy"
# a masked-LM's prediction fills its mask token
TEXTS = {"tiny_roberta_mlm": "The dog fetched the<mask> and she was happy",
         "tiny_distilbert_mlm": "The dog fetched the [MASK] and she was happy"}


@pytest.mark.parametrize("name, layer", [("tiny_qwen2_lm", 1), ("tiny_mistral_lm", 0), ("tiny_roberta_mlm", 0),
                                         ("tiny_distilbert_mlm", 0), ("tiny_phi3_lm", 0), ("tiny_neox_lm", 1),
                                         ("tiny_gemma_lm", 0), ("tiny_smollm3_lm", 1), ("tiny_qwen3_lm", 1),
                                         ("tiny_olmo2_lm", 0), ("tiny_gemma2_lm", 0), ("tiny_gemma3_lm", 1),
                                         ("tiny_llama3_lm", 1)])
def test_a_layer_of_each_family_opens_in_the_tables_matching_the_model(model_in_window, qtbot, request, name, layer):
    window, controller = model_in_window(request.getfixturevalue(name), TEXTS.get(name, TEXT), layer)
    qtbot.waitUntil(lambda: controller.window.badge.text().startswith(f"Tables: layer {layer}: matches the model"),
                    timeout=30000)
    session = window.document.session
    run = controller.window.run
    assert tuple(session.tokens) == run.tokens
    if name == "tiny_qwen2_lm":
        assert (session.mask.kind, session.mask.window) == ("window", 3)
    if name == "tiny_mistral_lm":
        assert (session.mask.kind, session.mask.window) == ("window", 4)
    if name == "tiny_roberta_mlm":   # the rows after padding_idx 1
        table = controller.window.loaded.weights["embeddings.position_embeddings.weight"].numpy()
        assert np.array_equal(session.positions.table, table[2:2 + len(run.ids)])
    if name == "tiny_neox_lm":   # its LayerNorm and half of each head rotated
        assert session.norm.kind == "layer" and session.positions.dims == 4
    if name == "tiny_smollm3_lm":   # the layer without RoPE
        assert session.positions is None and session.mask.window == 3
    if name in ("tiny_qwen3_lm", "tiny_olmo2_lm"):   # QK-norm over each head / the whole projection
        assert session.qk_norm.over == ("head" if name == "tiny_qwen3_lm" else "all")
    if name == "tiny_gemma2_lm":
        assert session.softcap == 2.0 and session.scale.kind == "factor"
    if name in ("tiny_gemma3_lm", "tiny_llama3_lm"):   # a scaled RoPE, angles as the model makes them
        assert session.positions.scaling.kind == ("linear" if name == "tiny_gemma3_lm" else "llama3")
        assert session.positions.angles == "float32"
    assert np.abs(window.document.result.weights - run.attentions[layer]).max() < 1e-5
