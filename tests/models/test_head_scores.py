"""Head scores and attribution against formulas written here, apart from attnexplorer's code:
TransformerLens's head-detector patterns and induction score in numpy, on the attention weights
transformers itself returns (eager, ``output_attentions``); direct logit attribution and the
ablation sweep against transformers with hooks on the output projection and the final norm."""

import numpy as np
import pytest
import torch

from attnexplorer.models import load_model
from attnexplorer.models import forward as forward_module
from attnexplorer.models import loading
from attnexplorer.models.head_attribution import ablation_sweep, direct_logit_attribution, pick
from attnexplorer.models.head_scores import HeadScores, make_probe, parse_scores
from attnexplorer.models.interventions import Behaviour
from attnexplorer.models.sources import ModelError

TEXT = "the dog fetched the ball and the dog was happy and the ball was the dog"
ALL = "previous-token,first-token,self,window:3,duplicate-token,induction"


def _reference(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32).eval()


def _attentions(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)]), output_attentions=True)
    return np.stack([a[0].double().numpy() for a in out.attentions])   # layers × H × n × n


# ---- TransformerLens's detection patterns, as its head_detector.py writes them --------------

def _duplicate(tokens):
    t = np.asarray(tokens)
    eq = (t[None, :] == t[:, None]).astype(float)
    np.fill_diagonal(eq, 0)
    return np.tril(eq)


def _induction(tokens):
    dup = _duplicate(tokens)
    shifted = np.roll(dup, 1, axis=1)
    shifted[:, 0] = 0
    return np.tril(shifted)


def _pattern(kind, tokens):
    n = len(tokens)
    if kind == "previous-token":
        return np.eye(n, k=-1)
    if kind == "first-token":
        d = np.zeros((n, n))
        d[:, 0] = 1
        return d
    if kind == "self":
        return np.eye(n)
    if kind == "window:3":
        return np.tril(np.ones((n, n))) - np.tril(np.ones((n, n)), k=-3)
    if kind == "duplicate-token":
        return _duplicate(tokens)
    return _induction(tokens)


def _detect(attention, detection):
    """TransformerLens's ``compute_head_attention_similarity_score``, error_measure "mul"."""
    return (attention * detection).sum() / attention.sum()


@pytest.fixture(scope="module", params=["tiny_gpt2_lm", "tiny_llama_lm"])
def decoder(request):
    folder = request.getfixturevalue(request.param)
    return load_model(str(folder)), _reference(folder)


def _scores(loaded, ids, spec=ALL, probe=None):
    scorer = HeadScores(parse_scores(spec), ids, loaded.num_layers, loaded.num_heads, probe)
    run = loaded.run_ids(list(ids), [loaded.tokenizer.piece(i) for i in ids], "t", observe=scorer)
    return scorer.result(), run


def test_scores_equal_transformerlens_detector_formulas(decoder):
    loaded, reference = decoder
    ids = loaded.tokenize(TEXT)[0]
    assert len(set(ids)) < len(ids)   # repeated words: duplicate and induction have targets
    ours, _run = _scores(loaded, ids)
    attentions = _attentions(reference, ids)
    for name in ALL.split(","):
        theirs = np.array([[_detect(a, _pattern(name, ids)) for a in layer] for layer in attentions])
        assert ours[name].shape == (loaded.num_layers, loaded.num_heads)
        assert np.abs(ours[name] - theirs).max() < 1e-6, name
        assert theirs.max() > 0.01, name   # the score saw real weight


def test_the_long_path_scores_block_by_block_the_same(decoder, monkeypatch):
    loaded, _reference_model = decoder
    ids = loaded.tokenize(TEXT)[0]
    target = np.random.default_rng(0).random((len(ids), len(ids)))
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        np.save(f"{folder}/t.npy", target)
        spec = ALL + f",pattern:{folder}/t.npy"
        dense, run = _scores(loaded, ids, spec)
        assert not run.long
        monkeypatch.setattr(loading, "DENSE_RUN_BYTES", 0)
        monkeypatch.setattr(forward_module, "BLOCK_BYTES", loaded.num_heads * len(ids) * 4 * 3)   # 3 rows a block
        seen = []
        scorer = HeadScores(parse_scores(spec), ids, loaded.num_layers, loaded.num_heads)
        long_run = loaded.run_ids(ids, [loaded.tokenizer.piece(i) for i in ids], "t",
                                  observe=lambda layer, first, w: (seen.append((layer, first, w.shape)),
                                                                   scorer(layer, first, w)))
    assert long_run.long
    assert len({first for _l, first, _s in seen}) > 2   # several blocks of rows per layer
    assert all(shape[1] < len(ids) for _l, _f, shape in seen)
    for name, values in scorer.result().items():
        assert np.abs(values - dense[name]).max() < 1e-6, name


