"""Matrix writers and readers: labels survive, numbers are exact, bad files are named."""

import csv
import io
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays
from strategies import small_session

from attnexplorer.core.compute.engine import compute
from attnexplorer.core.inputs.session import Mask
from attnexplorer.io import matrices as mx
from attnexplorer.io.matrices import (
    MatrixError, check_shape, csv_label, labelled_matrices, matrix_to_csv, matrix_to_json, matrix_to_latex, matrix_to_markdown,
    read_matrix, result_arrays, write_csv_bundle, write_json_bundle, write_npy, write_npz, write_table_bundle,
)

TRICKY = ["a,b", '"q"', "x\ny", "x\ry", "=SUM(A1)", "ü→", "", " pad ", "nan", "Inf", "1", "-2.5"]
finite = st.floats(-1e9, 1e9, allow_nan=False, width=64)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 5)), elements=finite), st.data())
def test_csv_round_trip_with_labels_is_exact(tmp_path_factory, a, data):
    rows = data.draw(st.lists(st.sampled_from(TRICKY) | st.text(max_size=5), min_size=a.shape[0], max_size=a.shape[0]))
    cols = data.draw(st.lists(st.sampled_from(TRICKY) | st.text(max_size=5), min_size=a.shape[1], max_size=a.shape[1]))
    text = matrix_to_csv(a, rows, cols)
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    # A spreadsheet sees the tokens as the header and the first column, as text (csv_label).
    assert parsed[0] == [""] + [csv_label(c) for c in cols]
    assert [r[0] for r in parsed[1:]] == [csv_label(r) for r in rows]
    path = tmp_path_factory.mktemp("csv") / "m.csv"
    path.write_bytes(text.encode("utf-8"))
    assert read_matrix(path).tobytes() == a.tobytes()


def test_csv_without_labels_and_with_header_only(tmp_path):
    a = np.array([[1.5, -2.0], [0.1, 3e-9]])
    p = tmp_path / "plain.csv"
    p.write_text(matrix_to_csv(a))
    assert matrix_to_csv(a) == "1.5,-2.0\r\n0.1,3e-09\r\n"
    assert np.array_equal(read_matrix(p), a)
    p.write_text(matrix_to_csv(a, col_labels=["d0", "d1"]))
    assert p.read_text().splitlines()[0] == "d0,d1"
    assert np.array_equal(read_matrix(p), a)
    p.write_text(matrix_to_csv(a, row_labels=["dog", "cat"]))
    assert np.array_equal(read_matrix(p), a)
    # Numeric-looking tokens as labels still read back, thanks to the empty corner cell.
    p.write_text(matrix_to_csv(a, row_labels=["1", "2"], col_labels=["3", "4"]))
    assert np.array_equal(read_matrix(p), a)


def test_bool_matrices_are_ones_and_zeros():
    m = np.array([[False, True], [False, False]])
    assert matrix_to_csv(m, ["a", "b"], ["a", "b"]) == ",a,b\r\na,0,1\r\nb,0,0\r\n"
    assert json.loads(matrix_to_json(m))["values"] == [[0, 1], [0, 0]]


def test_latex_escapes_tokens_and_rounds_numbers():
    a = np.array([[0.123456, -1.0], [2.0, -0.00001]])
    tex = matrix_to_latex(a, ["a_b", "50%"], ["$x", "{&}"], digits=3)
    assert tex.splitlines() == [
        r"\begin{tabular}{l|rr}",
        r"   & \$x & \{\&\} \\",
        r"  \hline",
        r"  a\_b & $0.123$ & $-1.000$ \\",
        r"  50\% & $2.000$ & $0.000$ \\",
        r"\end{tabular}",
    ]
    assert mx.latex_escape("\\~^#<>|") == r"\textbackslash{}\textasciitilde{}\textasciicircum{}\#\textless{}\textgreater{}\textbar{}"


def test_latex_without_labels_is_a_bmatrix():
    assert matrix_to_latex(np.array([[1.0, -2.0], [3.0, 4.5]]), digits=1) == (
        "\\begin{bmatrix}\n  1.0 & -2.0 \\\\\n  3.0 & 4.5\n\\end{bmatrix}\n")


