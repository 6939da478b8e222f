"""``jobs/bench_train.py``: the training benchmarks' command line.

Without ``--busy``: epochs against the in-run compute floor (:mod:`itrlab.bench.floor`), whose pairs/s it records
for the cost estimates of sweeps' dry runs; with ``--against REVISION`` the same benchmark on the library of a git
revision too, and each part's ratio (:mod:`itrlab.bench.revision`). With ``--busy N``: quiet epochs against epochs
beside N busy processes, under each thread policy, each policy in a subprocess of its own that runs this command
line again with ``--in-process`` (:mod:`itrlab.bench.busy`).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import shlex
from dataclasses import asdict
from pathlib import Path

_log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[3]  # the checkout: platform/itrlab/bench/train.py


def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (a count of steps, epochs or repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def step_ratio(result, baseline, overrides: str) -> str:
    """One line: the median step of ``result`` and of ``baseline`` (epoch time over its steps; the floor's
    step beside it), and how many times the baseline's step is."""

    def step(report) -> float:
        return report.median("seconds") / report.epochs[0].steps

    return (
        f"step ratio: {1000 * step(result):.1f} ms/step against the baseline's {1000 * step(baseline):.1f} "
        f"(medians of {len(result.epochs)} epoch(s) each): the baseline's step is "
        f"{step(baseline) / step(result):.1f}x this one (floors {1000 * result.floor_step:.1f} and "
        f"{1000 * baseline.floor_step:.1f} ms: {baseline.floor_step / result.floor_step:.1f}x); baseline: {overrides}"
    )


def _report_against(args, argv: list[str] | None, result, commit: str) -> int:
    """This run's report, the same benchmark on ``commit``'s library (a subprocess) and the ratio of each part."""
    import sys

    from itrlab.bench.revision import bench_at, part_ratios

    _log.info(result.format())
    child_argv = _without_options(list(sys.argv[1:] if argv is None else argv), {"--against": 1, "--json": 1})
    _log.info(f"bench_train: the same benchmark on the library of {args.against} ({commit[:12]}) ...")
    try:
        other = bench_at(REPO, commit, [*child_argv, "--no-record"])
    except RuntimeError as err:
        _log.warning(f"bench_train: {err}")
        return 1
    label = args.against if len(args.against) <= 16 else commit[:12]
    _log.info(part_ratios(result.summary(), other["summary"], label))
    _log.info(
        f"ratio: {label}'s time over this code's (above 1: this code is faster); 1-min load average "
        f"{result.load_before:.2f} before this code's epochs, {other['load_before']:.2f} before {label}'s"
    )
    if args.json:
        args.json.write_text(json.dumps({"run": result.to_dict(), "against": {"commit": commit, **other}}, indent=2))
    return 0


def _without_options(argv: list[str], options: dict[str, int]) -> list[str]:
    """``argv`` without the given options and their values (``--name VALUE`` or ``--name=VALUE``)."""
    kept, skip = [], 0
    for word in argv:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in options:
            skip = 0 if "=" in word else options[name]
            continue
        kept.append(word)
    return kept


