"""JSON written in pieces (io/json_pieces.py): the very values json.dumps writes, every float
exactly, so a recovery file written that way reads back as the same session."""

from __future__ import annotations

import io
import json
import re

import numpy as np
from hypothesis import given, settings
from strategies import sessions, stage_sessions

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.io.json_pieces import write_json
from attnexplorer.io.recovery import read_recovery, write_recovery
from attnexplorer.io.session_file import session_to_dict


def _pieces(value, piece_numbers=7) -> str:
    out = io.BytesIO()
    write_json(out, value, piece_numbers)
    return out.getvalue().decode("utf-8")


def _same_json(text: str, expected: str) -> None:
    """The same values (floats to the last bit: ``==`` on parsed floats) and the same layout
    but for how a number is spelt (``1e-05`` or ``0.00001``)."""
    assert json.loads(text) == json.loads(expected)
    number = re.compile(r"-?[0-9][0-9.eE+-]*")
    assert number.sub("#", text) == number.sub("#", expected)


@settings(max_examples=40, deadline=None)
@given(stage_sessions(max_n=9, max_d=5))
def test_a_session_written_in_pieces_reads_as_json_dumps_writes_it(session):
    # Small pieces (7 numbers) cross row and piece edges in every array.
    _same_json(_pieces(session_to_dict(session, arrays=True)), json.dumps(session_to_dict(session)))


@settings(max_examples=20, deadline=None)
@given(sessions(max_n=6))
def test_a_custom_mask_and_extras_are_written_alike(session):
    session = session.replace(mask=Mask("custom", blocked=np.eye(session.n, dtype=bool)))
    _same_json(_pieces(session_to_dict(session, arrays=True)), json.dumps(session_to_dict(session)))


def test_arrays_of_every_shape_and_a_long_flat_list():
    value = {"empty": np.zeros((0, 3)), "scalar": np.float64(0.1), "vector": np.arange(20) / 3,
             "rows": np.arange(30.0).reshape(3, 10), "ints": np.arange(9, dtype=np.uint8).reshape(3, 3),
             "tokens": [f"t{i}" for i in range(25)], "nested": [[np.ones(2)], {"a": None}]}
    assert json.loads(_pieces(value, 4)) == json.loads(json.dumps(value, default=lambda a: a.tolist()))


def test_a_recovery_file_of_a_long_session_reads_back_exactly(tmp_path):
    session = build_preset("random", {"n": 2048, "d": 64, "d_k": 16, "d_v": 16, "heads": 2}).session
    file = tmp_path / "recovery-abc.json"
    write_recovery(file, session, None)
    back = read_recovery(file).session
    assert back == session
    np.testing.assert_array_equal(back.embeddings, session.embeddings)
