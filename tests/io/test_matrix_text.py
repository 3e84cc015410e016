"""Pasted text to matrices and back."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from attnexplorer.core.errors import AttnExplorerError
from attnexplorer.io.matrix_text import format_tsv, parse_matrix_text

EXPECTED = np.array([[1.0, 2.5], [-3.0, 4e-3]])


@pytest.mark.parametrize("text", [
    "1\t2.5\n-3\t0.004\n",
    "1, 2.5\n-3, 4e-3",
    "1 2.5\n  -3   0.004  ",
    "[[ 1.   2.5  ]\n [-3.   0.004]]",
    "array([[ 1.   ,  2.5  ],\n       [-3.   ,  0.004]], dtype=float32)",
    "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  0.0040]])",
    "Parameter containing:\ntensor([[ 1.0000,  2.5000],\n        [-3.0000,  0.0040]], requires_grad=True)",
    "\tx\ty\nthe\t1\t2.5\ndog\t-3\t0.004",
    "x,y\n1,2.5\n-3,0.004",
    "1\t5/2\n-3\t4e-3",
])
def test_reads_every_common_form(text):
    assert np.allclose(parse_matrix_text(text), EXPECTED, rtol=0, atol=1e-12)


def test_a_single_row_is_one_by_n():
    assert parse_matrix_text("[1, 2, 3]").shape == (1, 3)
    assert parse_matrix_text("1 2 3").shape == (1, 3)
    assert parse_matrix_text("7").shape == (1, 1)


@pytest.mark.parametrize("text, match", [
    ("", "empty"),
    ("1 2\n3", "row 2 has 1 value but row 1 has 2"),
    ("1 2\n3 nan", "row 2, column 2.*not a finite"),
    ("1 2\n3 x", "row 2, column 2"),
    ("[[1, 2], [3, 4]", "brackets do not match"),
    ("[[[1, 2]], [[3, 4]]]", "3-dimensional"),
    ("[[1, 2, ..., 9]]", "abbreviated"),
    ("1\t1e999", "not a finite"),
])
def test_refuses_with_a_clear_message(text, match):
    with pytest.raises(AttnExplorerError, match=match):
        parse_matrix_text(text)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 5)),
              elements=st.floats(allow_nan=False, allow_infinity=False, width=64)))
def test_tsv_round_trips_exactly(a):
    assert np.array_equal(parse_matrix_text(format_tsv(a)), a)


def test_tsv_shape():
    assert format_tsv(np.array([[1.0, 0.5], [2.0, -1.0]])) == "1\t0.5\n2\t-1"
    with pytest.raises(AttnExplorerError, match="1-D or 2-D"):
        format_tsv(np.zeros((1, 1, 1)))
