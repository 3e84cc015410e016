"""Step through generation (models/generation.py) against transformers' ``generate`` and against
a full recompute of the whole text: greedy ids, each step's logits, the KV cache, Back, seeded
sampling, stop tokens and the interventions in force."""

import numpy as np
import pytest
import torch

from attnexplorer.models import load_model
from attnexplorer.models.forward import family, forward, forward_from
from attnexplorer.models.generation import Generation, Sampling
from attnexplorer.models.interventions import Behaviour, Interventions
from attnexplorer.models.sources import ModelError

TEXT = "The dog fetched the ball"
TOL = 1e-4


@pytest.fixture(scope="module", params=["long_gpt2_lm", "tiny_llama_lm"])
def decoder(request):
    folder = request.getfixturevalue(request.param)
    loaded = load_model(str(folder))
    return folder, loaded, Behaviour(loaded, loaded.run(TEXT))


def _full_logits(behaviour, ids, changes=None):
    """The last position's logits from the whole text, recomputed from its embeddings."""
    b = behaviour
    with torch.no_grad():
        x = family(b.kind, b.loaded.config, b.loaded.weights).embed(torch.tensor(ids))
    after, _ = forward_from(b.kind, b.loaded.config, b.loaded.weights, 0, x, changes=changes or {})
    return b.logits(after[-1][-1:])[0]


def test_greedy_ids_equal_transformers_generate(decoder):
    from transformers import AutoModelForCausalLM

    folder, loaded, behaviour = decoder
    reference = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    reference.generation_config.eos_token_id = None   # 32 tokens whatever they are
    prompt = list(behaviour.run.ids)
    with torch.no_grad():
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                                      pad_token_id=0)[0].tolist()
    generation = Generation(behaviour, stop=())
    steps = generation.run(32)
    assert len(steps) == 32
    assert generation.ids == expected
    assert len(set(generation.ids[len(prompt):])) > 3   # not one token repeated: the test can tell


def test_each_step_is_a_full_recompute(decoder):
    _folder, loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    assert torch.allclose(generation.logits, _full_logits(behaviour, generation.ids), atol=TOL, rtol=0)
    for _ in range(12):
        step = generation.step()
        assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids))) < TOL
    # the last step's attention row is the last row of the whole text's weights
    whole = forward(behaviour.kind, loaded.config, loaded.weights, generation.ids).attentions
    assert step.attention.shape == (loaded.num_layers, loaded.num_heads, len(generation.ids))
    assert np.abs(step.attention - whole[:, :, -1].numpy()).max() < 1e-5
    assert np.allclose(step.attention.sum(-1), 1.0, atol=1e-5)


def test_cache_size_grows_and_back_cuts_it(decoder):
    _folder, loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    n = generation.length
    per_token = loaded.num_layers * 2 * loaded.num_kv_heads * loaded.head_dim
    assert generation.cache_size() == (per_token * n, per_token * n * 4)
    first = generation.step()
    second = generation.step()
    assert (second.cache_numbers, second.cache_bytes) == (per_token * (n + 2), per_token * (n + 2) * 4)
    k, v = generation.cache.layer(loaded.num_layers - 1, loaded.num_kv_heads - 1)
    assert k.shape == v.shape == (n + 2, loaded.head_dim)
    taken = generation.back()
    assert taken == second and generation.length == n + 1 and generation.cache_size()[0] == per_token * (n + 1)
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids))) < TOL
    # taking it again gives the same token and numbers (the cache past the cut is overwritten)
    again = generation.step()
    assert again.token_id == second.token_id
    assert np.abs(again.attention - second.attention).max() < 1e-6
    assert generation.back() == again and generation.back() == first
    with pytest.raises(ModelError, match="nothing to take back"):
        generation.back()


def test_a_given_token_is_appended(decoder):
    _folder, loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    before = generation.logits
    upcoming = generation.upcoming(5)   # what the Generate tab's next-token bars show
    step = generation.step(7)
    assert upcoming == step.top   # the prediction the step picked from
    assert generation.upcoming(1)[0]["id"] == int(torch.argmax(generation.logits))   # now the next position's
    assert step.token_id == 7 and generation.ids[-1] == 7
    assert step.top[0]["id"] == int(torch.argmax(before))  # the model's own top, not the given token
    with pytest.raises(ModelError, match="not in the vocabulary"):
        generation.step(10**6)


def test_a_seeded_sample_reproduces(decoder):
    _folder, _loaded, behaviour = decoder
    sampling = Sampling(greedy=False, temperature=1.5, top_k=50, top_p=0.95, seed=11)
    runs = [Generation(behaviour, sampling=sampling, stop=()).run(16) for _ in range(2)]
    assert [s.token_id for s in runs[0]] == [s.token_id for s in runs[1]]
    other = Generation(behaviour, sampling=Sampling(greedy=False, temperature=1.5, seed=12), stop=()).run(16)
    greedy = Generation(behaviour, stop=()).run(16)
    assert [s.token_id for s in runs[0]] != [s.token_id for s in greedy] or \
        [s.token_id for s in other] != [s.token_id for s in greedy]


