"""Grouped training against one run at a time (the baseline, measured in the same run): a sweep's rows, their
seeds trained alone and as one group (several models of one shape as one batched model), in one process.

    python benchmarks/group.py --preset convse-table3 --rows VSE,VSE++ --group 3
    python benchmarks/group.py --preset dbl-table4 --rows A,F --group 3 --steps 20

For G runs of one model shape (a table row's seeds), each built as a run builds it
(:func:`~itrlab.train.experiment.start_run`, MLflow off, in a temporary folder), it times ``steps``
optimizer steps on the runs' own batches (their loaders or resident splits: data included):

* **G = 1**: each run alone, one after the other (its own :class:`~itrlab.train.loop.Trainer` step);
* **G**: the G runs as one group (:class:`~itrlab.train.grouped.trainer.GroupedTrainer`), every step training
  every member on its own batch.

Each after ``warmup`` untimed steps, timed by ``torch.utils.benchmark`` (``common.time_steps``), alternating
``repeats`` times (both see the same machine load); figures are medians. **pairs/s per member** is a member's
batch over the time of a step that trains it; the group's **throughput ratio** against G = 1 is ``G x pairs/s per
member at G / pairs/s at G = 1``: how much faster the group trains its G runs than one run at a time would.
**busy**: the device's busy share (``common.BusySampler``); **memory**: the device's peak allocation while the
group trains (CUDA). It prints the table's training time at G = 1 and at G from those figures, and records the
measured pairs/s in the throughput record that a sweep's ``--dry-run`` reads. The GPU check (``gpu.py``) times
its grouped section with :func:`time_group`.
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common import BusySampler, at_least_one, load_average, machine, sync, time_steps

if TYPE_CHECKING:
    import torch

    from itrlab.config import ExperimentConfig
    from itrlab.train.loop import Trainer


@contextlib.contextmanager
def member_trainers(configs: list[ExperimentConfig], root: Path | None = None) -> Iterator[list[Trainer]]:
    """The runs of ``configs`` built as runs are (MLflow off), in a temporary folder; one device copy of
    the training split for all of them."""
    from itrlab.train.experiment import start_run

    folder = Path(tempfile.mkdtemp(prefix="bench_group_", dir=root))
    try:
        trainers, shared = [], None
        for k, config in enumerate(configs):
            config = config.model_copy(deep=True)
            config.tracking.enabled = False
            run = start_run(config, folder / f"m{k}", shared_resident=shared)
            shared = shared or run.trainer.resident
            trainers.append(run.trainer)
        yield trainers
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _batches(trainer: Trainer, epoch: int = 1) -> Iterator:
    while True:  # epochs one after the other, as long as the timing needs
        for batch in trainer.epoch_batches(epoch):
            yield batch.to(trainer.device, non_blocking=True)
        epoch += 1


@dataclass
class Timing:
    """Seconds per step of one run alone and of the group, each repeat; busy shares; peak memory."""

    group: int
    batch: int
    solo: list[float] = field(default_factory=list)
    grouped: list[float] = field(default_factory=list)
    busy_solo: list[float] = field(default_factory=list)
    busy_grouped: list[float] = field(default_factory=list)
    memory_grouped: int | None = None  # the group's peak, parameters and optimizer state included

    @property
    def member_pairs_solo(self) -> float | None:
        return self.batch / statistics.median(self.solo) if self.solo else None

    @property
    def member_pairs_grouped(self) -> float:
        return self.batch / statistics.median(self.grouped)

    @property
    def ratio(self) -> float:
        """How much faster the group trains its G runs than one run at a time (> 1: faster); None unmeasured."""
        solo = self.member_pairs_solo
        return self.group * self.member_pairs_grouped / solo if solo else None

    def summary(self) -> dict:
        median = lambda values: statistics.median(values) if values else None  # noqa: E731
        return {
            "group": self.group,
            "batch": self.batch,
            "pairs_per_s_solo": self.member_pairs_solo,
            "pairs_per_s_per_member": self.member_pairs_grouped,
            "ratio": self.ratio,
            "busy_solo": median(self.busy_solo),
            "busy_grouped": median(self.busy_grouped),
            "memory_grouped_gb": self.memory_grouped / 1e9 if self.memory_grouped else None,
            "seconds_per_step_solo": self.solo,
            "seconds_per_step_grouped": self.grouped,
        }


def _peak(device: torch.device) -> int | None:
    import torch

    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def time_group(
    configs: list[ExperimentConfig],
    steps: int,
    warmup: int = 3,
    repeats: int = 3,
    time_limit: float | None = None,
    solo: bool = True,
) -> Timing:
    """Time ``configs`` (one model shape) one run at a time and as one group (see the module doc).
    ``time_limit``: seconds for the whole measurement (the repeats stop early past it); ``solo=False``
    times the group alone."""
    from itrlab.train.grouped.trainer import GroupedTrainer

    started = time.perf_counter()
    with member_trainers(configs) as trainers:
        device = trainers[0].device
        timing = Timing(len(trainers), trainers[0].config.train.batch_size)
        streams = [_batches(trainer) for trainer in trainers]
        group = GroupedTrainer(trainers)

        def solo_step(k: int) -> None:
            trainers[k].train_step(next(streams[k]), 1)

        rows = {member.row: stream for member, stream in zip(group.by_input, streams)}

        def group_step() -> None:
            group.train_step({m.row: next(rows[m.row]) for m in group.active}, 1)

        for repeat in range(repeats):
            if time_limit is not None and repeat and time.perf_counter() - started > time_limit:
                break
            if solo:  # the first member alone: every member's step is the same work
                timing.solo.append(_time(lambda: solo_step(0), steps, warmup, device, timing.busy_solo))
            _reset_peak(device)
            timing.grouped.append(_time(group_step, steps, warmup, device, timing.busy_grouped))
            timing.memory_grouped = _peak(device)
            _reset_peak(device)
            if any(not m.active for m in group.members):
                raise RuntimeError(f"a member stopped while timed: {[str(m.failure) for m in group.members]}")
    return timing


def _time(step, steps: int, warmup: int, device: torch.device, busy: list[float]) -> float:
    for _ in range(warmup):
        step()
    sync(device)
    with BusySampler(device) as sampler:
        seconds = time_steps(step, steps)
    if sampler.busy is not None:
        busy.append(sampler.busy)
    return seconds


# ---------------------------------------------------------------------- the command line


def row_configs(spec, overrides: list[str], rows: list[str] | None, group: int):
    """Per selected row of the sweep (its label): its first ``group`` seeds' grid points and configs; and
    every trial's (point, config)."""
    from itrlab.config.sweep import row_key, row_label
    from itrlab.sweep.dry_run import trial_configs

    points, configs = trial_configs(spec, overrides)
    keys = spec.table.rows if spec.table else list(spec.grid)
    labelled: dict[str, list] = {}
    for point, config in zip(points, configs):
        labelled.setdefault(row_label(row_key(point, keys)), []).append(config)
    unknown = [row for row in rows or [] if row not in labelled]
    if unknown:
        from itrlab.errors import UserInputError

        raise UserInputError(f"--rows: {', '.join(unknown)} not a row of {spec.name}; rows: {', '.join(labelled)}")
    chosen = {row: labelled[row][:group] for row in (rows or labelled)}
    return chosen, configs