@pytest.mark.parametrize("seed", range(4))
def test_block_scores_read_only_the_targets_and_equal_the_full_product(seed):
    """The scorer reads stripes and gathered pairs of each block of rows (no block-sized product):
    on random causal weights, random tokens from a small vocabulary (many copies) and blocks of
    random sizes, every score equals TransformerLens's formula on the whole n × n."""
    rng = np.random.default_rng(seed)
    n, heads = int(rng.integers(5, 40)), 3
    ids = rng.integers(0, 4, n).tolist()
    weights = np.tril(rng.random((heads, n, n)))
    weights /= weights.sum(-1, keepdims=True)
    scorer = HeadScores(parse_scores(ALL), ids, 1, heads)
    first = 0
    while first < n:
        rows = int(rng.integers(1, 6))
        keys = min(n, first + rows) if seed % 2 else n   # a causal block may stop at its last row
        scorer(0, first, torch.from_numpy(weights[:, first:first + rows, :keys]).float())
        first += rows
    for name in ALL.split(","):
        theirs = np.array([_detect(a, _pattern(name, ids)) for a in weights])
        assert np.abs(scorer.result()[name][0] - theirs).max() < 1e-6, name


def test_pattern_is_one_minus_the_mean_total_variation(decoder, tmp_path):
    loaded, reference = decoder
    ids = loaded.tokenize(TEXT)[0]
    n = len(ids)
    target = np.tril(np.random.default_rng(1).random((n, n)))
    target /= target.sum(1, keepdims=True)
    np.save(tmp_path / "t.npy", target)
    ours, _ = _scores(loaded, ids, f"pattern:{tmp_path / 't.npy'}")
    attentions = _attentions(reference, ids)
    theirs = 1 - 0.5 * np.abs(attentions - target).sum(-1).mean(-1)
    assert np.abs(ours["pattern:t.npy"] - theirs).max() < 1e-6
    with pytest.raises(ModelError, match="the target is 3 × 3"):
        np.save(tmp_path / "small.npy", np.eye(3))
        HeadScores(parse_scores(f"pattern:{tmp_path / 'small.npy'}"), ids, 1, 1)


def test_the_induction_probe_and_its_score(decoder):
    loaded, reference = decoder
    probe = make_probe(loaded, "repeated:7:3")
    ids = list(probe.ids)
    start, size = probe.start, 7
    drawn = ids[start:start + size]
    assert ids[start + size:start + 2 * size] == drawn
    assert not set(drawn) & loaded.tokenizer.special_ids()
    assert make_probe(loaded, "repeated:7:3") == probe and make_probe(loaded, "repeated:7:4") != probe
    ours, _ = _scores(loaded, ids, "induction", probe)
    attentions = _attentions(reference, ids)
    # TransformerLens's induction score: the stripe offset 1 − N, over the repeat's query rows
    assert start + 2 * size == len(ids)   # no suffix on a decoder
    theirs = np.diagonal(attentions, offset=1 - size, axis1=-2, axis2=-1)[..., -size:].mean(-1)
    assert np.abs(ours["induction"] - theirs).max() < 1e-6


def test_bad_scores_and_probes_are_refused(tmp_path):
    from attnexplorer.models.head_scores import parse_probe

    for spec, words in [("induktion", "unknown score"), ("window:0", "window:W"), ("window", "window:W"),
                        ("self,self", "twice"), ("pattern:", "pattern:FILE.npy"),
                        (f"pattern:{tmp_path}/none.npy", "no file")]:
        with pytest.raises(ModelError, match=words):
            parse_scores(spec)
    np.save(tmp_path / "flat.npy", np.ones(4))
    with pytest.raises(ModelError, match="square"):
        parse_scores(f"pattern:{tmp_path}/flat.npy")
    for probe in ["repeated", "repeated:0", "repeated:x", "random:5", "repeated:5:x"]:
        with pytest.raises(ModelError, match="repeated:N"):
            parse_probe(probe)


# ---- attribution ------------------------------------------------------------------------------

def _modules(reference, kind, layer):
    if kind == "gpt2":
        return reference.transformer.h[layer].attn.c_proj, reference.transformer.ln_f
    return reference.model.layers[layer].self_attn.o_proj, reference.model.norm