def test_top_k_one_is_greedy_and_top_p_keeps_the_likeliest():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.9])
    for seed in range(20):
        assert Sampling(greedy=False, top_k=1, seed=seed).pick(logits, 5) == 1
        assert Sampling(greedy=False, top_p=0.01, seed=seed).pick(logits, 5) == 1
        assert Sampling(greedy=False, top_k=2, seed=seed).pick(logits, 5) in (1, 3)
    drawn = {Sampling(greedy=False, seed=s).pick(logits, 5) for s in range(200)}
    assert drawn == {0, 1, 2, 3}
    for bad in (dict(temperature=0), dict(top_k=0), dict(top_p=1.5), dict(seed=-1)):
        with pytest.raises(ModelError):
            Sampling(greedy=False, **bad)


def test_a_stop_token_ends_the_run(decoder):
    _folder, _loaded, behaviour = decoder
    free = Generation(behaviour, stop=()).run(8)
    stop = free[3].token_id
    first = next(i for i, s in enumerate(free) if s.token_id == stop)
    stopped = Generation(behaviour, stop=(stop,)).run(8)
    assert len(stopped) == first + 1 and stopped[-1].stop and stopped[-1].token_id == stop


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_ablations_stay_in_force(decoder, kind):
    _folder, loaded, behaviour = decoder
    interventions = Interventions().with_ablation(1, 2, kind).with_ablation(0, 0, kind)
    generation = Generation(behaviour, interventions, stop=())
    plain = Generation(behaviour, stop=())
    for _ in range(6):
        generation.step()
        plain.step()
    # the held means are the prompt's: the recompute uses the same changes
    changes = generation.changes
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids, changes))) < TOL
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids))) > 1e-3
    if kind == "mean":
        # the mean is over the prompt's positions, as predict's mean ablation on the prompt
        prompt = Generation(behaviour, interventions, stop=())
        with torch.no_grad():
            residual = behaviour.residuals(interventions)[-1]
        assert torch.max(torch.abs(prompt.logits - behaviour.logits(residual[-1:])[0])) < TOL


def test_an_edited_layer_stays_in_force(decoder):
    from attnexplorer.io.session_file import session_from_dict

    _folder, loaded, behaviour = decoder
    parts = loaded.layer_parts(behaviour.run, 1)
    parts["heads"][0]["W_q"] = np.asarray(parts["heads"][0]["W_q"], dtype=np.float32) * 2.0
    parts["W_o"] = np.asarray(parts["W_o"], dtype=np.float32) * 0.5
    interventions = Interventions().with_edit(1, session_from_dict(parts, "edited"))
    generation = Generation(behaviour, interventions, stop=())
    generation.run(5)
    changes = behaviour.changes(behaviour.effective(interventions))
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids, changes))) < TOL
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids))) > 1e-4
    # replayed without the edit (the window's Generate tab after Reset): the step's copies of
    # the model's weights are kept, those of the edited layer's go with it
    plain = Generation(behaviour, stop=(), layout=generation.layout)
    made = generation.layout.copied
    plain.run(2)
    assert plain.layout.copied - made <= 4   # only layer 1's own matrices (q·k·v, o, gate·up, down) again
    edited = [t for change in generation.changes.values() for t in change.weights.values()]
    assert edited and not any(plain.layout.holds_copy_of(t) for t in edited)
    assert any(plain.layout.holds_copy_of(t) for t in plain.loaded.weights.values())   # the model's are kept
    assert torch.max(torch.abs(plain.logits - _full_logits(behaviour, plain.ids))) < TOL


def test_what_generation_cannot_follow_is_refused(decoder, tiny_bert_mlm):
    _folder, loaded, behaviour = decoder
    with pytest.raises(ModelError, match="patched head"):
        Generation(behaviour, Interventions(patch_text=TEXT).with_ablation(0, 0, "patch"))
    bert = load_model(str(tiny_bert_mlm))
    with pytest.raises(ModelError, match="not a decoder"):
        Generation(Behaviour(bert, bert.run("the dog")))