def table_seconds(
    configs: list[ExperimentConfig], measured: dict[tuple, Timing], group: int
) -> tuple[float, float, int]:
    """The training time of the sweep's trials whose shape was measured, one at a time and in groups of
    ``group``, from the measured pairs per second; and how many trials that covers."""
    from itrlab.sweep.dry_run import train_pairs
    from itrlab.train.grouped.membership import shared_step

    alone = grouped = 0.0
    covered = 0
    for config in configs:
        timing = measured.get(shared_step(config))
        pairs, _, _ = train_pairs(config)
        if timing is None or not pairs:
            continue
        covered += 1
        trained = pairs // config.train.batch_size * config.train.batch_size * config.train.epochs
        alone += trained / timing.member_pairs_solo
        grouped += trained / (timing.member_pairs_grouped * group)  # G members train together
    return alone, grouped, covered


def main(argv: list[str] | None = None) -> int:
    """``benchmarks/group.py --preset NAME [--profile P] [--rows A,F] [--group G] [--steps N] [key=value ...]``."""
    import argparse

    from itrlab.config.choices import ChoicesHelpFormatter, list_choices, preset_names, profile_names

    parser = argparse.ArgumentParser(
        description="Grouped training against one run at a time: a sweep's rows, "
        "their seeds trained alone and as one group, in one process.",
        formatter_class=ChoicesHelpFormatter,
    )
    list_choices(
        parser.add_argument("--preset", required=True, help="the sweep, a preset as jobs/sweep.py names it (--list)"),
        preset_names,
    )
    list_choices(parser.add_argument("--profile", help="its profile (default: budget)"), profile_names)
    parser.add_argument("--rows", help="comma-separated row labels to measure (default: every row)")
    parser.add_argument(
        "--group", type=at_least_one, default=3, help="G, the seeds of a row trained together (default 3)"
    )
    parser.add_argument("--steps", type=at_least_one, default=20, help="timed steps per repeat (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each (default 3)")
    parser.add_argument("--repeats", type=at_least_one, default=3, help="alternating repeats; medians (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="train.threads (default 1)")
    parser.add_argument("overrides", nargs="*", help="overrides of the sweep's experiment, key=value")
    args = parser.parse_args(argv)
    # after the arguments: --help and a bad argument answer without loading torch
    import torch

    from itrlab import threads as thread_policy
    from itrlab.config.sweep import load_sweep, sweep_presets
    from itrlab.errors import ItrlabError, report
    from itrlab.sweep.cost import group_shape
    from itrlab.sweep.dry_run import train_pairs
    from itrlab.train.device import device_label
    from itrlab.train.grouped.membership import shared_step
    from itrlab.train.throughput import record, training_shape

    try:
        presets = sweep_presets()
        spec = load_sweep(presets.get(args.preset, args.preset), args.profile)
        overrides = [*args.overrides, f"train.threads={args.threads}"]
        chosen, configs = row_configs(spec, overrides, args.rows.split(",") if args.rows else None, args.group)
        thread_policy.apply(args.threads)
        measured: dict[tuple, Timing] = {}
        lines, before = [], load_average()
        for row, members in chosen.items():
            print(f"bench_group: row {row}: {len(members)} seeds alone and as one group ...")
            timing = time_group(members, args.steps, args.warmup, args.repeats)
            config = members[0]
            measured.setdefault(shared_step(config), timing)
            busy = timing.summary()
            lines.append(
                (
                    row,
                    f"{timing.member_pairs_solo:,.0f}",
                    f"{timing.member_pairs_grouped:,.0f}",
                    _share(busy["busy_solo"]),
                    _share(busy["busy_grouped"]),
                    f"{timing.ratio:.2f}x",
                )
            )
            _, features, _ = train_pairs(config)
            device = device_label(
                torch.device("cpu")
                if config.train.device == "cpu"
                else torch.device("cuda" if torch.cuda.is_available() else "cpu")
            )
            shape = training_shape(config, *features)
            record(device, shape, timing.member_pairs_solo)
            record(device, group_shape(shape, timing.group), timing.member_pairs_grouped)
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        print("bench_group: interrupted", file=sys.stderr)
        return 130
    group, after = args.group, load_average()
    header = ("row", "pairs/s alone", f"pairs/s per member at G={group}", "busy alone", "busy grouped", "ratio vs G=1")
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
    print(
        f"\n{spec.name} ({spec.profile or 'as written'}): G = {group}, {device}, {args.steps} steps x "
        f"{args.repeats} repeats (medians); ratio = G x pairs/s per member / pairs/s alone (> 1: the group is faster)"
    )
    for line in [header, *lines]:
        print("  " + "  ".join(str(cell).rjust(width) for cell, width in zip(line, widths)))
    alone, grouped, covered = table_seconds(configs, measured, group)
    if covered:
        print(
            f"table ({covered} of {len(configs)} trials, those of the measured shapes; training only): "
            f"{alone / 3600:.2f} h one trial at a time, {grouped / 3600:.2f} h at G = {group} "
            f"(G = {group} takes {grouped / alone:.2f}x the time)"
        )
    print(machine(before, after))
    print("recorded in the throughput record (what `jobs/sweep.py --dry-run` reads)")
    return 0


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


if __name__ == "__main__":
    sys.exit(main())
