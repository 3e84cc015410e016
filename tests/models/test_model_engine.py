"""The imported sessions through attnexplorer's own path: the file loader (version 2) and the
engine's ``compute()`` reproduce the model, layer by layer, head by head."""

import json

import numpy as np
import pytest

from attnexplorer.core.compute.engine import compute
from attnexplorer.io.session_file import loads_session
from attnexplorer.models import load_model

TEXT = "The dog fetched the ball and she was happy"


def _engine_matches(loaded, layers=None):
    run = loaded.run(TEXT)
    for layer in layers if layers is not None else range(loaded.num_layers):
        session = loads_session(json.dumps(loaded.layer_session(run, layer)), f"layer {layer}")
        result = compute(session)
        assert np.abs(result.weights - run.attentions[layer]).max() < 1e-5, layer
        assert np.abs(result.output - run.attention_outputs[layer]).max() < 1e-4, layer


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_gpt2", "tiny_llama"])
def test_engine_reproduces_tiny_models(name, request):
    _engine_matches(load_model(str(request.getfixturevalue(name))))


@pytest.mark.slow
def test_engine_reproduces_minilm(minilm):
    _engine_matches(minilm)


@pytest.mark.slow
def test_engine_reproduces_smollm2(smollm2):
    _engine_matches(smollm2)
