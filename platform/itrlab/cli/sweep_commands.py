"""``itrlab sweep`` (``jobs/sweep.py``, a paper's sweep job): a preset or sweep file, its ``--list``, its
``--dry-run`` (with the command that runs it on a cluster, :func:`cluster_command`) and its run on Ray Tune."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from itrlab.cli.arguments import OneLineParser
from itrlab.cli.guard import guarded, interrupted, say_where_it_writes
from itrlab.errors import ItrlabError, UserInputError
from itrlab.interrupts import interruption, sigterm_as_sigint

SWEEP_FLAGS = {
    "resources.cpu": "--cpus-per-trial",
    "resources.gpu": "--gpus-per-trial",
    "concurrency": "--concurrency",
    "group": "--group",
}
"""Sweep-file keys that command-line flags override."""


def sweep_spec_of(args: argparse.Namespace):
    """The sweep the ``sweep`` command's arguments name (``--sweep`` or a preset), with the flags of
    :data:`SWEEP_FLAGS` applied."""
    # not itrlab.sweep's runner: no Ray or MLflow for a bad preset
    from itrlab.config.sweep import load_sweep, sweep_presets

    presets = sweep_presets()
    if args.sweep is None and args.preset not in presets:
        from itrlab.config.loader import did_you_mean

        hint = did_you_mean(args.preset or "", presets)
        raise UserInputError(
            f"--preset: got {args.preset!r}; presets: {', '.join(presets)}" + (f" ({hint})" if hint else "")
        )
    settings = {key: getattr(args, flag.lstrip("-").replace("-", "_")) for key, flag in SWEEP_FLAGS.items()}
    return load_sweep(args.sweep or presets[args.preset], args.profile).with_settings(settings, labels=SWEEP_FLAGS)


def sweep_dataset(spec, overrides: list[str]) -> dict:
    """The ``dataset`` section of the sweep's base experiment, as written ({} when it cannot be composed)."""
    from itrlab.config import compose

    try:
        dataset = compose(spec.experiment, [*spec.overrides, *overrides]).get("dataset") or {}
    except ItrlabError:
        return {}
    return dataset if isinstance(dataset, dict) else {}


def sweep_data_root(spec, overrides: list[str]) -> str | None:
    """The data folder the sweep's base experiment names, as written (None when it names none)."""
    root = sweep_dataset(spec, overrides).get("root")
    return root if isinstance(root, str) else None


def check_data_made(spec, args: argparse.Namespace) -> None:
    """UserInputError, before Ray starts, for a sweep whose data folder is missing where its data set names the
    command that makes it (``made_by``): that command, and the preset's synthetic miniature where it has one."""
    dataset = sweep_dataset(spec, list(args.overrides))
    root, made_by = dataset.get("root"), dataset.get("made_by")
    if not isinstance(root, str) or not isinstance(made_by, str) or Path(root).is_dir():
        return
    from itrlab.config.loader import read_yaml
    from itrlab.config.profiles import DEFAULT_PROFILE
    from itrlab.config.sweep import resolve_sweep_path, sweep_presets

    profiles = read_yaml(resolve_sweep_path(args.sweep or sweep_presets()[args.preset]), "sweep").get("profiles")
    instead = ""
    if spec.profile != DEFAULT_PROFILE and DEFAULT_PROFILE in (profiles or {}):
        program = " ".join(args.invocation[0])
        instead = f", or run its synthetic miniature: {program} --profile {DEFAULT_PROFILE}"
    raise UserInputError(
        f"{root}: the data set {dataset.get('name', '')} is not here; make it with `{made_by}` (docs/data.md){instead}"
    )


def list_main(args: argparse.Namespace) -> int:
    """``--list``: every preset with its paper, table or figure, trials, profiles and time here."""
    defaults = sweep_parser().parse_args([])
    others = [
        f"--{key.replace('_', '-')}" if key != "overrides" else " ".join(value)
        for key, value in vars(args).items()
        if key not in ("list", "estimate", "func", "command", "invocation") and value != getattr(defaults, key, None)
    ]
    if others:
        raise UserInputError(
            f"--list takes no other flags or overrides (got {', '.join(others)}): "
            f"it lists the presets; run one with --preset NAME"
        )
    from itrlab.config.sweep import sweep_presets
    from itrlab.sweep.catalog import list_presets

    print(list_presets(sweep_presets(), work=args.estimate))
    return 0


