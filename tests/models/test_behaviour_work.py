"""How much work a prediction and a generation step do, counted (the speed targets of the
attention-to-behaviour and generation issues, guarded without a clock): which layers run on how
many rows, how often the unembedding is applied, how often an edited layer is compared with the
model's, and that ranks counted instead of sorted are the sort's."""

import numpy as np
import pytest
import torch

from attnexplorer.io.session_file import session_from_dict
from attnexplorer.models import forward as forward_module
from attnexplorer.models import layer_edits, load_model
from attnexplorer.models.generation import Generation
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.models.prediction import Scores

TEXT = "The dog fetched the ball and she was happy"


@pytest.fixture(scope="module", params=["tiny_gpt2_lm", "tiny_llama_lm"])
def decoder(request):
    loaded = load_model(str(request.getfixturevalue(request.param)))
    return loaded, Behaviour(loaded, loaded.run(TEXT))


@pytest.fixture
def counted(monkeypatch, decoder):
    """Every layer the family runs, as (layer, rows), and every unembedding applied (rows).
    Both are the family's own steps (``layer``, ``unembed``), which every route takes: the
    prediction's ``forward.logits`` and a generation step's LM head over its row layout."""
    loaded, _behaviour = decoder
    cls = forward_module.FAMILIES[loaded.family.kind]
    seen = {"layers": [], "logits": []}
    layer, unembed = cls.layer, cls.unembed

    def counting_layer(self, index, x, run):
        seen["layers"].append((index, x.shape[0]))
        return layer(self, index, x, run)

    def counting_unembed(self, residual, *args, **kwargs):
        seen["logits"].append(1 if residual.dim() == 1 else residual.shape[0])
        return unembed(self, residual, *args, **kwargs)

    monkeypatch.setattr(cls, "layer", counting_layer)
    monkeypatch.setattr(cls, "unembed", counting_unembed)
    return seen


def test_the_unedited_prediction_runs_no_layer_and_is_computed_once(decoder, counted):
    loaded, behaviour = decoder
    behaviour.predict(Interventions(), top=5, lens=True)
    assert counted["layers"] == []            # the cached run's residual stream is read, not rerun
    counted["logits"].clear()
    behaviour.predict(Interventions(), top=5, lens=True)
    assert counted["logits"] == []            # the unedited prediction and lens of a position are kept


def test_an_ablation_reruns_only_the_layers_from_its_own(decoder, counted):
    loaded, behaviour = decoder
    n, last = len(behaviour.run.ids), loaded.num_layers - 1
    behaviour.predict(Interventions(), top=5, lens=True)   # the unedited side, once
    for layer in range(loaded.num_layers):
        counted["layers"].clear()
        counted["logits"].clear()
        result = behaviour.predict(Interventions().with_ablation(layer, 1, "zero"), top=5, lens=True)
        assert counted["layers"] == [(i, n) for i in range(layer, last + 1)]
        # the prediction's one row first (drawn before the lens), then the lens's rows of the
        # rerun layers but the last (the prediction's own) in one product
        assert counted["logits"] == [1] + ([last - layer] if layer < last else [])
        assert result["logit_lens"][-1]["intervened"]["top"]["id"] == result["intervened"]["top"][0]["id"]


def test_an_edited_layer_is_compared_with_the_model_once(decoder, counted, monkeypatch):
    loaded, behaviour = decoder
    layer = loaded.num_layers - 1
    parts = loaded.layer_parts(behaviour.run, layer)
    parts["W_o"] = np.array(parts["W_o"], dtype=np.float32) * 1.5
    edited = session_from_dict(parts, "edited")
    calls = []
    real = layer_edits.layer_edit
    monkeypatch.setattr(layer_edits, "layer_edit", lambda *a, **k: calls.append(1) or real(*a, **k))
    interventions = Interventions().with_edit(layer, edited)
    for _ in range(3):
        result = behaviour.predict(interventions, top=5, lens=True)
    assert result["intervened"]["interventions"] == [f"layer {layer} edited"]
    assert len(calls) == 1
    assert [i for i, _rows in counted["layers"]] == [layer] * 3
    other = session_from_dict(parts, "edited again")   # another session: compared afresh
    behaviour.predict(Interventions().with_edit(layer, other), top=5)
    assert len(calls) == 2


def test_a_generation_step_runs_each_layer_once_on_one_row(decoder, counted):
    loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    counted["layers"].clear()
    counted["logits"].clear()
    generation.step()
    generation.step()
    assert counted["layers"] == [(i, 1) for i in range(loaded.num_layers)] * 2
    assert counted["logits"] == [1, 1]


def test_counted_ranks_and_top_tokens_are_the_stable_sorts():
    rng = np.random.default_rng(3)
    values = np.round(rng.normal(size=2000), 1).astype(np.float32)   # many ties
    values[[5, 17, 900]] = values.max()                               # a tie at the top
    scores = Scores(torch.from_numpy(values))
    order = np.argsort(-scores.logits, kind="stable")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(1, len(order) + 1)
    for k in (1, 2, 3, 10, 57, 1999, 2000, 5000):
        assert scores.top(k).tolist() == order[:k].tolist()
    ids = list(range(0, 2000, 7)) + [5, 17, 900]
    assert scores.ranks(ids).tolist() == ranks[ids].tolist()
    assert abs(scores.probs.sum() - 1.0) < 1e-12


