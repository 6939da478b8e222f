"""The training benchmark beside other work (``benchmarks/train.py --busy N``): how an epoch slows down when
N other processes keep CPUs busy, under each CPU thread policy.

The busy processes are ``python -c "while True: pass"``-style loops that the benchmark starts before each
busy epoch and kills after it, also on Ctrl-C or an error; each also exits on its own once its parent is
gone. Quiet and busy epochs alternate in one process (``--repeats`` pairs, ``--max-steps`` steps each);
the figure is the median busy epoch over the median quiet one. It runs once per thread policy, each in
a subprocess of its own, since OpenMP reads its wait policy when torch loads: ``new`` (the policy of
:mod:`itrlab.threads`: passive waiting, the policy's thread count) and ``old`` (``ITRLAB_THREAD_POLICY=off``:
OpenMP's spinning default and torch's own thread count). An epoch that runs past ``--epoch-limit``
seconds stops early; its time is the time per step it reached, times the planned steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common import BENCHMARKS, EpochTiming, bench_trainer, floor_batches, load_average, time_epoch, time_floor
from itrlab import threads as thread_policy
from itrlab.config import ExperimentConfig

# A competing process: pure CPU, like `python -c "while True: pass"`, but it also ends by itself once the
# process that started it is gone (killed before it could clean up) or after argv[1] seconds.
BUSY_LOOP = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"  # Ctrl-C ends it without a traceback
    "parent, end = os.getppid(), time.monotonic() + float(sys.argv[1])\n"
    "while os.getppid() == parent and time.monotonic() < end:\n"
    "    for _ in range(100000):\n"
    "        pass\n"
)


class BusyProcesses:
    """``count`` busy-loop processes for the span of a ``with`` block: started on entry (and given a moment to
    be running), killed on exit, whatever ends the block (an error, Ctrl-C)."""

    def __init__(self, count: int, max_seconds: float = 3600.0):
        self.count, self.max_seconds = count, max_seconds
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> BusyProcesses:
        try:
            for _ in range(self.count):
                self.processes.append(
                    subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(self.max_seconds)], stdin=subprocess.DEVNULL)
                )
            time.sleep(0.3 if self.count else 0)  # interpreters started and spinning before the timing begins
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait()
        self.processes.clear()


@dataclass
class BusyReport:
    """Quiet and busy epochs, alternating, of one process under one thread policy."""

    policy: str  # new | old | as set (the environment as it is)
    wait_policy: str
    threads: int
    busy_processes: int
    planned_steps: int  # steps per timed epoch
    quiet: list[EpochTiming]
    busy: list[EpochTiming]
    load_before: float
    load_after: float

    def epoch_seconds(self, timing: EpochTiming) -> float:
        """An epoch's seconds, or for one stopped at the time limit, its time per step x the planned steps."""
        return timing.seconds / max(1, timing.steps) * self.planned_steps

    @property
    def quiet_seconds(self) -> float:
        return statistics.median(self.epoch_seconds(t) for t in self.quiet)

    @property
    def busy_seconds(self) -> float:
        return statistics.median(self.epoch_seconds(t) for t in self.busy)

    @property
    def ratio(self) -> float:
        return self.busy_seconds / self.quiet_seconds

    @property
    def stopped(self) -> int:
        return sum(t.steps < self.planned_steps for t in self.quiet + self.busy)

    def summary(self) -> dict:
        return {
            "policy": self.policy,
            "wait_policy": self.wait_policy,
            "threads": self.threads,
            "busy_processes": self.busy_processes,
            "quiet_epoch_seconds": self.quiet_seconds,
            "busy_epoch_seconds": self.busy_seconds,
            "busy_over_quiet": self.ratio,
            "quiet_epochs": [self.epoch_seconds(t) for t in self.quiet],
            "busy_epochs": [self.epoch_seconds(t) for t in self.busy],
            "stopped_epochs": self.stopped,
            "load_before": self.load_before,
            "load_after": self.load_after,
        }