@guarded
def sweep_main(args: argparse.Namespace) -> int:
    if args.list:
        return list_main(args)
    if args.estimate:
        raise UserInputError("--estimate goes with --list (a --dry-run always estimates its sweep)")
    sigterm_as_sigint()  # SIGTERM stops the sweep as Ctrl-C does: state saved, --resume continues it
    spec = sweep_spec_of(args)
    if not args.resume:  # an override's typo: one line before torch, Ray or MLflow are imported
        from itrlab.sweep.points import check_structure

        check_structure(spec, list(args.overrides))
    if args.dry_run:
        from itrlab.sweep.dry_run import print_plan
        from itrlab.sweep.estimates import cost_lines

        command = cluster_command(args, sweep_data_root(spec, list(args.overrides)))
        return print_plan(spec, args, cost_lines(spec, list(args.overrides)), command)
    from itrlab.sweep import run_sweep
    from itrlab.sweep.console import set_verbose

    if not args.resume:
        check_data_made(spec, args)
    say_where_it_writes([("data", sweep_data_root(spec, args.overrides)), ("the sweep folders", args.storage)])

    set_verbose(args.verbose)  # before Ray starts: its workers inherit the console's settings
    try:
        result = run_sweep(
            spec,
            overrides=args.overrides,
            resume=args.resume,
            storage=Path(args.storage),
            allow_changes=args.allow_changes,
        )
    except KeyboardInterrupt:  # outside Tune's own handling (say while Ray starts): the parent run is KILLED
        return interrupted(f"sweep {interruption()[0]}; --resume continues it")
    if result.unchanged:
        print(
            f"sweep {spec.name}: {result.sweep_dir} finished and has no trial left to run: nothing was run, its "
            f"MLflow parent run {result.parent_run_id} and its report are as they were"
        )
        return 0
    if result.best is not None and result.headline is None:  # no pivot (Optuna): the best trial is the result,
        # ranked as the table ranks it, by the objective at the trial's best epoch; a pivot's headline was printed last
        from itrlab.report.summary import objective_value

        value = objective_value(result.best, spec.objective.metric)
        shown = f"{value:.2f}" if isinstance(value, float) else value
        print(f"\nbest trial {result.best.trial_id}: {result.best.params} ({spec.objective.metric} {shown})")
    print(f"sweep directory: {result.sweep_dir}")
    print(
        f"MLflow: parent run {result.parent_run_id} ({result.status}) in experiment '{spec.name}'; {result.ui_hint}",
        flush=True,
    )
    if result.interrupted:
        return interrupted(
            f"sweep {interruption()[0]}; {sum(r.status == 'finished' for r in result.rows)} of "
            f"{len(result.rows)} trials finished; --resume continues it"
        )
    failed = result.failed
    if failed:
        print(
            f"itrlab: {len(failed)} of {len(result.rows)} trials failed (MLflow runs FAILED, reason in the tag "
            f"itrlab.stop_reason); first: trial {failed[0].trial_id}: {failed[0].reason}",
            file=sys.stderr,
        )
        return 1
    if result.best is None:
        print("itrlab: no trial finished", file=sys.stderr)
        return 1
    return 0


def cluster_command(args: argparse.Namespace, data_root: str | None = None) -> list[str]:
    """The words of the command given (its program and script, every flag and override), as a cluster job runs
    it: less ``--dry-run``, with ``--storage`` absolute and, where ``data_root`` (the sweep's data folder,
    :func:`sweep_data_root`) is relative, ``dataset.root`` absolute: the job runs in a copy of this folder without
    its git-ignored ``runs/`` and ``data/``, where synthetic data would be made again for every job. Written from
    the parsed arguments, so that the line parses back to the same arguments (tests/test_printed_commands.py)."""
    program, preset_flags = args.invocation
    by_flag = {preset: flag for flag, (preset, _) in preset_flags.items()}  # a preset the job names by a flag
    sweep = sweep_parser(preset_flags)
    words, skip = [], ("help", "list", "dry_run", "overrides", "storage")
    for action in sweep._actions:
        value = getattr(args, action.dest, None)
        if action.dest in skip or value == action.default or action.dest == "preset" and action.const is not None:
            continue  # a preset flag (--optuna) is written by --preset's action, below
        if action.dest == "preset":
            words += [by_flag[value]] if value in by_flag else ["--preset", value]
        elif value is True:
            words.append(action.option_strings[-1])
        else:
            words += [action.option_strings[-1], format(value, "g") if isinstance(value, float) else str(value)]
    overrides = list(args.overrides)
    if data_root is not None and not Path(data_root).expanduser().is_absolute():
        absolute = f"dataset.root={Path(data_root).absolute()}"
        given = [i for i, word in enumerate(overrides) if word.startswith("dataset.root=")]
        if given:
            overrides[given[-1]] = absolute  # the last one is the one that counts
        else:
            overrides.append(absolute)
    return [*program, *words, "--storage", str(Path(args.storage).absolute()), *overrides]