def test_direct_logit_attribution_equals_hooks_on_transformers(decoder):
    loaded, reference = decoder
    kind = loaded.family.name
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    picked = pick(behaviour, " ball", " dog")
    ours, rest, logit = direct_logit_attribution(behaviour, picked)
    ids, P, H, size = behaviour.run.ids, picked.position, loaded.num_heads, loaded.head_dim
    grabbed = {}
    handles = []
    for layer in range(loaded.num_layers):
        projection, norm = _modules(reference, kind, layer)
        handles.append(projection.register_forward_pre_hook(
            lambda _m, args, layer=layer: grabbed.__setitem__(layer, args[0][0, P].double().clone())))
    handles.append(norm.register_forward_pre_hook(lambda _m, args: grabbed.__setitem__("final", args[0][0, P].double())))
    try:
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor([list(ids)])).logits[0, P].double()
    finally:
        for h in handles:
            h.remove()
    x = grabbed["final"]
    if kind == "gpt2":
        ln = reference.transformer.ln_f
        sigma = torch.sqrt(x.var(unbiased=False) + ln.eps)
        normed = lambda c: (c - c.mean()) / sigma * ln.weight.detach().double()
        unembed = reference.lm_head.weight.detach().double()
    else:
        rms = reference.model.norm
        scale = torch.sqrt((x * x).mean() + rms.variance_epsilon)
        normed = lambda c: c / scale * rms.weight.detach().double()
        unembed = reference.lm_head.weight.detach().double()
    direction = unembed[picked.target] - unembed[picked.versus]
    theirs = np.zeros((loaded.num_layers, H))
    for layer in range(loaded.num_layers):
        projection, _ = _modules(reference, kind, layer)
        w = projection.weight.detach().double()
        for head in range(H):
            cols = slice(head * size, (head + 1) * size)
            piece = grabbed[layer][cols] @ (w[cols] if kind == "gpt2" else w[:, cols].T)
            theirs[layer, head] = float(normed(piece) @ direction)
    assert np.abs(ours - theirs).max() < 1e-4 and np.abs(theirs).max() > 0.01
    true = float(logits[picked.target] - logits[picked.versus])
    assert abs(logit - true) < 1e-4
    assert abs(ours.sum() + rest - true) < 1e-4   # heads + rest = the model's logit difference


def test_the_ablation_sweep_equals_hooks_zeroing_each_head(decoder):
    loaded, reference = decoder
    kind = loaded.family.name
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    picked = pick(behaviour, " ball")
    progress = []
    effects, base = ablation_sweep(behaviour, picked, "zero", progress=lambda done, total: progress.append((done, total)))
    total = loaded.num_layers * loaded.num_heads
    assert progress[-1] == (total, total) and len(progress) == total
    ids, P, size = behaviour.run.ids, picked.position, loaded.head_dim
    for layer in range(loaded.num_layers):
        for head in range(loaded.num_heads):
            cols = slice(head * size, (head + 1) * size)

            def hook(_m, args):
                x = args[0].clone()
                x[0, :, cols] = 0.0
                return (x,)

            handle = _modules(reference, kind, layer)[0].register_forward_pre_hook(hook)
            try:
                with torch.no_grad():
                    logit = float(reference(input_ids=torch.tensor([list(ids)])).logits[0, P, picked.target])
            finally:
                handle.remove()
            assert abs(effects[layer, head] - (logit - base)) < 1e-4
    assert np.abs(effects).max() > 1e-3


def test_the_sweep_stops_when_cancelled(decoder):
    from attnexplorer.core.errors import Cancelled

    loaded, _ = decoder
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    done = []
    with pytest.raises(Cancelled):
        ablation_sweep(behaviour, pick(behaviour, " ball"), "mean", progress=lambda d, t: done.append(d),
                       cancelled=lambda: len(done) >= 2)
    assert len(done) == 2


def test_attribution_refuses_what_it_cannot_do(tiny_bert_mlm, decoder):
    loaded, _ = decoder
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    with pytest.raises(ModelError, match="not one"):
        pick(behaviour, " dogball")
    with pytest.raises(ModelError, match="out of range"):
        pick(behaviour, " ball", position=999)
    bert = load_model(str(tiny_bert_mlm))
    masked = Behaviour(bert, bert.run("the dog fetched the [MASK]"))
    with pytest.raises(ModelError, match="pre-norm decoder"):
        direct_logit_attribution(masked, pick(masked, "ball"))


