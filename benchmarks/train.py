"""The training benchmark: epochs of an experiment on this device against the in-run compute floor.

    python benchmarks/train.py                                  # vsepp_synthetic_small, 2 epochs
    python benchmarks/train.py --data-path resident --epochs 3
    python benchmarks/train.py -c xattn_synthetic_small --precision bf16 train.batch_size=64
    python benchmarks/train.py -c vsepp_flickr8k --baseline vsepp_bigru_flickr8k   # two experiments, one run
    python benchmarks/train.py -c coder_synthetic_tiny --evaluate --against main   # this code against a revision
    python benchmarks/train.py --busy 1                         # 3 quiet + 3 busy epochs per thread policy

It times ``epochs`` training epochs (no evaluation) with the trainer's own batches and step (``common.py``), then
reports:

* **pairs/s**: the epoch's (image, caption) pairs over its wall time;
* **data wait**: for each step, the time from the end of the previous step until its batch is ready on the
  device, as a share of the step; and the epoch's total wait as a share of the epoch;
* **busy**: on a GPU, the mean utilisation NVML (or ``nvidia-smi``) reports while the epochs run; on a CPU, the
  process's CPU time over wall time x torch threads;
* **epoch start**: the method's ``set_epoch`` before each epoch (CODER reclusters there from the second epoch
  on), not counted in the epoch;
* **evaluation** (``--evaluate``): one evaluation of the test split under the config's test protocol;
* **floor**, the baseline measured in the same run: the same model's ``train_step`` (forward, backward,
  optimizer step) on batches already on the device, cycled, no data loading (``--floor-steps`` steps after each
  epoch, timed by ``torch.utils.benchmark``); **epoch / floor** = epoch time over floor step time x steps.

Every figure is the median over epochs (per-step shares: over all steps), beside the load average. The measured
pairs/s go to the throughput record that the cost a sweep's ``--dry-run`` shows reads
(:mod:`itrlab.train.throughput`). ``--baseline`` times a second experiment (or this one with overrides) in the
same run and prints the ratio of the two median steps; ``--against REVISION`` runs this benchmark on a git
revision's library too (``revision.py``) and prints each part's ratio; ``--busy N`` times epochs beside N busy
processes against quiet ones, under each thread policy (``busy.py``).
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import functools
import json
import shlex
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common import REPO, EpochTiming, at_least_one, load_average, machine

if TYPE_CHECKING:
    from itrlab.config import ExperimentConfig


@dataclass
class BenchReport:
    experiment: str
    device: str
    precision: str
    data_path: str
    data_path_asked: str
    batch_size: int
    steps_per_epoch: int
    epochs: list[EpochTiming]
    floor_step_seconds: list[float]
    busy_kind: str  # "GPU (NVML)", "CPU (process time)" or "n/a"
    load_before: float
    load_after: float
    notes: list[str] = field(default_factory=list)
    evaluation_seconds: float | None = None  # one evaluation of the test split under its protocol (--evaluate)
    evaluation_protocol: str = ""

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(e, attribute) for e in self.epochs)

    @property
    def floor_step(self) -> float:
        return statistics.median(self.floor_step_seconds)

    @property
    def floor_pairs_per_second(self) -> float:
        return self.batch_size / self.floor_step

    @property
    def floor_ratio(self) -> float:
        return statistics.median(
            e.seconds / (floor * e.steps) for e, floor in zip(self.epochs, self.floor_step_seconds)
        )

    @property
    def median_step_wait_share(self) -> float:
        return statistics.median(s for e in self.epochs for s in e.step_wait_shares)

    @property
    def busy(self) -> float | None:
        values = [e.busy for e in self.epochs if e.busy is not None]
        return statistics.median(values) if values else None

    @property
    def epoch_start_seconds(self) -> float:
        """The longest of the epochs' starts (``set_epoch``): CODER reclusters before every epoch from the second."""
        return max(e.start_seconds for e in self.epochs)

    def summary(self) -> dict:
        return {
            "epoch_start_seconds": self.epoch_start_seconds,
            "evaluation_seconds": self.evaluation_seconds,
            "pairs_per_second": self.median("pairs_per_second"),
            "epoch_seconds": self.median("seconds"),
            "data_share": self.median("data_share"),
            "median_step_wait_share": self.median_step_wait_share,
            "busy": self.busy,
            "busy_kind": self.busy_kind,
            "floor_step_seconds": self.floor_step,
            "floor_pairs_per_second": self.floor_pairs_per_second,
            "epoch_over_floor": self.floor_ratio,
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    def format(self) -> str:
        busy = "n/a" if self.busy is None else f"{100 * self.busy:.0f}%"
        lines = [
            f"bench_train: {self.experiment} on {self.device}; precision {self.precision}; data path "
            f"{self.data_path} (train.data_path={self.data_path_asked}); {len(self.epochs)} epoch(s) x "
            f"{self.epochs[0].steps} steps (of {self.steps_per_epoch}) x batch {self.batch_size}",
            f"{'epoch':>5}  {'seconds':>8}  {'pairs/s':>9}  {'data wait':>10}  {'median step wait':>17}  {'busy':>6}",
        ]
        for number, e in enumerate(self.epochs, 1):
            step_wait = statistics.median(e.step_wait_shares)
            lines.append(
                f"{number:>5}  {e.seconds:>8.2f}  {e.pairs_per_second:>9.0f}  {100 * e.data_share:>9.1f}%  "
                f"{100 * step_wait:>16.1f}%  {'n/a' if e.busy is None else f'{100 * e.busy:.0f}%':>6}"
            )
        lines += [
            f"floor (train_step on batches already on the device): {1000 * self.floor_step:.1f} ms/step, "
            f"{self.floor_pairs_per_second:.0f} pairs/s",
            f"median: {self.median('pairs_per_second'):.0f} pairs/s; data wait {100 * self.median('data_share'):.1f}% "
            f"of the epoch (median step {100 * self.median_step_wait_share:.1f}%); busy {busy} [{self.busy_kind}]; "
            f"epoch / floor {self.floor_ratio:.2f}x",
            "epoch starts (the method's set_epoch: a reclustering, for one): "
            + ", ".join(f"{e.start_seconds:.2f}" for e in self.epochs)
            + " s",
            *(
                [f"evaluation of the test split ({self.evaluation_protocol}): {self.evaluation_seconds:.2f} s"]
                if self.evaluation_seconds is not None
                else []
            ),
            machine(self.load_before, self.load_after),
        ]
        return "\n".join(lines + self.notes)


def run_bench(
    config: ExperimentConfig,
    epochs: int = 2,
    floor_steps: int = 30,
    warmup: int = 5,
    max_steps: int | None = None,
    run_dir: Path | None = None,
    evaluate: bool = False,
) -> BenchReport:
    """Time ``epochs`` training epochs of ``config`` on its device, then the floor (see the module doc); with
    ``evaluate``, then one evaluation of the test split under the config's test protocol."""
    from common import BusySampler, bench_trainer, floor_batches, time_epoch, time_evaluation, time_floor

    try:
        from itrlab.train.device import device_label
    except ImportError:  # the library of a revision (--against) that called it describe
        from itrlab.train.device import describe as device_label

    with bench_trainer(config, run_dir) as trainer:
        config, device = trainer.config, trainer.device
        notes = []
        busy_kind = BusySampler(device).kind
        if busy_kind == "n/a":
            notes.append("busy share: n/a (torch.cuda.utilization needs pynvml; nvidia-smi did not answer)")
        batches = floor_batches(trainer)
        time_floor(trainer, batches, warmup)  # warm-up: allocator, thread pools, autotuning
        load_before = load_average()
        timings, floor = [], []
        for epoch in range(1, epochs + 1):  # floor runs between epochs: both see the same machine load
            timings.append(time_epoch(trainer, epoch, max_steps))
            floor.append(time_floor(trainer, batches, floor_steps))
        evaluation_seconds = time_evaluation(trainer) if evaluate else None
        load_after = load_average()
    return BenchReport(
        config.name,
        device_label(device),
        config.train.precision,
        trainer.data_path,
        config.train.data_path,
        config.train.batch_size,
        trainer.steps_per_epoch,
        timings,
        floor,
        busy_kind,
        load_before,
        load_after,
        notes,
        evaluation_seconds,
        config.eval.test_protocol if evaluate else "",
    )


def record_throughput(config, result: BenchReport) -> None:
    """The measured pairs per second, for the cost estimates of sweeps' dry runs (itrlab.train.throughput)."""
    from itrlab.data.shape import data_shape
    from itrlab.train.throughput import record, training_shape

    splits = config.dataset.splits
    shape = data_shape(config.dataset.root, (splits.train, splits.val, splits.test), config.dataset.captions_per_image)
    path = record(
        result.device, training_shape(config, shape.regions, shape.feature_dim), result.median("pairs_per_second")
    )
    print(f"bench_train: recorded in {path} (what `jobs/sweep.py --dry-run` estimates costs from)")


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


def main(argv: list[str] | None = None) -> int:
    """``benchmarks/train.py [-c NAME] [--epochs N] [--precision P] [--data-path D] [--busy N] [key=value ...]``."""
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
    parser.add_argument("--epochs", type=at_least_one, default=2, help="timed epochs (default 2)")
    parser.add_argument(
        "--precision", choices=literal_values(TrainConfig, "precision"), help="train.precision (default: the config's)"
    )
    parser.add_argument(
        "--data-path", choices=literal_values(TrainConfig, "data_path"), help="train.data_path (default: the config's)"
    )
    parser.add_argument(
        "--floor-steps", type=at_least_one, default=30, help="floor steps after each epoch (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    parser.add_argument("--max-steps", type=at_least_one, help="time only the first N steps of each epoch")
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
        "--repeats", type=at_least_one, default=3, help="--busy: quiet and busy epochs per policy (default 3)"
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
    from busy import ChildFailed, format_busy, run_busy_bench, run_policy_child
    from itrlab.assembly import load_experiment
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
            from revision import resolve_revision

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
                from revision import report_against

                return report_against(args, argv, result, against_commit)
            if baseline is not None:
                print(result.format())
                print(f"bench_train: the baseline ({args.baseline}) ...")
                against = bench(baseline)
                print(against.format())
                print(step_ratio(result, against, args.baseline))
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
                print(format_busy([busy], config, args.epoch_limit))
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
                print(f"bench_train --busy {args.busy}: timing the {policy} thread policy ...")
                reports.append(run_policy_child(policy, child_argv))
            print(format_busy(reports, config, args.epoch_limit))
            if args.json:
                args.json.write_text(json.dumps([r.summary() for r in reports], indent=2))
            return 0
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        print("bench_train: interrupted", file=sys.stderr)
        return 130
    except ChildFailed as err:
        print(f"bench_train: {err}", file=sys.stderr)
        return 1
    print(result.format())
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    if not args.no_record:
        record_throughput(config, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
