"""Memory and time stay bounded (issue 11, item 11): streamed JSON, a cheap check of large
extra data, no preset built just to compare tokens, and a memory estimate before computing."""

import json
import tracemalloc

import numpy as np
import pytest

from attnexplorer.cli import main
from attnexplorer.core.compute import memory
from attnexplorer.core.compute.engine import compute
from attnexplorer.core.errors import AttnExplorerError, EngineError
from attnexplorer.core.inputs.presets import build_preset, reference_curves
from attnexplorer.core.inputs.session import PresetRef, Session
from attnexplorer.io.matrices import write_json_bundle
from attnexplorer.io.session_file import save_session, session_from_dict, session_to_dict


def peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_json_bundle_is_streamed_row_by_row(tmp_path):
    # 4 MB of numbers: a piece of the text (16,384 numbers, with its copies about 1 MB at
    # most) is then well under the array, whatever the pieces' constant overhead.
    a = np.random.default_rng(0).normal(size=(4, 512, 512)).astype(np.float32)
    path = tmp_path / "a.json"
    peak = peak_bytes(lambda: write_json_bundle(path, {"weights": a, "tokens": np.array(["x"] * 512)}))
    # Whole, the text is ~20 bytes a number and the list of floats ~32: over 40 MB here.
    assert peak < a.nbytes / 2, f"peak {peak / 1e6:.1f} MB"
    assert np.array_equal(np.array(json.loads(path.read_text())["weights"], dtype=np.float32), a)


def test_long_flat_extra_list_is_checked_without_a_path_per_element():
    obj = session_to_dict(Session(tokens=("a",), embeddings=[[1.0]], w_query=[[[1.0]]], w_key=[[[1.0]]],
                                  w_value=[[[1.0]]]))
    obj["data"] = list(range(200_000)) + [0.5, "ü", None, True]
    peak = peak_bytes(lambda: session_from_dict(obj, "f.json"))
    assert peak < 1e6, f"peak {peak / 1e6:.1f} MB"  # one path string per element: ~20 MB
    obj["data"][-3] = "\ud800"
    with pytest.raises(AttnExplorerError, match=r"f.json: data\[200001\] holds an unpaired surrogate"):
        session_from_dict(obj, "f.json")


def test_reference_curves_never_build_the_preset(monkeypatch):
    # A 258-byte file naming the random preset at its largest made the window build it (GBs).
    huge = {"n": 8192, "d": 1024, "d_k": 1024, "d_v": 1024, "heads": 64}
    s = Session(tokens=("a", "b"), embeddings=np.zeros((2, 1)), w_query=np.ones((1, 1, 1)),
                w_key=np.ones((1, 1, 1)), w_value=np.ones((1, 1, 1)), preset=PresetRef("random", huge))
    import attnexplorer.core.inputs.presets.random_start as random_start

    def refuse(params):
        raise AssertionError("the random preset was built")

    real = random_start.PRESET.build
    object.__setattr__(random_start.PRESET, "build", refuse)  # a frozen dataclass
    try:
        assert dict(reference_curves(s)) == {}
    finally:
        object.__setattr__(random_start.PRESET, "build", real)


def test_a_session_that_cannot_fit_is_refused_before_computing():
    s = Session(tokens=tuple(f"t{i}" for i in range(8192)), embeddings=np.zeros((8192, 1)),
                w_query=np.zeros((64, 1, 1)), w_key=np.zeros((64, 1, 1)), w_value=np.zeros((64, 1, 1)))
    with pytest.raises(EngineError, match=r"needs about \d+\.\d GB .* more than the limit of \d+\.\d GB"):
        compute(s)


def test_the_limit_applies_to_the_cli_too(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(memory, "memory_limit", lambda: 10_000_000)
    built = build_preset("sine", {"N": 1024})
    save_session(built.session, tmp_path / "s.json")
    out = tmp_path / "out"
    assert main(["export", "--session", str(tmp_path / "s.json"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    # One line naming the limit, from whichever check meets the size first: the export's own
    # estimate ("… need about") or the compute's ("this session needs about …"); which one that
    # is depended on what the test process had imported before.
    assert err.count("\n") == 1 and " about " in err and "limit of 10 MB" in err
    assert not out.exists()
    assert compute(build_preset("sine", {"N": 64}).session) is not None  # small ones still fit


def test_the_estimate_is_an_upper_bound_of_the_big_buffers():
    # 4,096 tokens × 4 heads: four float32 n×n buffers per head, about 1.1 GB (README).
    need = memory.compute_bytes(4, 4096, 64, 64, 64, "float32")
    assert 4 * 4096**2 * 4 * 3 < need < 1.3e9
    assert memory.compute_bytes(4, 4096, 64, 64, 64, "bfloat16") > memory.compute_bytes(4, 4096, 64, 64, 64, "float16") - 1