PATCH = "the ball fetched the dog and the ball was happy and the dog was the ball"


def test_the_patch_sweep_equals_hooks_patching_each_head_from_the_second_text(decoder):
    loaded, reference = decoder
    kind = loaded.family.name
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    picked = pick(behaviour, " ball", " dog")
    effects, base = ablation_sweep(behaviour, picked, "patch", patch_text=PATCH)
    other = loaded.tokenize(PATCH)[0]
    assert len(other) == len(behaviour.run.ids) and other != list(behaviour.run.ids)
    ids, P, size = behaviour.run.ids, picked.position, loaded.head_dim
    grabbed = {}   # each layer's concatenated heads on the second text, from transformers itself
    handles = [_modules(reference, kind, layer)[0].register_forward_pre_hook(
        lambda _m, args, layer=layer: grabbed.__setitem__(layer, args[0].clone())) for layer in range(loaded.num_layers)]
    try:
        with torch.no_grad():
            reference(input_ids=torch.tensor([other]))
    finally:
        for h in handles:
            h.remove()
    for layer in range(loaded.num_layers):
        for head in range(loaded.num_heads):
            cols = slice(head * size, (head + 1) * size)

            def hook(_m, args):
                x = args[0].clone()
                x[0, :, cols] = grabbed[layer][0, :, cols]
                return (x,)

            handle = _modules(reference, kind, layer)[0].register_forward_pre_hook(hook)
            try:
                with torch.no_grad():
                    logits = reference(input_ids=torch.tensor([list(ids)])).logits[0, P]
            finally:
                handle.remove()
            assert abs(effects[layer, head] - (float(logits[picked.target] - logits[picked.versus]) - base)) < 1e-4
    assert np.abs(effects).max() > 1e-3


def test_the_patch_sweep_refuses_a_text_of_another_length_before_any_head(decoder):
    loaded, _ = decoder
    behaviour = Behaviour(loaded, loaded.run(TEXT))
    done = []
    with pytest.raises(ModelError, match="same token length"):
        ablation_sweep(behaviour, pick(behaviour, " ball"), "patch", progress=lambda d, t: done.append(d),
                       patch_text="the dog")
    assert done == []
    with pytest.raises(ModelError, match="second text"):
        ablation_sweep(behaviour, pick(behaviour, " ball"), "patch")
    with pytest.raises(ModelError, match="ablate:patch"):
        ablation_sweep(behaviour, pick(behaviour, " ball"), "zero", patch_text=PATCH)


def test_the_sweeps_picked_logit_is_the_models_logit(tiny_bert_mlm, decoder):
    """The sweep reads only the picked unembedding rows: the same logit (difference) as the whole
    vocabulary's, for a decoder and for BERT's masked-LM transform."""
    from attnexplorer.models.head_attribution import picked_logit

    loaded, _ = decoder
    bert = load_model(str(tiny_bert_mlm))
    for behaviour, target, versus in ((Behaviour(loaded, loaded.run(TEXT)), " ball", " dog"),
                                      (Behaviour(bert, bert.run("the dog fetched the [MASK]")), "ball", "dog")):
        picked = pick(behaviour, target, versus)
        row = torch.from_numpy(behaviour.run.final[picked.position])
        full = behaviour.logits(row[None])[0].double()
        assert abs(picked_logit(behaviour, picked)(row) - picked.logit(full)) < 1e-5


def test_a_window_wider_than_the_text_reads_each_key_once(monkeypatch):
    """``window:W`` with W past the text's length is the whole causal row (every key up to the
    query); it used to walk W stripes, so ``--scores window:99999999999`` never finished."""
    from attnexplorer.models import head_scores

    rng = np.random.default_rng(1)
    n, heads = 9, 2
    weights = np.tril(rng.random((heads, n, n)))
    weights /= weights.sum(-1, keepdims=True)
    stripes = []
    real = head_scores._stripe

    def counted(*args):
        stripes.append(args[2])
        assert len(stripes) <= n * 3, "more stripes than the blocks' keys"
        return real(*args)

    monkeypatch.setattr(head_scores, "_stripe", counted)
    scorer = HeadScores(parse_scores("window:99999999999"), list(range(n)), 1, heads)
    for first in range(0, n, 4):
        scorer(0, first, torch.from_numpy(weights[:, first:first + 4]).float())
    assert np.abs(scorer.result()["window:99999999999"][0] - 1.0).max() < 1e-6   # the whole causal row