@pytest.mark.slow
def test_smollm2_greedy_equals_transformers(smollm2, model_cache):
    from transformers import AutoModelForCausalLM

    from attnexplorer.models.sources import gguf_cache_folder

    behaviour = Behaviour(smollm2, smollm2.run("The capital of France is"))
    generation = Generation(behaviour, stop=())
    generation.run(20)
    reference = AutoModelForCausalLM.from_pretrained(str(gguf_cache_folder(smollm2.source)), attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    reference.generation_config.eos_token_id = None
    with torch.no_grad():
        expected = reference.generate(torch.tensor([list(behaviour.run.ids)]), max_new_tokens=20, do_sample=False,
                                      pad_token_id=0)[0].tolist()
    assert generation.ids == expected
    assert torch.max(torch.abs(generation.logits - _full_logits(behaviour, generation.ids))) < TOL


def test_a_step_copies_no_weight_and_no_cache(decoder, monkeypatch):
    """A step reads each weight matrix from the copy laid out for one row, made at the first
    step and never again; it writes its k and v into the cache's buffers in place (they grow by
    doubling, not at every step). Without the layout (a model past ROW_LAYOUT_BYTES) the
    numbers are the same to rounding."""
    from attnexplorer.models import generation as gen

    _folder, loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    generation.step()
    copied = generation.layout.copied
    assert copied > 0
    buffers = [(k.data_ptr(), v.data_ptr()) for k, v in zip(generation.cache.keys, generation.cache.values)]
    capacity = generation.cache.keys[0].shape[1]
    while generation.length < capacity:
        generation.step()
    assert generation.layout.copied == copied
    assert [(k.data_ptr(), v.data_ptr()) for k, v in zip(generation.cache.keys, generation.cache.values)] == buffers
    monkeypatch.setattr(gen, "ROW_LAYOUT_BYTES", 0)
    plain = Generation(behaviour, stop=())
    for token in generation.ids[plain.length:]:
        plain.step(token)
    assert plain.layout.copied == 0 and not plain.layout.enabled
    assert torch.max(torch.abs(plain.logits - generation.logits)) < TOL


@pytest.mark.parametrize("temperature", [5e-324, 1e-310, 1e-30])
def test_a_tiny_temperature_draws_the_most_likely_token(temperature):
    """A temperature near 0 is greedy in the limit: logits / 5e-324 overflowed to ±inf, the
    softmax made NaN and the draw fell on token 0 whatever the logits said."""
    logits = torch.tensor([0.5, 3.0, -2.0, 2.9], dtype=torch.float32)
    for position in range(5):
        assert Sampling(greedy=False, temperature=temperature).pick(logits, position) == 1
        assert Sampling(greedy=False, temperature=temperature, top_k=2, top_p=0.5).pick(logits, position) == 1


def test_an_edit_that_overflows_the_stream_stops_generation_with_the_reason(decoder):
    """Generating under an edited W_o of 1e30 drew token 0 at every step from zero (or NaN)
    logits; it is refused, and the cache keeps no row of the refused token."""
    from attnexplorer.io.session_file import session_from_dict

    _folder, loaded, behaviour = decoder
    parts = loaded.layer_parts(behaviour.run, 1)
    w_o = np.array(parts["W_o"], dtype=np.float32)
    w_o[0, :] = 1e30
    parts["W_o"] = w_o
    interventions = Interventions().with_edit(1, session_from_dict(parts, "overflowing"))
    with pytest.raises(ModelError, match="float32"):
        Generation(behaviour, interventions, stop=())


def _dispatched(run):
    """The aten operators ``run()`` dispatches, counted by name."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    counts = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[func.__name__.split(".")[0]] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return counts


def test_a_step_reads_its_weights_through_one_thread_of_openblas(decoder, monkeypatch):
    """A step's one-row products are numpy's OpenBLAS over the input × output copies (torch's
    sgemm streamed them ~25% slower on this AMD CPU): no torch matrix product is dispatched for
    them, the BLAS runs on the step's own thread, and its thread count is put back after."""
    from attnexplorer.models import generation as gen

    _folder, loaded, behaviour = decoder
    generation = Generation(behaviour, stop=())
    generation.step()
    blas = generation.layout.blas
    assert blas is not None   # numpy's wheels bundle OpenBLAS; threadpoolctl is a dependency
    before = blas.get_num_threads()
    seen = []
    products = gen.RowLayout.linears

    def linears(layout, x, pairs):
        seen.append(blas.get_num_threads())
        return products(layout, x, pairs)

    monkeypatch.setattr(gen.RowLayout, "linears", linears)
    counts = _dispatched(generation.step)
    layers = generation.model.layers
    # Llama: every layer's products and the LM head; GPT-2's Conv1D weights are already input ×
    # output (its 4 addmm a layer are its own), only its LM head is laid out
    own = 4 * layers if behaviour.kind == "gpt2" else 0
    assert counts["mm"] + counts["addmm"] + counts["linear"] == own
    assert len(seen) == (1 if own else 4 * layers + 1) and set(seen) == {1}
    assert blas.get_num_threads() == before
    # the rest counted: ~80 operators a layer and ~60 a step on the Llamas (2,484 in all on
    # SmolLM2's 30 layers, 300 on the tiny one's 3), fewer on GPT-2
    assert sum(counts.values()) <= 100 * layers + 100, counts