def add_sweep_arguments(sweep: argparse.ArgumentParser, preset_flags: dict[str, tuple[str, str]] | None = None) -> None:
    """The ``sweep`` command's flags and overrides on ``sweep``; ``preset_flags`` (``{"--optuna": (PRESET, "the
    Optuna search")}``) are flags of an entry point that name one of its presets (``jobs/sweep_dbl.py --optuna``)."""
    sweep.add_argument(
        "--list",
        action="store_true",
        help="list every preset with its paper, table or figure, and each of its profiles with its "
        "trial count and the estimate its --dry-run printed (kept per code version), and exit",
    )
    sweep.add_argument(
        "--estimate",
        action="store_true",
        help="with --list: work out the estimates not kept yet (counts one step per model shape: minutes on a "
        "fresh clone)",
    )
    from itrlab.config.choices import list_choices, preset_names, profile_names

    which = sweep.add_mutually_exclusive_group()
    list_choices(
        which.add_argument(
            "--preset",
            default=None,
            help="a preset: a file of configs/sweeps/ by its name with dashes, or one of its "
            "short names (--list shows what each reproduces)",
        ),
        preset_names,
    )
    which.add_argument("--sweep", help="a sweep file (name under configs/sweeps/ or a YAML path) instead of a preset")
    for flag, (preset, meaning) in (preset_flags or {}).items():
        which.add_argument(
            flag, dest="preset", action="store_const", const=preset, help=f"{meaning} (= --preset {preset})"
        )
    sweep.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="NAME",
        help="continue the newest interrupted invocation of the sweep (by its recorded start), or the "
        "invocation NAME (its folder's name: also a finished one)",
    )
    sweep.add_argument(
        "--allow-changes",
        action="store_true",
        help="with --resume: run an edited sweep file, new overrides or changed data (recorded on the "
        "parent run) instead of refusing them",
    )
    list_choices(
        sweep.add_argument(
            "--profile",
            help="how to run the preset: 'paper' as the paper did (its data, "
            "shapes, encoders and schedule), 'budget' (the default) as a "
            "miniature of the same recipe, or another profile the preset "
            "defines (--list shows each preset's)",
        ),
        profile_names,
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="print the trials, the stages they share, the resources and an estimate of the cost, "
        "and the command for a cluster; start nothing",
    )
    sweep.add_argument("--storage", default="runs/sweeps", help="where sweep directories live (default: %(default)s)")
    sweep.add_argument(
        "--cpus-per-trial",
        type=float,
        metavar="N",
        help="CPUs per trial (per worker when num_workers > 1); default: the sweep file's resources.cpu",
    )
    sweep.add_argument(
        "--gpus-per-trial",
        type=float,
        metavar="N",
        help="GPUs per trial (per worker); a fraction shares a GPU between one-worker trials; "
        "trials train on the GPUs they get (train.device: auto)",
    )
    sweep.add_argument(
        "--concurrency", type=int, metavar="N", help="trials at once; default: the sweep file's concurrency"
    )
    sweep.add_argument(
        "--group",
        type=int,
        metavar="G",
        help="train G trials of one model shape together in one process, as one batched model "
        "(each still its own MLflow run); default: the sweep file's group (1)",
    )
    sweep.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Ray's full console output (Tune's status tables, checkpoint lines, its warnings, "
        "MLflow's progress bars); default: itrlab's progress line every 30 s",
    )
    sweep.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of the base experiment")


def sweep_parser(preset_flags: dict[str, tuple[str, str]] | None = None) -> argparse.ArgumentParser:
    """The ``sweep`` command's parser on its own: its defaults, and its flags as a printed command writes them."""
    parser = OneLineParser(prog="itrlab sweep")
    add_sweep_arguments(parser, preset_flags)
    return parser


def add_sweep_parser(sub, preset_flags: dict[str, tuple[str, str]] | None = None, prog: str | None = None) -> None:
    """``sweep`` on the ``itrlab`` parser's subcommands ``sub``; ``prog``: its name in its usage line."""
    sweep = sub.add_parser(
        "sweep",
        help="run a sweep of trainings on Ray Tune (jobs/sweep.py, jobs/sweep_dbl.py)",
        **({"prog": prog} if prog else {}),
    )
    add_sweep_arguments(sweep, preset_flags)
    sweep.set_defaults(func=sweep_main)