def bench_cli(argv: list[str] | None = None) -> int:
    """``jobs/bench_train.py [-c NAME] [--epochs N] [--precision P] [--data-path D] [--busy N] [key=value ...]``."""
    from itrlab.config.choices import ChoicesHelpFormatter, experiment_names, list_choices, literal_values
    from itrlab.config.schema import TrainConfig

    parser = argparse.ArgumentParser(
        description="Time training epochs against the in-run compute floor, "
        "or (--busy N) beside N busy processes against quiet epochs.",
        formatter_class=ChoicesHelpFormatter,
    )
    list_choices(
        parser.add_argument(
            "-c", "--config", default="vsepp_synthetic_small", help="experiment (default vsepp_synthetic_small)"
        ),
        experiment_names,
    )
    parser.add_argument("--epochs", type=_at_least_one, default=2, help="timed epochs (default 2)")
    parser.add_argument(
        "--precision", choices=literal_values(TrainConfig, "precision"), help="train.precision (default: the config's)"
    )
    parser.add_argument(
        "--data-path", choices=literal_values(TrainConfig, "data_path"), help="train.data_path (default: the config's)"
    )
    parser.add_argument(
        "--floor-steps", type=_at_least_one, default=30, help="floor steps after each epoch (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    parser.add_argument("--max-steps", type=_at_least_one, help="time only the first N steps of each epoch")
    parser.add_argument(
        "--threads",
        type=int,
        help="train.threads: torch threads (default: the thread policy's choice, see itrlab.threads)",
    )
    parser.add_argument(
        "--busy",
        type=int,
        metavar="N",
        help="time epochs beside N busy processes against quiet "
        "epochs, under the new thread policy and the old (see the module doc)",
    )
    parser.add_argument(
        "--repeats", type=_at_least_one, default=3, help="--busy: quiet and busy epochs per policy (default 3)"
    )
    parser.add_argument(
        "--policy",
        choices=["both", "new", "old"],
        default="both",
        help="--busy: which thread policies to time, each in its own process (default both)",
    )
    parser.add_argument(
        "--epoch-limit",
        type=float,
        default=60.0,
        help="--busy: stop an epoch after this many seconds and count its time per step (default 60)",
    )
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # one policy's child process
    parser.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)  # --against's child: old code
    parser.add_argument(
        "--baseline",
        metavar="'[EXPERIMENT] [key=value ...]'",
        help="also time a baseline in this run and print the ratio of the two median steps: another "
        "experiment, or this one with overrides, or both (the overrides given to this run apply "
        "to it too): e.g. -c vsepp_flickr8k --baseline vsepp_bigru_flickr8k, the BiGRU recipe "
        "against stored text features",
    )
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="also time one evaluation of the test split under the config's test protocol",
    )
    parser.add_argument(
        "--against",
        metavar="REVISION",
        help="also run this benchmark on the library of a git revision (a branch, tag, commit or HEAD~N), in a "
        "subprocess of this run, and print each part's ratio: train step, epoch, epoch start (a method's "
        "reclustering) and, with --evaluate, the test evaluation",
    )
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    # after the arguments: --help and a bad argument answer without loading torch
    from itrlab.assembly import load_experiment
    from itrlab.bench.busy import ChildFailed, format_busy, run_busy_bench, run_policy_child
    from itrlab.bench.floor import record_throughput, run_bench
    from itrlab.errors import ItrlabError, report

    overrides = list(args.overrides)
    if args.precision:
        overrides.append(f"train.precision={args.precision}")
    if args.data_path:
        overrides.append(f"train.data_path={args.data_path}")
    if args.threads is not None:
        overrides.append(f"train.threads={args.threads}")
    if args.busy is not None and (args.busy < 0 or args.repeats < 1):
        parser.error("--busy must be >= 0 and --repeats >= 1")
    if args.baseline is not None and args.busy is not None:
        parser.error("--baseline times plain epochs: it does not combine with --busy")
    if args.against is not None and (args.busy is not None or args.baseline is not None):
        parser.error("--against times plain epochs of one experiment: it does not combine with --busy or --baseline")
    baseline = None
    try:
        config = load_experiment(args.config, overrides)
        if args.against is not None:  # checked before anything is timed
            from itrlab.bench.revision import resolve_revision

            against_commit = resolve_revision(REPO, args.against)
        if args.baseline is not None:  # checked before anything is timed
            words = shlex.split(args.baseline)
            named = words[:1] if words and "=" not in words[0] else []
            baseline = load_experiment(named[0] if named else args.config, [*overrides, *words[len(named) :]])
        if args.busy is None:
            bench = functools.partial(  # the run and its baseline, timed alike
                run_bench,
                epochs=args.epochs,
                floor_steps=args.floor_steps,
                warmup=args.warmup,
                max_steps=args.max_steps,
                evaluate=args.evaluate,
            )
            result = bench(config)
            if args.against is not None:
                record_throughput(config, result)
                return _report_against(args, argv, result, against_commit)
            if baseline is not None:
                _log.info(result.format())
                _log.info(f"bench_train: the baseline ({args.baseline}) ...")
                against = bench(baseline)
                _log.info(against.format())
                _log.info(step_ratio(result, against, args.baseline))
                if args.json:
                    args.json.write_text(json.dumps({"run": result.to_dict(), "baseline": against.to_dict()}, indent=2))
                return 0
        elif args.in_process:
            busy = run_busy_bench(
                config,
                args.busy,
                repeats=args.repeats,
                warmup=args.warmup,
                max_steps=args.max_steps,
                time_limit=args.epoch_limit,
                policy="as set" if args.policy == "both" else args.policy,
            )
            if args.json:  # read by the benchmark that started this process, which prints the table
                args.json.write_text(json.dumps({**asdict(busy), "summary": busy.summary()}, indent=2))
            else:
                _log.info(format_busy([busy], config, args.epoch_limit))
            return 0
        else:
            child_argv = [
                "-c",
                args.config,
                "--busy",
                str(args.busy),
                "--repeats",
                str(args.repeats),
                "--warmup",
                str(args.warmup),
                "--epoch-limit",
                str(args.epoch_limit),
                *(["--max-steps", str(args.max_steps)] if args.max_steps else []),
                *overrides,
            ]
            policies = ["new", "old"] if args.policy == "both" else [args.policy]
            reports = []
            for policy in policies:
                _log.info(f"bench_train --busy {args.busy}: timing the {policy} thread policy ...")
                reports.append(run_policy_child(policy, child_argv))
            _log.info(format_busy(reports, config, args.epoch_limit))
            if args.json:
                args.json.write_text(json.dumps([r.summary() for r in reports], indent=2))
            return 0
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        _log.warning("bench_train: interrupted")
        return 130
    except ChildFailed as err:
        _log.warning(f"bench_train: {err}")
        return 1
    _log.info(result.format())
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    if not args.no_record:
        record_throughput(config, result)
    return 0
