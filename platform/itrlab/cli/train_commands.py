"""``itrlab train`` (``jobs/train.py``), ``itrlab check-config`` and ``itrlab make-synthetic``.

A training checks its config, data, run folder and MLflow store before it starts; its last lines give the
test table, where it wrote, and whether its result lies at chance or its loss never left its plateau
(:func:`run_verdicts`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from itrlab.cli.arguments import add_experiment_args
from itrlab.cli.guard import guarded, interrupted, say_where_it_writes
from itrlab.errors import UserInputError
from itrlab.interrupts import interruption, sigterm_as_sigint


def _latest_run_dir(base: Path) -> Path | None:
    runs = sorted((p for p in base.glob("*") if (p / "last.pt").is_file()), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def check_structure(config: str | Path, overrides: list[str], data: bool = True):
    """The composed experiment against the declared schema (unknown keys, types, ranges; a loss's and a scheme's
    settings; :func:`itrlab.methods.sections.declared_schema`) and, with ``data``, against its data's headers,
    before torch is imported: a typo or a missing folder is one line in about a second. The method's own keys and
    checks follow in :func:`itrlab.assembly.check_experiment`. Returns the config of the declared schema."""
    from itrlab.config import compose, validate
    from itrlab.config.checks import check_data
    from itrlab.methods.sections import declared_schema

    checked = validate(compose(config, overrides), declared_schema())
    if data:
        check_data(checked)
    return checked


def _resolve_run(args: argparse.Namespace):
    """The assembled experiment and run directory of this invocation (a fresh run, or the one to
    resume), and whether that directory is still to be claimed: a fresh run without ``--run-dir``
    gets ``<output.dir>/<name>/<timestamp>`` (``-1``, ``-2`` ... when another run took it that second),
    created only once every check passed. A ``--resume`` without ``--run-dir`` finds the experiment's latest
    run by the named experiment's declared config; the run's own ``config.yaml`` is the one assembled."""
    run_dir = Path(args.run_dir) if args.run_dir else None
    if args.resume and run_dir is None:
        named = check_structure(args.config, args.overrides, data=False)
        run_dir = _latest_run_dir(named.output.dir / named.name)
        if run_dir is None:
            raise UserInputError(
                f"--resume: no run of '{named.name}' with a checkpoint under {named.output.dir / named.name}"
            )
    elif not args.resume:
        check_structure(args.config, args.overrides)
    from itrlab.assembly import check_experiment, load_experiment

    if args.resume:
        if not (run_dir / "config.yaml").is_file():
            raise UserInputError(f"--resume: {run_dir} holds no config.yaml; it is not an itrlab run directory")
        config = load_experiment(run_dir / "config.yaml", args.overrides)
    else:
        config = load_experiment(args.config, args.overrides)
        if run_dir is None:
            run_dir = config.output.dir / config.name / time.strftime("%Y%m%d-%H%M%S")
        elif (run_dir / "last.pt").exists():
            raise UserInputError(f"--run-dir {run_dir} already holds a run; pass --resume to continue it")
    experiment = check_experiment(config)  # before MLflow or training start
    from itrlab.files import check_writable_dir

    check_writable_dir(run_dir, "--run-dir" if args.run_dir else "output.dir")
    return experiment, run_dir, not args.resume and not args.run_dir


@guarded
def train_main(args: argparse.Namespace) -> int:
    sigterm_as_sigint()  # SIGTERM (Kubernetes, systemd, timeout) ends the run as Ctrl-C does
    experiment, run_dir, claim = _resolve_run(args)
    from itrlab.train import ConsoleProgress, LossHistory
    from itrlab.train.device import device_label, place
    from itrlab.train.lifecycle import RunLifecycle

    experiment = place(experiment)  # its device and torch's CPU threads (itrlab.threads), before MLflow
    config, history = experiment.config, LossHistory()
    with RunLifecycle(experiment, run_dir, hold=True, claim=claim) as run:
        unchanged = run.check_resume(args.allow_changes) if args.resume else None
        if unchanged is not None:  # a FINISHED run: its recorded results stay as they are
            print(unchanged, flush=True)
            return 0
        run.open()
        say_where_it_writes([("data", config.dataset.root), ("the run folder", run.run_dir)], config.tracking.enabled)
        print(
            f"itrlab: {config.name}: method {config.method.name}, loss {config.loss.name}, "
            f"dataset {config.dataset.name}, "
            f"{config.train.epochs} epochs on {device_label(experiment.device)} -> {run.run_dir}",
            flush=True,
        )
        if run.changes:
            print(f"--allow-changes: resuming with {len(run.changes)} change(s): {'; '.join(run.changes)}", flush=True)
        try:
            result = run.train([ConsoleProgress(), history])
        except KeyboardInterrupt:  # the MLflow run was ended KILLED by its tracker
            last = run.run_dir / "last.pt"
            resume = f"; continue it with: jobs/train.py --resume --run-dir {run.run_dir}" if last.is_file() else ""
            killed = ", MLflow run KILLED" if run.mlflow_run_opened else ""
            return interrupted(f"{interruption()[0]}{killed}{resume}")
    _print_result(config, result, run.tracker, history)
    return 0


def _print_result(config, result, tracker, history) -> None:
    """A training's last lines: the test table, its chance line, where it wrote, and its verdicts."""
    from itrlab.report.chance import chance_of_table

    print(f"\nbest epoch {result.best_epoch} (val rsum {result.best_val_rsum:.1f}); test, best checkpoint:")
    print(result.test.format())
    chance = chance_of_table(result.test, config.dataset.captions_per_image)
    if chance is not None:
        print("\n".join(chance.lines()))
    print(f"run directory: {result.run_dir}")
    if tracker is not None:
        print(f"MLflow: run {result.mlflow_run_id} in experiment '{config.experiment_name}' at {tracker.tracking_uri}")
        print(f"MLflow UI: {result.mlflow_hint}")
    for line in run_verdicts(config, result.test.rsum, history.series, result.test.md):
        print(f"itrlab: {line}")


