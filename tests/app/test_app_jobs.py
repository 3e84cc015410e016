"""The background-job primitive, without Qt: supersede, cancel, progress, state, lifetime."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import weakref

import pytest

from attnexplorer.app.jobs import CallQueue, JobRunner


@pytest.fixture
def loop():
    return CallQueue()


@pytest.fixture
def runner(loop):
    r = JobRunner("test-jobs", loop.post, progress_s=0.0)
    yield r
    r.shutdown()


def test_done_is_delivered_on_the_app_thread_and_settles(runner, loop):
    answers, settled = [], []
    runner.settled.connect(lambda: settled.append(True))
    runner.submit(lambda job: threading.current_thread().name, lambda name: answers.append(
        (name, threading.current_thread() is threading.main_thread())))
    assert not runner.idle
    assert loop.run_until(lambda: runner.idle)
    assert answers == [("test-jobs", True)] and settled == [True]


def test_a_job_submitted_while_another_waits_replaces_it(runner, loop):
    release, started = threading.Event(), threading.Event()
    ran, answers = [], []

    def blocking(job):
        started.set()
        release.wait(10)
        return "first"

    runner.submit(blocking, answers.append)
    assert started.wait(10)
    runner.submit(lambda job: ran.append("second") or "second", answers.append)
    runner.submit(lambda job: ran.append("third") or "third", answers.append)
    release.set()
    assert loop.run_until(lambda: runner.idle)
    # The running one finished but was superseded (dropped); the waiting one never ran.
    assert ran == ["third"] and answers == ["third"]


def test_the_cancel_token_stops_work_and_its_answer_is_dropped(runner, loop):
    started, saw_cancel = threading.Event(), threading.Event()
    answers = []

    def long_work(job):
        started.set()
        while not job.cancelled:
            threading.Event().wait(0.001)
        saw_cancel.set()
        raise RuntimeError("stopped part way")

    runner.submit(long_work, answers.append, answers.append)
    assert started.wait(10)
    runner.cancel()
    assert saw_cancel.wait(10)
    assert loop.run_until(lambda: runner.idle)
    assert answers == []  # neither done nor failed: a cancelled job says nothing


def test_failures_are_delivered_and_the_worker_lives_on(runner, loop):
    failures, answers = [], []
    runner.submit(lambda job: 1 / 0, answers.append, failures.append)
    assert loop.run_until(lambda: runner.idle)
    assert len(failures) == 1 and isinstance(failures[0], ZeroDivisionError)
    runner.submit(lambda job: 42, answers.append, failures.append)
    assert loop.run_until(lambda: runner.idle)
    assert answers == [42]


def test_progress_is_throttled(loop):
    runner = JobRunner("throttled", loop.post, progress_s=3600.0)
    seen = []
    try:
        def work(job):
            for i in range(100):
                job.progress(i)
            return "done"

        runner.submit(work, seen.append, on_progress=seen.append)
        assert loop.run_until(lambda: runner.idle)
        assert seen == [0, "done"]  # the first report, then nothing for an hour: only the answer
    finally:
        runner.shutdown()


def test_state_is_kept_between_jobs_on_the_worker(runner, loop):
    def count(job):
        runner.state["n"] = runner.state.get("n", 0) + 1
        return runner.state["n"], threading.current_thread().name

    answers = []
    for _ in range(3):
        runner.submit(count, answers.append)
        assert loop.run_until(lambda: runner.idle)
    assert answers == [(1, "test-jobs"), (2, "test-jobs"), (3, "test-jobs")]


def test_shutdown_stops_the_thread_and_later_jobs_never_run(loop):
    runner = JobRunner("stopping", loop.post)
    runner.submit(lambda job: None)
    thread = runner.thread
    assert loop.run_until(lambda: runner.idle)
    runner.shutdown()
    assert not thread.is_alive()
    ran = []
    job = runner.submit(lambda job: ran.append(1))
    assert job.cancelled and runner.idle and not ran


def test_a_worker_that_outlives_its_shutdown_is_joined_before_the_exit(loop):
    # A window closed while torch was still importing: the import cannot stop early, the close
    # waits only stop_timeout_s, and the worker must not still be running as the interpreter
    # and Qt tear down.
    from attnexplorer.app import jobs

    importing, imported = threading.Event(), threading.Event()

    def first_compute(job):
        importing.set()
        imported.wait(60)  # the import: blind to the cancel token

    runner = JobRunner("importing", loop.post, stop_timeout_s=0.0)
    runner.submit(first_compute)
    thread = runner.thread
    assert importing.wait(10)
    runner.shutdown()
    assert thread.is_alive()  # the close did not wait for the import
    imported.set()
    assert jobs.join_left_running()  # what the interpreter's exit runs
    assert not thread.is_alive()


def test_a_runner_dropped_without_shutdown_stops_its_thread(loop):
    class Owner:
        def __init__(self):
            self.jobs = JobRunner("dropped", loop.post)
            self.jobs.submit(lambda job: None, self.on_done)  # its callback holds the owner

        def on_done(self, _result):
            pass

    owner = Owner()
    thread = owner.jobs.thread
    assert owner.jobs.wait(10)  # the job ran; its answer is still queued, undelivered
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None
    thread.join(10)
    assert not thread.is_alive()
    loop.run_pending()  # the answer of a runner that is gone goes nowhere


def test_the_app_floor_imports_no_qt():
    # In a fresh interpreter (this test session may have Qt loaded by other tests): a document
    # edited, undone, computed inline and on the worker, with no Qt module loaded at any point.
    code = ("import sys\n"
            "import numpy as np\n"
            "import attnexplorer.app.compute as c\n"
            "from attnexplorer.app.document import Document\n"
            "from attnexplorer.app.jobs import CallQueue\n"
            "from attnexplorer.core.inputs.presets import build_preset\n"
            "loop = CallQueue()\n"
            "doc = Document(build_preset('dessert').session, loop.post)\n"
            "x = doc.session.embeddings.copy(); x[0, 0] += 1\n"
            "doc.edit(doc.session.replace(embeddings=x), 'edit')\n"
            "doc.history.undo(); doc.history.redo()\n"
            "c.INLINE_CELLS = 0\n"
            "doc.compute.request()\n"
            "assert loop.run_until(lambda: doc.compute.idle, 60)\n"
            "assert doc.result.session is doc.session and doc.session.embeddings[0, 0] == x[0, 0]\n"
            "doc.shutdown()\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph') "
            "or m.startswith('attnexplorer.ui'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_stopped_job_ends_early_and_still_answers(runner, loop):
    started = threading.Event()
    answers = []

    def steps(job):
        started.set()
        done = 0
        while not job.cancelled:
            done += 1
            threading.Event().wait(0.001)
        return done

    runner.submit(steps, answers.append)
    assert started.wait(10)
    runner.stop()
    assert loop.run_until(lambda: runner.idle)
    assert len(answers) == 1 and answers[0] >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_a_lowered_runner_works_below_the_app_threads_priority_and_so_do_its_torch_threads(loop):
    # The window's compute runs below the GUI thread's priority, so its torch threads yield a
    # core to the window at once (the 16,384-token window's longest block was half waiting).
    import os

    import torch

    from attnexplorer.app import compute

    def nice(tid):
        return os.getpriority(os.PRIO_PROCESS, tid)

    def threads():
        return {int(t) for t in os.listdir("/proc/self/task")}

    assert compute.COMPUTE_NICE > 0
    here = nice(threading.get_native_id())
    runner = JobRunner("lowered", loop.post, nice=3)
    answers = []
    try:
        before = threads()

        def work(job):
            a = torch.ones(512, 512)
            torch.mm(a, a)  # starts the worker's own team of torch threads, if it has more than one
            # The threads started meanwhile that Python did not start: torch's (another test's
            # leftover Python thread starting now is no concern of this runner's).
            python = {t.native_id for t in threading.enumerate()}
            return nice(threading.get_native_id()), {tid: nice(tid) for tid in threads() - before - python}

        runner.submit(work, answers.append)
        assert loop.run_until(lambda: runner.idle)
    finally:
        runner.shutdown()
    mine, started = answers[0]
    assert mine == min(19, here + 3)
    assert all(value == mine for value in started.values()), started
    assert nice(threading.get_native_id()) == here  # the app's thread keeps its priority
