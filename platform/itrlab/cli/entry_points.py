"""Where the command line starts: ``itrlab`` (:func:`main`), ``jobs/train.py`` (:func:`train_cli`), and
``jobs/sweep.py`` with each paper's sweep job (:func:`sweep_cli`: its default preset and preset flags, and the
script its printed lines name)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from itrlab.cli.arguments import OneLineParser
from itrlab.cli.claims_command import add_claims_parser
from itrlab.cli.data_command import add_data_parser
from itrlab.cli.model_commands import add_model_parsers
from itrlab.cli.ray_command import add_ray_stop_parser
from itrlab.cli.report_command import add_report_parser
from itrlab.cli.sweep_commands import add_sweep_parser
from itrlab.cli.train_commands import add_train_parsers
from itrlab.console_log import configure as configure_console


def build_parser(
    preset_flags: dict[str, tuple[str, str]] | None = None, sweep_prog: str | None = None
) -> argparse.ArgumentParser:
    """The ``itrlab`` parser; ``preset_flags`` (``{"--optuna": (PRESET, "the Optuna search")}``) are
    flags of an entry point that name one of its presets (``jobs/sweep_dbl.py --optuna``); ``sweep_prog``: the
    sweep command's name in its usage line (the job's script; default ``itrlab sweep``)."""
    parser = OneLineParser(prog="itrlab", description="Image-text retrieval experiments")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    add_train_parsers(sub)
    add_sweep_parser(sub, preset_flags, sweep_prog)
    add_report_parser(sub)
    add_claims_parser(sub)
    add_model_parsers(sub)
    add_data_parser(sub)
    add_ray_stop_parser(sub)
    return parser


def main(
    argv: Sequence[str] | None = None,
    preset_flags: dict[str, tuple[str, str]] | None = None,
    program: Sequence[str] = ("itrlab", "sweep"),
) -> int:
    """``itrlab`` (``program``: the words that start a sweep as it was started, for the lines it prints)."""
    configure_console()  # the library logs; the command line shows its records as plain lines (itrlab.console_log)
    args = parse_args(argv, preset_flags, program)
    return args.func(args)


def parse_args(
    argv: Sequence[str] | None,
    preset_flags: dict[str, tuple[str, str]] | None = None,
    program: Sequence[str] = ("itrlab", "sweep"),
) -> argparse.Namespace:
    """The arguments of ``argv`` as :func:`main` runs them."""
    parser = build_parser(preset_flags, " ".join(program[1:]) if program[0] == "python" else None)
    # Overrides may come before or after flags (`--resume train.epochs=3`): argparse leaves the
    # ones after a flag unparsed, so collect them here.
    args, rest = parser.parse_known_args(argv)
    if isinstance(getattr(args, "resume", None), str) and "=" in args.resume:  # `--resume key=value`: an override
        rest, args.resume = [args.resume, *rest], True
    stray = [arg for arg in rest if arg.startswith("-") or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if rest:
        args.overrides = [*args.overrides, *rest]
    args.invocation = (list(program), dict(preset_flags or {}))
    return args


def job_script(path: str) -> str:
    """A job's script as a command names it: relative to this folder when inside it (a cluster job runs in a
    copy of this folder), else as given."""
    with contextlib.suppress(ValueError):
        return str(Path(path).absolute().relative_to(Path.cwd()))
    return path


def sweep_cli(
    argv: Sequence[str] | None = None,
    *,
    default_preset: str | None = None,
    preset_flags: dict[str, tuple[str, str]] | None = None,
    script: str | None = None,
) -> int:
    """``jobs/sweep.py`` (any paper's sweep: ``--preset NAME``) and a paper's own sweep job, which
    gives its ``default_preset`` (run when no preset is named) and ``preset_flags`` (``--optuna``); ``script``
    (default: the running script) is what the lines it prints name (``jobs/sweep_dbl.py``, not jobs/sweep.py)."""
    program = ["python", job_script(script or sys.argv[0])]
    argv = sweep_argv(list(sys.argv[1:] if argv is None else argv), default_preset, preset_flags)
    if argv is None:
        print("itrlab: error: name a sweep: --preset NAME (--list shows them all) or --sweep FILE", file=sys.stderr)
        return 2
    return main(argv, preset_flags, program)


def sweep_argv(
    argv: list[str], default_preset: str | None = None, preset_flags: dict[str, tuple[str, str]] | None = None
) -> list[str] | None:
    """``itrlab``'s arguments of a sweep job's ``argv``: the default preset added where none is named (None:
    there is none to add)."""
    names = ("--preset", "--sweep", "--list", "-h", "--help", *(preset_flags or {}))
    if not any(a.startswith(names) for a in argv):
        if default_preset is None:
            return None
        argv = ["--preset", default_preset, *argv]
    return ["sweep", *argv]


def train_cli(argv: Sequence[str] | None = None) -> int:
    """``jobs/train.py``: the ``train`` subcommand without its name."""
    return main(["train", *(sys.argv[1:] if argv is None else argv)])
