"""Command-line entry points: ``itrlab train``, ``itrlab check-config``, ``itrlab evaluate``, ``itrlab retrieve``,
``itrlab gallery``, ``itrlab make-synthetic``.

``jobs/train.py`` is ``itrlab train``. Bad input (config, override, data, an output folder that cannot
be written, an MLflow store that does not answer) prints one line naming the field, the bad value and
what is allowed, and exits with status 2 before anything expensive starts. Ctrl-C prints one line and
exits with status 130, the MLflow run (or a sweep's parent run) ended KILLED.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from itrlab import threads
from itrlab.console_log import configure as configure_console
from itrlab.errors import ItrlabError, StorageError, UserInputError, disk_full, failure_reason, report
from itrlab.interrupts import interruption, sigterm_as_sigint

DEFAULT_EXPERIMENT = "vsepp_synthetic_small"


def interrupted(message: str | None = None) -> int:
    """Print one line for an interruption (``message`` names it, else the signal) and return its exit
    status: 130 for Ctrl-C (SIGINT), 143 for SIGTERM (itrlab.interrupts)."""
    reason, status = interruption()
    print(f"itrlab: {message or reason}", file=sys.stderr, flush=True)
    return status


def _guarded(main: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return main(args)
        except ItrlabError as err:
            return report(err)
        except KeyboardInterrupt:
            return interrupted()
        except OSError as err:  # a full disk met by a write of its own: one line, the run FAILED with it
            if not disk_full(err):
                raise
            return report(StorageError(failure_reason(err)))

    return run


def _latest_run_dir(base: Path) -> Path | None:
    runs = sorted((p for p in base.glob("*") if (p / "last.pt").is_file()), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def _resolve_run(args: argparse.Namespace):
    """The assembled experiment and run directory of this invocation (a fresh run, or the one to
    resume), and whether that directory is still to be claimed: a fresh run without ``--run-dir``
    gets ``<output.dir>/<name>/<timestamp>`` (``-1``, ``-2`` ... when another run took it that second),
    created only once every check passed."""
    from itrlab.assembly import check_experiment, load_experiment

    run_dir = Path(args.run_dir) if args.run_dir else None
    if args.resume:
        if run_dir is None:
            config = load_experiment(args.config, args.overrides)
            run_dir = _latest_run_dir(config.output.dir / config.name)
            if run_dir is None:
                raise UserInputError(
                    f"--resume: no run of '{config.name}' with a checkpoint under {config.output.dir / config.name}"
                )
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


def say_where_it_writes(paths: list[tuple[str, Path | str | None]], tracking: bool = True) -> None:
    """One line, before the work starts, when relative paths land outside the project folder (itrlab.workdir)."""
    from itrlab.workdir import elsewhere_line

    line = elsewhere_line(paths, tracking)
    if line:
        print(f"itrlab: {line}", flush=True)


@_guarded
def train_main(args: argparse.Namespace) -> int:
    sigterm_as_sigint()  # SIGTERM (Kubernetes, systemd, timeout) ends the run as Ctrl-C does
    experiment, run_dir, claim = _resolve_run(args)
    config = experiment.config
    from itrlab.config.checks import check_data_content
    from itrlab.files import file_lock
    from itrlab.tracking import MlflowTracker
    from itrlab.train import ConsoleProgress, LossHistory, run_experiment
    from itrlab.train.device import describe, resolve_device
    from itrlab.train.provenance import check_resume, finished_resume

    device = resolve_device(config.train.device)  # before MLflow or training start
    threads.apply(config.train.threads)  # torch's CPU threads (itrlab.threads), as printed below
    tracker = None
    with contextlib.ExitStack() as held:
        made = not claim and not run_dir.exists()  # a new --run-dir: removed again if nothing lands in it
        if not claim:  # a resumed run or a --run-dir: held against a second process (exit 2 there)
            run_dir.mkdir(parents=True, exist_ok=True)
            held.callback(lambda: made and run_dir.is_dir() and not any(run_dir.iterdir()) and run_dir.rmdir())
            held.enter_context(file_lock(run_dir, blocking=False, what=f"the run folder {run_dir}"))
        changes = check_resume(run_dir, config, args.allow_changes) if args.resume else []
        unchanged = finished_resume(run_dir, config) if args.resume else None
        if unchanged is not None:  # a FINISHED run: its recorded results stay as they are
            print(unchanged, flush=True)
            return 0
        check_data_content(config)  # every data check that can run before MLflow and the run folder exist
        if config.tracking.enabled:
            from itrlab.tracking import check_tracking_store, close_orphaned_runs

            close_orphaned_runs(check_tracking_store())  # answers; runs of dead processes here end KILLED
        if claim:
            from itrlab.files import claim_new_dir

            run_dir = claim_new_dir(run_dir.parent, run_dir.name)
            held.enter_context(file_lock(run_dir, blocking=False, what=f"the run folder {run_dir}"))
        if config.tracking.enabled:  # from here on it owns an MLflow run (itrlab.tracking.watchdog)
            from itrlab.tracking.watchdog import watching

            held.enter_context(watching("the training"))
        say_where_it_writes([("data", config.dataset.root), ("the run folder", run_dir)], config.tracking.enabled)
        print(
            f"itrlab: {config.name}: method {config.method.name}, loss {config.loss.name}, "
            f"dataset {config.dataset.name}, "
            f"{config.train.epochs} epochs on {describe(device)} -> {run_dir}",
            flush=True,
        )
        try:
            try:
                if config.tracking.enabled:
                    tracker = MlflowTracker(config.experiment_name)
                    tracker.resume_changes = changes  # recorded on the run once it is reopened
                if changes:
                    print(f"--allow-changes: resuming with {len(changes)} change(s): {'; '.join(changes)}", flush=True)
                history = LossHistory()
                result = run_experiment(
                    experiment, run_dir, callbacks=[ConsoleProgress(), history], tracker=tracker, device=device
                )
            finally:
                if claim and run_dir.is_dir() and not any(run_dir.iterdir()):
                    run_dir.rmdir()  # a run that wrote nothing (its data failed a check) leaves no folder
        except KeyboardInterrupt:  # the run was ended KILLED by run_experiment (tracker.ending)
            resume = (
                f"; continue it with: jobs/train.py --resume --run-dir {run_dir}"
                if (run_dir / "last.pt").is_file()
                else ""
            )
            return interrupted(
                f"{interruption()[0]}{', MLflow run KILLED' if tracker and tracker.run_id else ''}{resume}"
            )
    print(f"\nbest epoch {result.best_epoch} (val rsum {result.best_val_rsum:.1f}); test, best checkpoint:")
    print(result.test.format())
    print(f"run directory: {result.run_dir}")
    if tracker is not None:
        print(f"MLflow: run {result.mlflow_run_id} in experiment '{config.experiment_name}' at {tracker.tracking_uri}")
        print(f"MLflow UI: {result.mlflow_hint}")
    for line in run_verdicts(config, result.test.rsum, history.series):
        print(f"itrlab: {line}")
    return 0


def run_verdicts(config, test_rsum: float, history: dict[str, list[tuple[int, float]]]) -> list[str]:
    """What a training's last lines say of its result: at chance on its test protocol, or a loss that never
    left its plateau (itrlab.report.verdict), with what to try (docs/training.md#at-chance-or-on-a-plateau)."""
    from itrlab.report.chance import chance_on_test, config_data_shape
    from itrlab.report.verdict import verdicts

    chance = chance_on_test(config_data_shape(config), config.eval.test_protocol)
    found = verdicts(test_rsum, chance, history, config.loss.warmup_epochs)
    if found:
        found.append("this run measured its settings, not the method: see docs/training.md#at-chance-or-on-a-plateau")
    return found


@_guarded
def check_config_main(args: argparse.Namespace) -> int:
    import yaml

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


@_guarded
def make_synthetic_main(args: argparse.Namespace) -> int:
    from itrlab.data import synthetic

    try:
        return synthetic.run(vars(args))
    except ValueError as err:
        raise UserInputError(str(err)) from None


@_guarded
def report_main(args: argparse.Namespace) -> int:
    """Write the dated results page of a finished sweep from its parent run's ``sweep/summary.json``: the
    summary checked against its schema (:mod:`itrlab.report.summary_schema`) before anything is written; a
    bad file, a run that is no sweep's parent or a sweep still running is one line and exit status 2."""
    import shutil
    import tempfile

    from itrlab.files import check_writable_dir
    from itrlab.report.diagnostics import diagnostics
    from itrlab.report.results_page import check_profile, page_name, render, unused_page_name
    from itrlab.report.summary_schema import read_summary
    from itrlab.tracking import MlflowTracker, check_tracking_store, resolve_tracking_uri

    if not args.out.strip():  # Path("") is the current folder: never where a page goes by accident
        raise UserInputError("--out: got an empty path; give the folder of the page (default: docs/results)")
    out = check_writable_dir(args.out, "--out")
    tracker = MlflowTracker.for_reading(check_tracking_store(resolve_tracking_uri(args.tracking_uri)))
    run = tracker.run_record(args.run_id)
    check_profile(run)
    with tempfile.TemporaryDirectory() as tmp:
        path = tracker.download_artifact(args.run_id, "sweep/summary.json", tmp)
        if path is None:
            raise UserInputError(_no_summary(args.run_id, run))
        summary = read_summary(path, f"run {args.run_id}: sweep/summary.json")
        name = unused_page_name(out, page_name(run, summary), args.run_id)
        images = {}
        for artifact in summary.get("plots", []):
            image = tracker.download_artifact(args.run_id, artifact, tmp)
            if image is not None:
                (out / "img").mkdir(parents=True, exist_ok=True)
                target = out / "img" / f"{name}-{image.name}"
                shutil.copyfile(image, target)
                images[artifact] = f"img/{target.name}"
        page = out / f"{name}.md"
        out.mkdir(parents=True, exist_ok=True)
        from itrlab.methods import METHODS  # what each method declares of the parts of its loss

        bounds = {method: cls.part_bounds for method, cls in METHODS.items()}
        shown = diagnostics(summary, tracker.trial_runs(args.run_id), bounds)
        page.write_text(render(summary, run, images, shown), encoding="utf-8")
    print(f"results page: {page}")
    return 0


def _no_summary(run_id: str, run: dict) -> str:
    """Why a run has no ``sweep/summary.json``: a sweep still running, one that ended before its report, a
    sweep's trial, or a run of no sweep."""
    from itrlab.tracking.mlflow_tracker import PARENT_TAG, SWEEP_TAG

    sweep, parent = run["tags"].get(SWEEP_TAG), run["tags"].get(PARENT_TAG)
    if sweep and parent:
        return (
            f"run {run_id} is not a sweep's parent run: it is a trial of sweep '{sweep}'; give its parent run {parent}"
        )
    if sweep and run.get("status") == "RUNNING":
        return (
            f"run {run_id} is the parent run of sweep '{sweep}', still running: its results "
            f"(sweep/summary.json) are written when it ends; report it then"
        )
    if sweep:
        return (
            f"run {run_id}, the parent run of sweep '{sweep}', ended {run.get('status')} before it wrote its "
            f"results (no sweep/summary.json); `itrlab sweep --resume` continues it"
        )
    return (
        f"run {run_id} is not a sweep's parent run: it has no sweep/summary.json "
        f"(give the parent run of a finished sweep, as its last line printed)"
    )


def sweep_presets() -> dict[str, str]:
    """Every preset by the names ``--preset`` takes (:func:`itrlab.config.sweep.sweep_presets`)."""
    from itrlab.config.sweep import sweep_presets as presets

    return presets()


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
    from itrlab.config.sweep import load_sweep  # not itrlab.sweep's runner: no Ray or MLflow for a bad preset

    presets = sweep_presets()
    if args.sweep is None and args.preset not in presets:
        from itrlab.config.loader import did_you_mean

        hint = did_you_mean(args.preset or "", presets)
        raise UserInputError(
            f"--preset: got {args.preset!r}; presets: {', '.join(presets)}" + (f" ({hint})" if hint else "")
        )
    settings = {key: getattr(args, flag.lstrip("-").replace("-", "_")) for key, flag in SWEEP_FLAGS.items()}
    return load_sweep(args.sweep or presets[args.preset], args.profile).with_settings(settings, labels=SWEEP_FLAGS)


def sweep_data_root(spec, overrides: list[str]) -> str | None:
    """The data folder the sweep's base experiment names, as written (None when it names none)."""
    from itrlab.config import compose

    try:
        dataset = compose(spec.experiment, [*spec.overrides, *overrides]).get("dataset") or {}
    except ItrlabError:
        return None
    return dataset.get("root") if isinstance(dataset, dict) and isinstance(dataset.get("root"), str) else None


def list_main(args: argparse.Namespace) -> int:
    """``--list``: every preset with its paper, table or figure, trials, profiles and time here."""
    defaults = build_parser().parse_args(["sweep"])
    others = [
        f"--{key.replace('_', '-')}" if key != "overrides" else " ".join(value)
        for key, value in vars(args).items()
        if key not in ("list", "func", "command", "invocation") and value != getattr(defaults, key, None)
    ]
    if others:
        raise UserInputError(
            f"--list takes no other flags or overrides (got {', '.join(others)}): "
            f"it lists the presets; run one with --preset NAME"
        )
    from itrlab.sweep.catalog import list_presets

    print(list_presets(sweep_presets()))
    return 0


@_guarded
def sweep_main(args: argparse.Namespace) -> int:
    if args.list:
        return list_main(args)
    sigterm_as_sigint()  # SIGTERM stops the sweep as Ctrl-C does: state saved, --resume continues it
    spec = sweep_spec_of(args)
    if not args.resume:  # an override's typo: one line before torch, Ray or MLflow are imported
        from itrlab.sweep.points import check_structure

        check_structure(spec, list(args.overrides))
    if args.dry_run:
        from itrlab.sweep.dry_run import print_plan
        from itrlab.sweep.estimates import cost_lines

        return print_plan(spec, args, cost_lines(spec, list(args.overrides)), cluster_command(args))
    from itrlab.sweep import run_sweep
    from itrlab.sweep.progress import set_verbose

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


@_guarded
def evaluate_main(args: argparse.Namespace) -> int:
    """``itrlab evaluate MODEL [MODEL ...]``: every check first (models, data, protocol: exit 2), then the
    tables, printed, written (``--out``) and logged to one MLflow run tagged with its source runs."""
    from itrlab.trained import evaluate_models, load_model, open_eval_split

    models = [load_model(source, args.tracking_uri) for source in args.models]
    data = open_eval_split(models, args.data, args.split, args.protocol)
    tracker = None
    if not args.no_tracking:
        from itrlab.tracking import MlflowTracker, check_tracking_store

        check_tracking_store(args.tracking_uri)
        tracker = MlflowTracker(args.experiment, args.tracking_uri)
    result = evaluate_models(models, data)
    print(result.format())
    if args.out:
        from itrlab.files import atomic_write_json

        atomic_write_json(Path(args.out), result.to_dict())
        print(f"written: {args.out}")
    if tracker is not None:
        from itrlab.trained.evaluation import log_evaluation

        run_id = log_evaluation(tracker, models, result)
        print(f"MLflow: run {run_id} in experiment '{args.experiment}' at {tracker.tracking_uri}")
    return 0


@_guarded
def retrieve_main(args: argparse.Namespace) -> int:
    """``itrlab retrieve MODEL --caption TEXT | --image ID``: the top-k images of a typed caption, or the top-k
    captions of an image of the split; every check (model, data, the caption, the id, k) before scoring."""
    from itrlab.trained import load_model, open_eval_split
    from itrlab.trained.photos import split_images
    from itrlab.trained.retrieval import (
        captions_for_image,
        check_caption,
        check_k,
        format_captions,
        format_images,
        images_for_text,
    )

    if args.caption is not None:
        check_caption(args.caption)
    model = load_model(args.model, args.tracking_uri)
    split = open_eval_split([model], args.data, args.split, "all").split
    images = split_images(split)
    where = f"split {split.split} of {split.root}"
    if args.caption is not None:
        ranking = images_for_text(model, split, images, args.caption, args.k)
        print(format_images(ranking, f"{args.caption!r} ({where}, {split.n_images:,} images)"))
        return 0
    row = images.row_of(args.image)
    k = check_k(args.k, split.n_captions)
    photo = images.photo(row)
    ranking = captions_for_image(model.score_fn(split), split, images, row, k)
    print(format_captions(ranking, f"image {args.image}" + (f" ({photo})" if photo else "") + f" ({where})"))
    return 0


@_guarded
def gallery_main(args: argparse.Namespace) -> int:
    """``itrlab gallery MODEL --out FILE``: the retrieval gallery of a split whose data came from photos, written
    to ``--out`` and (``--log``) to the MLflow run the model came from; a split without photos is one line."""
    from itrlab.files import atomic_write_text, check_writable_dir
    from itrlab.trained import load_model, open_eval_split
    from itrlab.trained.gallery import ARTIFACT, build_gallery, render
    from itrlab.trained.photos import split_images

    out = Path(args.out)
    check_writable_dir(out.parent, "--out")
    model = load_model(args.model, args.tracking_uri)
    if args.log and model.info.run_id is None:
        raise UserInputError(f"--log: {args.model} names no MLflow run (a model folder without one); drop --log")
    data = open_eval_split([model], args.data, args.split, "all")
    page = render(build_gallery(model, data, split_images(data.split), args.n, args.seed))
    atomic_write_text(out, page)
    print(f"gallery: {out}")
    if args.log:
        from itrlab.tracking import MlflowTracker

        MlflowTracker.for_reading(args.tracking_uri).log_gallery(page, ARTIFACT, model.info.run_id)
        print(f"MLflow: {ARTIFACT} of run {model.info.run_id}")
    return 0


def cluster_command(args: argparse.Namespace) -> list[str]:
    """The words of the command given (its program and script, every flag and override), as a cluster job runs
    it: less ``--dry-run``, with ``--storage`` absolute (the job runs in a copy of this folder). Written from the
    parsed arguments, so that the line parses back to the same arguments (tests/test_printed_commands.py)."""
    program, preset_flags = args.invocation
    by_flag = {preset: flag for flag, (preset, _) in preset_flags.items()}  # a preset the job names by a flag
    sweep = _subparser(build_parser(preset_flags), "sweep")
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
    return [*program, *words, "--storage", str(Path(args.storage).absolute()), *args.overrides]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def _add_experiment_args(parser: argparse.ArgumentParser) -> None:
    from itrlab.config.choices import experiment_names, list_choices

    list_choices(
        parser.add_argument(
            "-c",
            "--config",
            default=DEFAULT_EXPERIMENT,
            help="experiment name under configs/experiments/ or a YAML path (default: %(default)s)",
        ),
        experiment_names,
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. train.epochs=3")


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit status 2, like every other bad input (``--help``
    shows the usage)."""

    def __init__(self, *args, **kwargs):
        from itrlab.config.choices import ChoicesHelpFormatter

        kwargs.setdefault("formatter_class", ChoicesHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(
    preset_flags: dict[str, tuple[str, str]] | None = None, sweep_prog: str | None = None
) -> argparse.ArgumentParser:
    """The ``itrlab`` parser; ``preset_flags`` (``{"--optuna": (PRESET, "the Optuna search")}``) are
    flags of an entry point that name one of its presets (``jobs/sweep_dbl.py --optuna``); ``sweep_prog``: the
    sweep command's name in its usage line (the job's script; default ``itrlab sweep``)."""
    parser = OneLineParser(prog="itrlab", description="Image-text retrieval experiments")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    train = sub.add_parser("train", help="train one model and evaluate it (jobs/train.py)")
    _add_experiment_args(train)
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
    _add_experiment_args(check)
    check.add_argument("--no-data", action="store_true", help="do not look at the data files")
    check.set_defaults(func=check_config_main)

    sweep = sub.add_parser(
        "sweep",
        help="run a sweep of trainings on Ray Tune (jobs/sweep.py, jobs/sweep_dbl.py)",
        **({"prog": sweep_prog} if sweep_prog else {}),
    )
    sweep.add_argument(
        "--list",
        action="store_true",
        help="list every preset with its paper, table or figure, and each of its profiles with its "
        "trial count and the estimate its --dry-run prints, and exit",
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
    sweep.set_defaults(func=sweep_main)

    report = sub.add_parser(
        "report",
        help="write a finished sweep's dated results page (docs/results/)",
        description="Write <out>/<date>-<sweep>.md (and its plots under <out>/img/) from a sweep "
        "parent run's sweep/summary.json in MLflow.",
    )
    report.add_argument("run_id", help="the sweep's MLflow parent run (printed on its last line)")
    report.add_argument("--out", default="docs/results", help="folder of the page (default: %(default)s)")
    report.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    report.set_defaults(func=report_main)

    evaluate = sub.add_parser(
        "evaluate",
        help="evaluate trained models (or their ensemble) on a data set, split and protocol (docs/models.md)",
    )
    evaluate.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="runs:/<run id>/model, a run id, a run folder or a model folder; two or more: "
        "their ensemble (the mean of their similarities) too",
    )
    evaluate.add_argument("--data", help="a precomp data folder (default: the first model's own data set)")
    evaluate.add_argument(
        "--split", help="the split's file prefix (default: the model's test split; with --data: test)"
    )
    evaluate.add_argument(
        "--protocol",
        help="f30k_1k, f8k_1k, coco_5k, coco_1k (5 folds), 5fold, all (default: the "
        "model's test protocol on its own test split, else all)",
    )
    evaluate.add_argument("--out", help="write the tables as JSON to this file")
    evaluate.add_argument(
        "--experiment", default="evaluate", help="MLflow experiment of the run (default: %(default)s)"
    )
    evaluate.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    evaluate.add_argument("--no-tracking", action="store_true", help="log no MLflow run")
    evaluate.set_defaults(func=evaluate_main)

    model_help = "runs:/<run id>/model, a run id, a run folder or a model folder"
    data_help = "a precomp data folder (default: the model's own data set)"
    retrieve = sub.add_parser(
        "retrieve", help="the top-k images of a typed caption, or the top-k captions of an image (docs/models.md)"
    )
    retrieve.add_argument("model", metavar="MODEL", help=model_help)
    query = retrieve.add_mutually_exclusive_group(required=True)
    query.add_argument("--caption", help="text to search the split's images for")
    query.add_argument(
        "--image",
        type=int,
        metavar="ID",
        help="an image id of the split (its _ids.txt; without one: its row) whose captions to rank",
    )
    retrieve.add_argument("-k", type=int, default=5, help="how many results (default: %(default)s)")
    retrieve.add_argument("--data", help=data_help)
    retrieve.add_argument(
        "--split", help="the split's file prefix (default: the model's test split; with --data: test)"
    )
    retrieve.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    retrieve.set_defaults(func=retrieve_main)

    gallery = sub.add_parser(
        "gallery",
        help="an HTML page of what a model retrieves, with thumbnails, for data extracted from photos (docs/models.md)",
    )
    gallery.add_argument("model", metavar="MODEL", help=model_help)
    gallery.add_argument("--out", required=True, help="the HTML file to write")
    gallery.add_argument("-n", type=int, default=8, help="captions, and images, to sample (default: %(default)s)")
    gallery.add_argument("--seed", type=int, default=0, help="the sample's seed (default: %(default)s)")
    gallery.add_argument("--data", help=data_help)
    gallery.add_argument("--split", help="the split's file prefix (default: the model's test split; with --data: test)")
    gallery.add_argument("--log", action="store_true", help="also log it as gallery.html of the model's MLflow run")
    gallery.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    gallery.set_defaults(func=gallery_main)

    from itrlab.data.synthetic import add_arguments as add_synthetic_arguments

    synth = sub.add_parser(
        "make-synthetic",
        help="write a synthetic dataset in the precomp layout",
        description="Generate a seeded synthetic ITR dataset in the SCAN precomp layout.",
    )
    add_synthetic_arguments(synth)
    synth.set_defaults(func=make_synthetic_main)
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


if __name__ == "__main__":
    sys.exit(main())
