"""Command line: ``attnexplorer [SESSION | --preset NAME]``, ``export``, ``fit``, ``presets``, ``bench``,
``import-model``, ``predict``, ``generate``, ``export-model``, ``lesson``, ``heads``.

The parsers are ``commands/arguments.py``. Only argparse is imported at module level so that
``attnexplorer --help`` is instant; each command imports what it needs (torch, Qt) when it
runs. Every user-facing problem is an
``AttnExplorerError``: it becomes one plain line on stderr and exit status 2, never a
traceback.
"""

from __future__ import annotations

import os
import sys

from .commands.arguments import (UsageError, build_bench_parser, build_export_model_parser, build_export_parser,
                                build_fit_parser, build_generate_parser, build_heads_parser, build_import_model_parser,
                                build_lesson_parser, build_parser, build_predict_parser, build_presets_parser)

SUBCOMMANDS = ("export", "fit", "presets", "bench", "import-model", "predict", "generate", "export-model", "lesson",
               "heads")


def _fail(message: str) -> int:
    print(f"attnexplorer: {message}", file=sys.stderr)
    return 2


def _unknown_command(argv: list[str]) -> str | None:
    """Why ``argv`` starts with a word that is neither a command nor a file (``exprt``), or None.

    Without this a typo was taken for a session file and the rest of the line reported instead
    ("give either a session file or --preset, not both")."""
    from pathlib import Path

    word = argv[0] if argv else ""
    if not word or word.startswith("-") or "." in word or "/" in word or "\\" in word or Path(word).exists():
        return None
    import difflib

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1)
    hint = f"did you mean `attnexplorer {close[0]}`? " if close else ""
    return (f"{word!r} is not a command or a session file: {hint}the commands are {', '.join(SUBCOMMANDS)} "
            "(see `attnexplorer --help`)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .core.errors import AttnExplorerError

    try:
        if argv and argv[0] in SUBCOMMANDS:
            command, rest = argv[0], argv[1:]
            if command == "export":
                from .commands.export import run_export

                return run_export(build_export_parser().parse_args(rest))
            if command == "fit":
                from .commands.fit import run_fit

                return run_fit(build_fit_parser().parse_args(rest))
            if command == "presets":
                build_presets_parser().parse_args(rest)
                from .core.inputs.presets import describe_presets

                print(describe_presets())
                return 0
            if command == "import-model":
                from .commands.import_model import run_import_model

                return run_import_model(build_import_model_parser().parse_args(rest))
            if command == "predict":
                from .commands.predict import run_predict

                return run_predict(build_predict_parser().parse_args(rest))
            if command == "generate":
                from .commands.generate import run_generate

                return run_generate(build_generate_parser().parse_args(rest))
            if command == "export-model":
                from .commands.predict import run_export_model

                return run_export_model(build_export_model_parser().parse_args(rest))
            if command == "heads":
                from .commands.heads import run_heads

                return run_heads(build_heads_parser().parse_args(rest))
            if command == "lesson":
                from .commands.lesson import run_lesson

                return run_lesson(build_lesson_parser().parse_args(rest))
            if command == "bench":
                from .bench.run import run_bench

                return run_bench(build_bench_parser().parse_args(rest))
        unknown = _unknown_command(argv)
        if unknown:
            return _fail(unknown)
        args = build_parser().parse_args(argv)
        if args.self_test:
            from .selftest import run_self_test

            return run_self_test()
        if args.session_file and args.preset:
            return _fail("give either a session file or --preset, not both")
        from .ui.app import run_app

        return run_app(args)
    except (AttnExplorerError, UsageError) as err:
        return _fail(str(err))
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The ``attnexplorer`` command (and ``python -m attnexplorer``): ``main`` on the command
    line, then exit. A command (``export``, ``fit``, …) ends without tearing the interpreter
    down: with torch loaded that teardown took 0.5 s of CPU (a cold ``export --matrices npz``
    of one MiniLM layer spent a fifth of its time in it) and nothing of it is needed once
    the command is done. The window (no command word) exits the ordinary way, since Qt's
    objects save settings as they are destroyed."""
    from .memory import steady_allocator

    steady_allocator()  # big buffers reused the same way in every run (memory.py)
    argv = sys.argv[1:]
    code = main(argv)
    if argv and argv[0] in SUBCOMMANDS:
        exit_now(code)
    sys.exit(code)


def exit_now(code: int) -> None:
    """End the process with ``code`` as an ordinary exit would, less the interpreter's
    teardown: wait for threads that are not daemons, run the ``atexit`` functions (workers
    still finishing, scratch folders removed), flush stdout and stderr, then ``os._exit``."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what an ordinary exit would also lose
            pass
    os._exit(code if isinstance(code, int) else 1)