def run_verdicts(
    config, test_rsum: float, history: dict[str, list[tuple[int, float]]], test_md: float | None = None
) -> list[str]:
    """What a training's last lines say of its result: at chance on its test protocol, a loss that never left
    its plateau or sits on its collapse plateau, collapsed embeddings (itrlab.report.verdict), with what to
    try (docs/training.md#at-chance-or-on-a-plateau)."""
    from itrlab.report.chance import chance_on_test, config_data_shape
    from itrlab.report.verdict import collapse_plateau, verdicts

    chance = chance_on_test(config_data_shape(config), config.eval.test_protocol)
    plateau = collapse_plateau(config.flat())
    found = verdicts(test_rsum, chance, history, config.loss.warmup_epochs, plateau, test_md)
    if found:
        found.append("this run measured its settings, not the method: see docs/training.md#at-chance-or-on-a-plateau")
    return found


@guarded
def check_config_main(args: argparse.Namespace) -> int:
    import yaml

    check_structure(args.config, args.overrides, data=not args.no_data)
    from itrlab.assembly import check_experiment, load_experiment

    config = load_experiment(args.config, args.overrides)
    summary = check_experiment(config).data if not args.no_data else None
    print(yaml.safe_dump(config.dump(), sort_keys=False), end="")
    if summary is not None:
        print(
            f"# data: {summary.n_images} images per split, {summary.captions_per_image} captions per image"
            + (" (synthetic, not generated yet)" if summary.generated else "")
        )
    return 0


@guarded
def make_synthetic_main(args: argparse.Namespace) -> int:
    from itrlab.data import synthetic

    try:
        return synthetic.run(vars(args))
    except ValueError as err:
        raise UserInputError(str(err)) from None


def add_train_parsers(sub) -> None:
    """``train``, ``check-config`` and ``make-synthetic`` on the ``itrlab`` parser's subcommands ``sub``."""
    train = sub.add_parser("train", help="train one model and evaluate it (jobs/train.py)")
    add_experiment_args(train)
    train.add_argument("--run-dir", help="run directory (default: <output.dir>/<name>/<timestamp>)")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir, or the latest run of the experiment, from its last checkpoint",
    )
    train.add_argument(
        "--allow-changes",
        action="store_true",
        help="with --resume: train on although the config or data differ from what the run recorded "
        "(the changes are recorded on its MLflow run); other test data or another test protocol "
        "is never accepted (a new record)",
    )
    train.set_defaults(func=train_main)

    check = sub.add_parser("check-config", help="validate a config against its data and print it resolved")
    add_experiment_args(check)
    check.add_argument("--no-data", action="store_true", help="do not look at the data files")
    check.set_defaults(func=check_config_main)

    from itrlab.data.synthetic import add_arguments as add_synthetic_arguments

    synth = sub.add_parser(
        "make-synthetic",
        help="write a synthetic dataset in the precomp layout",
        description="Generate a seeded synthetic ITR dataset in the SCAN precomp layout.",
    )
    add_synthetic_arguments(synth)
    synth.set_defaults(func=make_synthetic_main)
