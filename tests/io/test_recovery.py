"""Recovery files without Qt: orphans found, live windows' files left alone, bad files set
aside, claims atomic across processes, killed writes' temporaries cleaned up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.io.atomic import STALE_TMP_AGE_S, atomic_write_text, remove_stale_temporaries
from attnexplorer.io.recovery import (
    RECOVERY_FORMAT, OwnerLock, claim, find_recoveries, lock_file, owner_lock, read_recovery,
    scan_recoveries, slot_file, write_recovery)
from attnexplorer.io.session_file import session_to_dict


@pytest.fixture(scope="module")
def session():
    return build_preset("pronoun").session


def raw_recovery(session, saved_at_text: str = "1700000000.5", session_text: str | None = None) -> str:
    """A recovery file's text with ``saved_at`` (and optionally the session) spelled as given."""
    body = session_text if session_text is not None else json.dumps(session_to_dict(session))
    return (f'{{"format": "{RECOVERY_FORMAT}", "version": 1, "original_path": null, '
            f'"saved_at": {saved_at_text}, "session": {body}}}')


def test_an_orphan_is_found_and_a_live_owners_file_is_not(tmp_path, session):
    write_recovery(slot_file(tmp_path, "dead"), session, tmp_path / "a.json")
    live = owner_lock(tmp_path, "live")
    assert live.acquire()
    write_recovery(slot_file(tmp_path, "live"), session, None)
    (found,) = find_recoveries(tmp_path)
    assert found.file == slot_file(tmp_path, "dead")
    assert found.session == session and found.original_path == tmp_path / "a.json"
    assert slot_file(tmp_path, "live").exists() and lock_file(tmp_path, "live").exists()
    assert not lock_file(tmp_path, "dead").exists()  # the scan's own lock is not left behind
    live.release(remove=True)


def _hold_lock_in_child(path):
    """A separate process that holds ``path``'s lock until killed."""
    code = ("import sys, time; from attnexplorer.io.recovery import OwnerLock; "
            "l = OwnerLock(sys.argv[1]); assert l.acquire(); print('held', flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"held"
    return child


def test_a_process_that_dies_frees_its_files_for_the_next_start(tmp_path, session):
    child = _hold_lock_in_child(lock_file(tmp_path, "w1"))
    try:
        write_recovery(slot_file(tmp_path, "w1"), session, None)
        assert find_recoveries(tmp_path) == []  # its window is running
        assert not OwnerLock(lock_file(tmp_path, "w1")).acquire()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    (found,) = find_recoveries(tmp_path)
    assert found.file == slot_file(tmp_path, "w1")


@pytest.mark.parametrize("saved_at", ["1e400", "-1e400", "NaN", "Infinity", "1e300", "-5", "1" + "0" * 400,
                                      '"yesterday"', "true", "null", "[1]"])
def test_a_damaged_time_falls_back_to_the_files_own(tmp_path, session, saved_at):
    # Regression: 1e400, NaN or 1e300 raised out of find_recoveries / describe().
    bad = slot_file(tmp_path, "bad")
    bad.write_text(raw_recovery(session, saved_at))
    os.utime(bad, (1_600_000_000, 1_600_000_000))
    (found,) = find_recoveries(tmp_path)
    assert found.session == session
    assert found.saved_at == 1_600_000_000
    assert "autosaved 20" in found.describe()


JUNK = {
    "deeply nested": "[" * 200_000 + "]" * 200_000,
    "deeply nested session": None,  # filled in below: the nesting inside "session"
    "garbage bytes": b"\xff\xfe\x00garbage\x80",
    "truncated": None,
    "not json": "hello",
    "a list": "[1, 2, 3]",
    "wrong format": '{"format": "something-else", "version": 1}',
    "wrong version": f'{{"format": "{RECOVERY_FORMAT}", "version": 99}}',
    "no session": f'{{"format": "{RECOVERY_FORMAT}", "version": 1}}',
    "empty session": f'{{"format": "{RECOVERY_FORMAT}", "version": 1, "session": {{"tokens": []}}}}',
    "empty file": "",
    "huge integer": "1" * 5000,
}


@pytest.mark.parametrize("kind", sorted(JUNK))
def test_an_unreadable_file_is_set_aside_and_the_good_one_still_offered(tmp_path, session, kind):
    contents = JUNK[kind]
    if kind == "deeply nested session":
        contents = raw_recovery(session, session_text="{\"a\": " * 100_000 + "1" + "}" * 100_000)
    elif kind == "truncated":
        contents = raw_recovery(session)[:-40]
    bad = slot_file(tmp_path, "bad")
    (bad.write_bytes if isinstance(contents, bytes) else bad.write_text)(contents)
    write_recovery(slot_file(tmp_path, "good"), session, None)
    scan = scan_recoveries(tmp_path)
    assert [r.file for r in scan.found] == [slot_file(tmp_path, "good")]
    assert scan.set_aside == [tmp_path / "recovery-bad.json.unreadable"]
    assert not bad.exists() and scan.set_aside[0].exists()  # kept for a person, out of the way
    assert scan_recoveries(tmp_path).set_aside == []  # met once, not on every start


def test_a_file_that_cannot_be_opened_is_left_where_it_is(tmp_path, session):
    if os.name == "nt" or os.geteuid() == 0:
        pytest.skip("needs POSIX permissions that apply (not root)")
    unreadable = slot_file(tmp_path, "perm")
    write_recovery(unreadable, session, None)
    unreadable.chmod(0)
    try:
        assert find_recoveries(tmp_path) == []
        assert unreadable.exists()
    finally:
        unreadable.chmod(0o644)
    assert len(find_recoveries(tmp_path)) == 1


def test_a_claim_moves_the_orphan_under_the_claimers_lock(tmp_path, session):
    write_recovery(slot_file(tmp_path, "dead"), session, None)
    (found,) = find_recoveries(tmp_path)
    mine = owner_lock(tmp_path, "me")
    assert mine.acquire()
    claimed = claim(found, "me")
    assert claimed is not None and claimed.file.name.startswith("recovery-me.claimed-")
    assert read_recovery(claimed.file).session == session
    assert claim(found, "other") is None  # already taken: a second window gets nothing
    assert find_recoveries(tmp_path) == []  # held by a live claimer
    mine.release()  # the claimer dies before restoring: the work is offered again
    (again,) = find_recoveries(tmp_path)
    assert again.file == claimed.file


CLAIMER = """
import sys, time
from pathlib import Path
from attnexplorer.io.recovery import claim, owner_lock, scan_recoveries
folder, me, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
lock = owner_lock(folder, me)
assert lock.acquire()
(folder / f"ready-{me}").touch()
while not go.exists():
    time.sleep(0.001)
got = [c.file.name for c in (claim(r, me) for r in scan_recoveries(folder).found) if c is not None]
print(len(got), flush=True)
# Stay alive (lock held) until every window has looked: a window that has exited really is
# gone, and its claimed file is an orphan again, which a later start rightly offers.
while not (folder / "done").exists():
    time.sleep(0.001)
"""


def test_windows_started_together_claim_an_orphan_exactly_once(tmp_path, session):
    # Regression: two windows started together both offered (and restored) the same orphan.
    write_recovery(slot_file(tmp_path, "dead"), session, None)
    go = tmp_path / "go"
    children = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path), f"w{i}", str(go)],
                                 stdout=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < 4:  # all of them waiting at the line, locks held
        assert time.monotonic() < deadline, "the claimers did not start"
        time.sleep(0.01)
    go.touch()
    counts = [int(child.stdout.readline()) for child in children]
    (tmp_path / "done").touch()
    for child in children:
        child.communicate(timeout=60)
    assert sorted(counts) == [0, 0, 0, 1]
    assert len(list(tmp_path.glob("recovery-*.json"))) == 1  # moved, never copied


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_killed_saves_temporary_is_removed_by_the_next_save(tmp_path):
    # Regression: kill -9 during a save left .NAME.json.<hex>.tmp behind for ever.
    target = tmp_path / "work.json"
    stale = tmp_path / ".work.json.0123456789ab.tmp"
    fresh = tmp_path / ".work.json.ba9876543210.tmp"
    other = tmp_path / ".other.json.0123456789ab.tmp"
    not_ours = tmp_path / ".work.json.backup.tmp"
    for p in (stale, fresh, other, not_ours):
        p.write_bytes(b"x" * 1000)
    for p in (stale, other, not_ours):
        _age(p, STALE_TMP_AGE_S + 5)
    atomic_write_text(target, "saved")
    assert target.read_text() == "saved"
    assert not stale.exists()
    assert fresh.exists()  # may be another process's write in progress
    assert other.exists() and not_ours.exists()  # another file's, or not a name we make


