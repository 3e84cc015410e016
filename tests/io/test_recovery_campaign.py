"""Hostile campaign over the recovery folder: generated junk beside good recovery files.

Whatever sits in the folder (bytes, any JSON, a real recovery file with one field replaced
by anything, truncated files, deep nesting), a scan never raises, every good file is offered
exactly once and can be described and restored to a path, and every file that is not offered
has been set aside, never deleted. A second scan offers the same and sets aside nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnexplorer.io.recovery import RECOVERY_FORMAT, SET_ASIDE_SUFFIX, scan_recoveries, write_recovery
from attnexplorer.io.session_file import session_to_dict

from strategies import sessions

# Any JSON value, the non-standard constants and huge numbers included (Python's json writes
# and reads NaN, Infinity and integers of any length).
any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(10**300, 10**400) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["format", "version", "original_path", "saved_at", "session"]
SESSION_KEYS = ["format", "version", "tokens", "embeddings", "heads", "W_o", "mask", "scale", "preset"]


def payload(session, saved_at=1_700_000_000.0, original="/home/me/work.json"):
    return {"format": RECOVERY_FORMAT, "version": 1, "original_path": original, "saved_at": saved_at,
            "session": session_to_dict(session)}


@st.composite
def junk(draw) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "field", "session key", "truncated", "nested", "path"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(any_json)).encode()
    base = payload(draw(sessions(max_n=3, max_d=3, max_heads=2)))
    if kind == "field":
        name = draw(st.sampled_from(FIELDS))
        if draw(st.booleans()):
            base[name] = draw(any_json)
        else:
            del base[name]
    elif kind == "session key":
        name = draw(st.sampled_from(SESSION_KEYS))
        base["session"][name] = draw(any_json)
    elif kind == "path":
        base["original_path"] = draw(st.text(max_size=30) | st.sampled_from(["\x00", "a\x00b", "x" * 5000, ""]))
    elif kind == "nested":
        depth = draw(st.integers(500, 50_000))
        text = json.dumps(base).replace('"saved_at": ', '"saved_at": ' + "[" * depth, 1)
        return text.replace('"session"', "]" * depth + ', "session"', 1).encode()
    text = json.dumps(base).encode()
    if kind == "truncated":
        return text[: draw(st.integers(0, len(text) - 1))]
    return text


owner = st.text(st.sampled_from("abcdef0123456789-_xyzé[]*?"), min_size=1, max_size=10)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(good=st.lists(sessions(max_n=3, max_d=3, max_heads=2), min_size=1, max_size=2),
       bad=st.lists(st.tuples(owner, st.booleans(), junk()), max_size=4))
def test_junk_never_hides_a_good_recovery_file(good, bad):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        good_files = {}
        for i, session in enumerate(good):
            file = folder / f"recovery-good{i}.json"
            write_recovery(file, session, None)
            good_files[file] = session
        junk_files = set()
        for name, claimed, data in bad:
            file = folder / (f"recovery-{name}.claimed-{len(junk_files)}.json" if claimed
                             else f"recovery-{name}.json")
            if file in junk_files:
                continue
            file.write_bytes(data)
            junk_files.add(file)

        scan = scan_recoveries(folder)
        found = {r.file: r for r in scan.found}
        for file, session in good_files.items():
            assert found[file].session == session
        assert len(scan.found) == len(found)  # each once
        for recovery in scan.found:
            assert recovery.describe().startswith("Unsaved changes to ")
            if recovery.original_path is not None:
                recovery.original_path.resolve()  # what the window does with it
        set_aside = {Path(str(p).removesuffix(SET_ASIDE_SUFFIX)) for p in scan.set_aside}
        assert set(found) | set_aside == set(good_files) | junk_files  # nothing lost or deleted
        assert not set(found) & set_aside
        for p in scan.set_aside:
            assert p.exists()

        again = scan_recoveries(folder)
        assert {r.file for r in again.found} == set(found) and again.set_aside == []