def test_a_prediction_reruns_only_the_rows_up_to_its_position(decoder, counted):
    loaded, behaviour = decoder
    n, layers = len(behaviour.run.ids), loaded.num_layers
    behaviour.predict(Interventions(), position=3, top=5)   # the unedited side at that position, once
    counted["logits"].clear()
    behaviour.predict(Interventions().with_ablation(0, 1, "zero"), position=3, top=5)
    assert counted["layers"] == [(i, 4) for i in range(layers)]   # a decoder's row 3 reads rows 0…3 alone
    assert counted["logits"] == [1]
    counted["layers"].clear()
    behaviour.predict(Interventions().with_ablation(0, 1, "mean"), position=3, top=5)
    assert counted["layers"] == [(i, n) for i in range(layers)]   # a head's mean is over the whole text


def test_the_first_rows_rerun_are_the_whole_texts_rows(decoder):
    """Cut to the rows up to the position, an edited mask, an edited input and a patched head
    give that row as the whole text's rerun does."""
    loaded, behaviour = decoder
    layer, position = 1, 4
    parts = loaded.layer_parts(behaviour.run, layer)
    parts["mask"] = {"window": 2}
    x = np.array(parts["embeddings"], dtype=np.float32)
    x[2] *= -1.0
    parts["embeddings"] = x
    edited = session_from_dict(parts, "edited mask and input")
    patched = Interventions(Interventions().with_ablation(0, 1, "patch").ablations,
                            patch_text="The ball fetched the dog and she was happy")
    for interventions in (Interventions().with_edit(layer, edited), patched):
        whole = behaviour.residuals(interventions)
        rows = behaviour.rows_at(interventions, position)
        assert len(rows) == len(whole) == loaded.num_layers
        for a, b in zip(rows, whole):
            assert torch.allclose(a, b[position], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(rows[-1], torch.from_numpy(behaviour.run.final[position]), atol=1e-4)


def test_the_prediction_is_handed_over_before_the_lens(decoder, counted):
    loaded, behaviour = decoder
    behaviour.predict(Interventions(), top=5, lens=True)   # the unedited side, once
    counted["logits"].clear()
    handed = []

    def on_prediction(result):
        handed.append((result, list(counted["logits"])))

    result = behaviour.predict(Interventions().with_ablation(0, 1, "zero"), top=5, lens=True,
                               on_prediction=on_prediction)
    (first, logits_then), = handed
    assert logits_then == [1]                  # only the prediction's row through the unembedding yet
    assert first["logit_lens"] is None and result["logit_lens"] is not None
    assert first["intervened"] is result["intervened"] and first["baseline"] is result["baseline"]


def test_the_models_forward_is_built_once(decoder, monkeypatch):
    loaded, behaviour = decoder
    behaviour.predict(Interventions().with_ablation(0, 1, "zero"), top=5, lens=True)
    built = []
    real = forward_module.family
    monkeypatch.setattr(forward_module, "family", lambda *a: built.append(1) or real(*a))
    behaviour.predict(Interventions().with_ablation(1, 0, "zero"), top=5, lens=True)
    behaviour.predict(Interventions().with_ablation(0, 0, "zero"), position=2, top=5, lens=True)
    assert built == []


def test_the_unembedding_by_blocks_is_the_whole_product(decoder, monkeypatch):
    loaded, behaviour = decoder
    model = behaviour.model
    weight, bias = model.lm_head()
    rows = torch.from_numpy(np.stack([behaviour.run.residual(layer + 1)[-1] for layer in range(loaded.num_layers)]))
    whole = torch.nn.functional.linear(model.final_norm(rows), weight, bias)
    monkeypatch.setattr(forward_module, "VOCAB_BLOCK", 7)   # the tiny vocabulary in many blocks
    blocks = behaviour.logits(rows)
    assert blocks.shape == whole.shape and torch.allclose(blocks, whole, rtol=0, atol=1e-6)
    assert torch.equal(behaviour.logits(rows[-1]), torch.nn.functional.linear(model.final_norm(rows[-1]), weight, bias))


def test_the_last_layer_makes_the_predicted_row_alone(decoder, monkeypatch):
    """Of the last layer only the predicted row is read: it makes that row's query, attention,
    output projection and MLP (its keys and values from every row), unless that layer is changed."""
    loaded, behaviour = decoder
    last, position = loaded.num_layers - 1, 5
    mlp_rows = []
    linear = forward_module._Layers.linear

    def counting(self, x, w, name):
        if name.endswith(("mlp.down_proj", "mlp.c_proj")):
            mlp_rows.append(x.shape[0])
        return linear(self, x, w, name)

    monkeypatch.setattr(forward_module._Layers, "linear", counting)
    monkeypatch.setattr(forward_module, "_conv1d", lambda x, w, name, real=forward_module._conv1d: (
        mlp_rows.append(x.shape[0]) if name.endswith("mlp.c_proj") else None) or real(x, w, name))
    zero = Interventions().with_ablation(0, 1, "zero")
    rows = behaviour.rows_at(zero, position)
    assert mlp_rows == [position + 1] * last + [1]
    whole = behaviour.residuals(zero)
    assert torch.allclose(rows[-1], whole[-1][position], rtol=1e-5, atol=1e-5)
    mlp_rows.clear()
    behaviour.rows_at(Interventions().with_ablation(last, 1, "zero"), position)   # the last layer changed: all rows
    assert mlp_rows == [position + 1]