def test_a_temporary_a_live_process_holds_is_never_removed(tmp_path):
    tmp = tmp_path / ".work.json.0123456789ab.tmp"
    tmp.write_bytes(b"being written")
    child = _hold_lock_in_child(tmp)
    # a slow write: old, but its writer is alive (aged once the child holds it: filelock 4.1,
    # the newest for Python 3.10, truncates the file as its FileLock opens it, a new mtime)
    _age(tmp, STALE_TMP_AGE_S + 5)
    try:
        assert remove_stale_temporaries(tmp_path) == []
        assert tmp.exists()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert remove_stale_temporaries(tmp_path) == [tmp]


def test_a_real_kill_during_a_save_leaves_a_temporary_the_next_save_removes(tmp_path):
    target = tmp_path / "big.json"
    # The writer stops for good at its fsync (data written, not yet renamed), then is killed.
    code = ("import os, sys, time; import attnexplorer.io.atomic as a\n"
            "def stuck(fd): print('writing', flush=True); time.sleep(600)\n"
            "os.fsync = stuck\n"
            "a.atomic_write_bytes(sys.argv[1], b'x' * (8 << 20))")
    child = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"writing"  # the data is written, not renamed
        (tmp,) = tmp_path.glob(".big.json.*.tmp")
        assert remove_stale_temporaries(tmp_path, min_age_s=0) == []  # locked by its live writer
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert tmp.exists() and tmp.stat().st_size == 8 << 20
    _age(tmp, STALE_TMP_AGE_S + 5)
    atomic_write_text(target, "saved")
    assert [p.name for p in tmp_path.iterdir()] == ["big.json"]


def test_the_scan_removes_the_recovery_folders_stale_temporaries(tmp_path, session):
    write_recovery(slot_file(tmp_path, "dead"), session, None)
    tmp = tmp_path / ".recovery-dead.json.0123456789ab.tmp"
    tmp.write_bytes(b"{")
    _age(tmp, STALE_TMP_AGE_S + 5)
    scan = scan_recoveries(tmp_path)
    assert scan.removed_temporaries == [tmp] and not tmp.exists()
    assert len(scan.found) == 1