def test_markdown_table_keeps_its_columns_whatever_the_tokens():
    a = np.arange(6, dtype=float).reshape(2, 3) / 7
    md = matrix_to_markdown(a, ["a|b", "*x*"], ["|", "`c`", "new\nline"])
    lines = md.splitlines()
    assert len(lines) == 4
    for line in lines:
        # Unescaped pipes: the outer two plus one between each of 4 cells.
        assert len(re.findall(r"(?<!\\)\|", line)) == 5
    assert lines[1] == "| :--- | ---: | ---: | ---: |"
    assert lines[2] == r"| a\|b | 0.0000 | 0.1429 | 0.2857 |"
    assert r"\*x\*" in lines[3] and r"\`c\`" in lines[0] and "new line" in lines[0]


def test_json_matrix_round_trip():
    a = np.array([[0.1, 1 / 3]])
    obj = json.loads(matrix_to_json(a, ["tok"], ["k0", "k1"]))
    assert obj == {"rows": ["tok"], "columns": ["k0", "k1"], "values": [[0.1, 1 / 3]]}


def test_label_count_must_match():
    with pytest.raises(MatrixError, match="3 column labels for 2 columns"):
        matrix_to_csv(np.zeros((2, 2)), None, ["a", "b", "c"])


# -- the result as arrays and bundles ------------------------------------------------------

@pytest.mark.parametrize("w_out", [False, True])
def test_result_arrays_names_and_shapes(w_out):
    s = small_session(mask=Mask("causal"), w_out=w_out)
    r = compute(s, dtype="float64")
    arrays = result_arrays(r)
    H, n, d, dk, dv = s.heads, s.n, s.d, s.d_k, s.d_v
    expected = {"tokens": (n,), "E": (n, d), "X": (n, d), "kv_head_of": (H,), "W_q": (H, d, dk), "W_k": (H, d, dk), "W_v": (H, d, dv),
                "Q": (H, n, dk), "K": (H, n, dk), "V": (H, n, dv), "scores": (H, n, n), "scaled_scores": (H, n, n),
                "mask": (n, n), "weights": (H, n, n), "head_outputs": (H, n, dv), "concat": (n, H * dv),
                "output": (n, 5 if w_out else H * dv), "blocked_rows": (n,)}
    if w_out:
        expected["W_o"] = (H * dv, 5)
    assert {k: v.shape for k, v in arrays.items()} == expected
    assert arrays["mask"].dtype == bool and arrays["mask"][0, 1] and not arrays["mask"][1, 0]
    assert list(arrays["tokens"]) == list(s.tokens)
    assert np.array_equal(arrays["weights"], r.weights)


def test_npz_npy_and_json_bundles_read_back_without_pickle(tmp_path):
    s = small_session(w_out=True)
    r = compute(s, dtype="float64")
    arrays = result_arrays(r)
    write_npz(tmp_path / "attention.npz", arrays)
    with np.load(tmp_path / "attention.npz", allow_pickle=False) as z:
        assert sorted(z.files) == sorted(arrays)
        for k in arrays:
            assert np.array_equal(z[k], arrays[k])
    write_npy(tmp_path / "weights.npy", arrays["weights"])
    assert np.array_equal(np.load(tmp_path / "weights.npy", allow_pickle=False), r.weights)
    write_json_bundle(tmp_path / "attention.json", arrays)
    obj = json.loads((tmp_path / "attention.json").read_text())
    assert list(obj) == list(arrays)
    assert obj["tokens"] == list(s.tokens)
    assert np.array_equal(np.array(obj["output"]), r.output)


def test_object_arrays_are_refused(tmp_path):
    with pytest.raises(MatrixError, match="bad holds Python objects"):
        write_npz(tmp_path / "x.npz", {"bad": np.array([{"a": 1}], dtype=object)})
    assert not (tmp_path / "x.npz").exists()