def run_busy_bench(
    config: ExperimentConfig,
    busy: int,
    repeats: int = 3,
    warmup: int = 5,
    max_steps: int | None = None,
    time_limit: float | None = 60.0,
    policy: str = "as set",
    run_dir: Path | None = None,
) -> BusyReport:
    """``repeats`` (quiet epoch, epoch beside ``busy`` busy processes) pairs in this process (module doc)."""
    parent = os.getppid()
    with bench_trainer(config, run_dir) as trainer:
        time_floor(trainer, floor_batches(trainer), warmup)  # warm-up: allocator, thread pools
        planned = min(trainer.steps_per_epoch, max_steps or trainer.steps_per_epoch)
        load_before = load_average()
        quiet, loaded = [], []
        for repeat in range(repeats):
            quiet.append(time_epoch(trainer, 2 * repeat + 1, max_steps, time_limit))
            with BusyProcesses(busy):
                loaded.append(time_epoch(trainer, 2 * repeat + 2, max_steps, time_limit))
            if os.getppid() != parent:  # the benchmark that started this one is gone
                raise SystemExit("bench_train: the parent process is gone; stopping")
        load_after = load_average()
    return BusyReport(
        policy,
        thread_policy.wait_policy(),
        torch.get_num_threads(),
        busy,
        planned,
        quiet,
        loaded,
        load_before,
        load_after,
    )


def policy_env(policy: str) -> dict[str, str]:
    """The environment of a benchmark subprocess under ``policy``: ``new`` (this module's thread policy)
    or ``old`` (``ITRLAB_THREAD_POLICY=off``: OpenMP's default wait policy, torch's own thread count)."""
    own = thread_policy.worker_env()  # what the policy set in this process, not the user
    env = {key: value for key, value in os.environ.items() if key not in own and key != thread_policy.POLICY_ENV}
    if policy == "old":
        env[thread_policy.POLICY_ENV] = "off"
    else:
        thread_policy.configure_env(env)
    return env


def format_busy(reports: list[BusyReport], config: ExperimentConfig, time_limit: float | None) -> str:
    first = reports[0]
    lines = [
        f"bench_train --busy {first.busy_processes}: {config.name}, {first.planned_steps} steps x batch "
        f"{config.train.batch_size} per epoch; {len(first.quiet)} quiet and {len(first.busy)} busy epochs, "
        f"alternating, per policy; machine: {os.cpu_count()} CPUs",
        f"{'policy':<6}  {'wait policy':<28}  {'threads':>7}  {'quiet s/epoch':>13}  {'busy s/epoch':>12}  "
        f"{'busy / quiet':>12}",
    ]
    for r in reports:
        lines.append(
            f"{r.policy:<6}  {r.wait_policy:<28}  {r.threads:>7}  {r.quiet_seconds:>13.2f}  "
            f"{r.busy_seconds:>12.2f}  {r.ratio:>11.2f}x"
        )
        lines.append(
            f"{'':<6}  epochs (s): quiet {', '.join(f'{r.epoch_seconds(t):.1f}' for t in r.quiet)}; "
            f"busy {', '.join(f'{r.epoch_seconds(t):.1f}' for t in r.busy)}; 1-min load average "
            f"{r.load_before:.2f} before, {r.load_after:.2f} after"
        )
    lines.append("each figure a median over the epochs")
    by_policy = {r.policy: r for r in reports}
    if {"new", "old"} <= set(by_policy):
        new, old = by_policy["new"], by_policy["old"]
        lines.append(
            f"new / old: quiet {new.quiet_seconds / old.quiet_seconds:.2f}x, "
            f"busy {new.busy_seconds / old.busy_seconds:.2f}x"
        )
    stopped = sum(r.stopped for r in reports)
    if stopped:
        lines.append(
            f"{stopped} epoch(s) stopped at the {time_limit:g} s limit: their time per step x the planned steps"
        )
    if any(key in os.environ and key not in thread_policy.worker_env() for key in thread_policy.USER_WAIT_KEYS):
        lines.append(f"note: this shell sets {thread_policy.wait_policy()}, which both policies keep")
    return "\n".join(lines)


class ChildFailed(RuntimeError):
    """A policy's benchmark process ended with an error (its own message is above)."""


def run_policy_child(policy: str, argv: list[str]) -> BusyReport:
    """``argv`` (a busy benchmark) in a subprocess under ``policy``; its report."""
    with tempfile.TemporaryDirectory(prefix="bench_busy_") as tmp:
        out = Path(tmp) / "report.json"
        command = [
            sys.executable,
            str(BENCHMARKS / "train.py"),
            *argv,
            "--in-process",
            "--policy",
            policy,
            "--json",
            str(out),
        ]
        child = subprocess.Popen(command, env=policy_env(policy))
        try:
            status = child.wait()
        except BaseException:  # Ctrl-C reaches the child too: give it a moment to stop its busy processes
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise
        if status != 0:
            raise ChildFailed(f"the '{policy}' benchmark process failed with status {status}")
        saved = json.loads(out.read_text())
    saved["quiet"] = [EpochTiming(**t) for t in saved["quiet"]]
    saved["busy"] = [EpochTiming(**t) for t in saved["busy"]]
    saved.pop("summary", None)
    return BusyReport(**saved)