def test_csv_bundle_names_and_axis_labels(tmp_path):
    s = small_session(w_out=True)
    r = compute(s, dtype="float64")
    paths = write_csv_bundle(tmp_path, r)
    names = {p.name for p in paths}
    for h in range(s.heads):
        for stem in ("W_q", "W_k", "W_v", "Q", "K", "V", "scores", "scaled_scores", "weights", "head_outputs"):
            assert f"{stem}_head{h}.csv" in names
    assert {"E.csv", "X.csv", "W_o.csv", "kv_head_of.csv", "mask.csv", "concat.csv", "output.csv",
            "blocked_rows.csv"} <= names
    assert len(names) == len(paths) == 10 * s.heads + 8

    def header_and_rows(name):
        with open(tmp_path / name, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
        return rows[0][1:], [r[0] for r in rows[1:]]

    tokens = list(s.tokens)
    assert header_and_rows("weights_head1.csv") == (tokens, tokens)
    assert header_and_rows("Q_head1.csv") == (["q0", "q1", "q2"], tokens)
    assert header_and_rows("V_head0.csv") == (["v0", "v1"], tokens)
    assert header_and_rows("X.csv") == (["d0", "d1", "d2", "d3"], tokens)
    assert header_and_rows("W_q_head0.csv") == (["q0", "q1", "q2"], ["d0", "d1", "d2", "d3"])
    assert header_and_rows("K_head1.csv")[0] == ["k0", "k1", "k2"]
    assert header_and_rows("concat.csv") == (["h0.v0", "h0.v1", "h1.v0", "h1.v1"], tokens)
    assert header_and_rows("W_o.csv") == (["o0", "o1", "o2", "o3", "o4"], ["h0.v0", "h0.v1", "h1.v0", "h1.v1"])
    assert header_and_rows("output.csv") == (["o0", "o1", "o2", "o3", "o4"], tokens)
    assert np.array_equal(read_matrix(tmp_path / "weights_head1.csv"), r.weights[1])
    assert np.array_equal(read_matrix(tmp_path / "output.csv"), r.output)


@pytest.mark.parametrize("fmt", ["tex", "md", "json"])
def test_other_table_bundles(tmp_path, fmt):
    s = small_session()
    r = compute(s)
    paths = write_table_bundle(tmp_path / fmt, r, fmt)
    assert {p.name for p in paths} == {f"{m.name}.{fmt}" for m in labelled_matrices(r)}
    assert all(p.read_text(encoding="utf-8").strip() for p in paths)
    with pytest.raises(MatrixError, match="unknown matrix format 'xls'"):
        write_table_bundle(tmp_path, r, "xls")


# -- reading matrices ---------------------------------------------------------------------

def test_read_npy(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "a.npy", a)
    got = read_matrix(tmp_path / "a.npy")
    assert got.dtype == np.float64 and np.array_equal(got, a)
    np.save(tmp_path / "v.npy", np.array([1, 2, 3]))
    assert read_matrix(tmp_path / "v.npy").shape == (1, 3)


@pytest.mark.parametrize("name, content, message", [
    ("r.csv", "1,2,3\n4,5\n", "r.csv: row 2 has 2 numbers, expected 3 (like row 1)"),
    ("w.csv", ",a,b\na,1,zz\n", "w.csv: row 2, column 3: 'zz' is not a number"),
    ("n.csv", "1,nan\n2,3\n", "n.csv: the number at row 1, column 2 is nan; every number must be finite"),
    ("e.csv", "\n\n", "e.csv: holds no numbers"),
    ("h.csv", "a,b\n", "h.csv: has a header row but no numbers"),
    ("x.xlsx", "1", "x.xlsx: cannot read .xlsx; use .csv, .npy, .tsv or .txt"),
    ("t.tsv", "1\tbanana\n", "t.tsv: "),
    # UTF-16 without a byte-order mark is valid UTF-8 full of NULs (a csv error on Python 3.10)
    ("u.csv", "1,2\n3,4\n".encode("utf-16-le").decode("utf-8"), "u.csv: line 1 holds a NUL character; "
     "a CSV file must be UTF-8 text (is this one UTF-16 or binary?)"),
    ("z.csv", "a,b\n1,2\n3,\x004\n", "z.csv: line 3 holds a NUL character"),
    ("f.csv", ",\"" + "b" * 200_000 + "\"\nx,1\n", "f.csv: is not readable as CSV: field larger than field limit"),
])
def test_read_bad_text_files(tmp_path, name, content, message):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(MatrixError) as info:
        read_matrix(p)
    assert str(info.value).startswith(str(tmp_path) + "/" + message)


def test_read_tsv_uses_the_paste_parser(tmp_path):
    p = tmp_path / "m.tsv"
    p.write_text("1\t2.5\n-3\t0.004\n")
    assert np.array_equal(read_matrix(p), [[1, 2.5], [-3, 0.004]])


def test_read_bad_npy_files(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(MatrixError, match=r"obj.npy: holds object values, expected numbers"):
        read_matrix(tmp_path / "obj.npy")
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(MatrixError, match=r"cube.npy: holds a 3-D array of shape \(2, 2, 2\), expected a matrix"):
        read_matrix(tmp_path / "cube.npy")
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    with pytest.raises(MatrixError, match=r"s.npy: holds <U1 values, expected numbers"):
        read_matrix(tmp_path / "s.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an npy file at all")
    with pytest.raises(MatrixError, match=r"junk.npy: is not a readable .npy file"):
        read_matrix(tmp_path / "junk.npy")
    good = tmp_path / "cut.npy"
    np.save(good, np.zeros((50, 50)))
    good.write_bytes(good.read_bytes()[:300])
    with pytest.raises(MatrixError, match=r"cut.npy: is not a readable .npy file"):
        read_matrix(good)
    with pytest.raises(MatrixError, match=r"missing.npy: cannot be read: No such file or directory"):
        read_matrix(tmp_path / "missing.npy")


def test_read_npy_refuses_huge_shape_without_allocating(tmp_path):
    p = tmp_path / "big.npy"
    with open(p, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (100000, 100000)})
    with pytest.raises(MatrixError, match=r"big.npy: shape \(100000, 100000\) is larger than this app can hold"):
        read_matrix(p)


def test_check_shape():
    a = np.zeros((3, 2))
    assert check_shape(a, (3, 2), "W_q (head 1)") is not None
    assert check_shape(a, (None, 2), "W_q") is not None
    with pytest.raises(MatrixError) as info:
        check_shape(a, (4, 2), "W_q (head 1)")
    assert str(info.value) == "W_q (head 1): expected a 4×2 matrix, got 3×2"
    with pytest.raises(MatrixError, match=r"embeddings: expected a any×4 matrix, got 3×2"):
        check_shape(a, (None, 4), "embeddings")
    with pytest.raises(MatrixError, match=r"mask: expected a 3×3 matrix, got 3"):
        check_shape(np.zeros(3), (3, 3), "mask")


def test_version_3_stages_are_exported_with_their_names():
    from attnexplorer.core.compute.engine import compute
    from attnexplorer.core.inputs.session import Session
    from attnexplorer.core.inputs.stages import QKNorm
    from attnexplorer.io.matrix_bundles import labelled_matrices, result_arrays

    rng = np.random.default_rng(0)
    s = Session(tokens=("a", "b", "c"), embeddings=rng.normal(size=(3, 4)), w_query=rng.normal(size=(2, 4, 4)),
                w_key=rng.normal(size=(2, 4, 4)), w_value=rng.normal(size=(2, 4, 3)), qk_norm=QKNorm("rms"),
                sinks=np.array([0.5, -1.0]))
    result = compute(s, dtype="float64")
    arrays = result_arrays(result)
    np.testing.assert_array_equal(arrays["sink_share"], result.sink_share)
    np.testing.assert_array_equal(arrays["sinks"], [0.5, -1.0])
    np.testing.assert_array_equal(arrays["Q_unnormed"], result.Q_unnormed)
    tables = {m.name: m for m in labelled_matrices(result)}
    assert tables["sink_share"].row_labels == ["h0", "h1"] and tables["sink_share"].col_labels == ["a", "b", "c"]
    assert "K_unnormed_head1" in tables and tables["sinks"].col_labels == ["h0", "h1"]
