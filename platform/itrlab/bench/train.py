"""Training throughput benchmark (``jobs/bench_train.py``): epochs against the in-run compute floor.

It builds the experiment's data, method and :class:`~itrlab.train.loop.Trainer` as a run does (in a
temporary run directory, MLflow off), then times ``epochs`` training epochs (no evaluation) on the
current device with the trainer's own batches and step:

* **pairs/s**: the epoch's (image, caption) pairs over its wall time;
* **data wait**: for each step, the time from the end of the previous step until its batch is ready on
  the device (``next()`` on the loader or the resident split, plus the copy), as a share of the step;
  and the epoch's total wait as a share of the epoch (the data path's share of an epoch);
* **busy**: on a GPU, the mean utilisation NVML reports while the epochs run (``torch.cuda``'s
  ``utilization``, which needs ``pynvml``; ``n/a`` without it); on a CPU, the process's CPU time over
  wall time x torch threads;
* **floor**: the same model's ``train_step`` (forward, backward, optimizer step) on batches already on
  the device, cycled, no data loading (``floor_steps`` steps after each epoch);
  **epoch / floor** = epoch time over floor step time x steps per epoch.

Every figure is the median over epochs (per-step shares: over all steps). On a GPU, steps are timed on
the host without a device sync per step (as the trainer runs them); each epoch and floor run ends
with one. ``warmup`` floor steps run untimed first.

**Beside other work** (``--busy N``, :func:`run_busy_bench`): how an epoch slows down when N other processes
keep CPUs busy (``python -c "while True: pass"``-style loops that the benchmark starts before each busy
epoch and kills after it, also on Ctrl-C or an error; each also exits on its own once its parent is
gone). Quiet and busy epochs alternate in one process (``--repeats`` pairs, ``--max-steps`` steps each);
the figure is the median busy epoch over the median quiet one. It runs once per thread policy, each in
a subprocess of its own, since OpenMP reads its wait policy when torch loads: ``new`` (the policy of
:mod:`itrlab.threads`: passive waiting, the policy's thread count) and ``old`` (``ITRLAB_THREAD_POLICY=off``:
OpenMP's spinning default and torch's own thread count). An epoch that runs past ``--epoch-limit``
seconds stops early; its time is the time per step it reached, times the planned steps.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from itrlab import threads as thread_policy
from itrlab.config import ExperimentConfig
from itrlab.train.checkpoint import seed_everything
from itrlab.train.device import describe, resolve_device
from itrlab.train.loop import CUDA_READ_EVERY, Trainer, _StepLog


@dataclass
class EpochTiming:
    seconds: float
    steps: int
    pairs: int
    data_wait_seconds: float
    step_wait_shares: list[float]
    busy: float | None

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds

    @property
    def data_share(self) -> float:
        return self.data_wait_seconds / self.seconds


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
        return statistics.median(e.seconds / (floor * e.steps) for e, floor in zip(self.epochs, self.floor_step_seconds))

    @property
    def median_step_wait_share(self) -> float:
        return statistics.median(s for e in self.epochs for s in e.step_wait_shares)

    @property
    def busy(self) -> float | None:
        values = [e.busy for e in self.epochs if e.busy is not None]
        return statistics.median(values) if values else None

    def summary(self) -> dict:
        return {"pairs_per_second": self.median("pairs_per_second"), "epoch_seconds": self.median("seconds"),
                "data_share": self.median("data_share"), "median_step_wait_share": self.median_step_wait_share,
                "busy": self.busy, "busy_kind": self.busy_kind, "floor_step_seconds": self.floor_step,
                "floor_pairs_per_second": self.floor_pairs_per_second, "epoch_over_floor": self.floor_ratio}

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    def format(self) -> str:
        busy = "n/a" if self.busy is None else f"{100 * self.busy:.0f}%"
        lines = [f"bench_train: {self.experiment} on {self.device}; precision {self.precision}; data path "
                 f"{self.data_path} (train.data_path={self.data_path_asked}); {len(self.epochs)} epoch(s) x "
                 f"{self.epochs[0].steps} steps (of {self.steps_per_epoch}) x batch {self.batch_size}",
                 f"{'epoch':>5}  {'seconds':>8}  {'pairs/s':>9}  {'data wait':>10}  {'median step wait':>17}  {'busy':>6}"]
        for number, e in enumerate(self.epochs, 1):
            step_wait = statistics.median(e.step_wait_shares)
            lines.append(f"{number:>5}  {e.seconds:>8.2f}  {e.pairs_per_second:>9.0f}  {100 * e.data_share:>9.1f}%  "
                         f"{100 * step_wait:>16.1f}%  {'n/a' if e.busy is None else f'{100 * e.busy:.0f}%':>6}")
        lines += [
            f"floor (train_step on batches already on the device): {1000 * self.floor_step:.1f} ms/step, "
            f"{self.floor_pairs_per_second:.0f} pairs/s",
            f"median: {self.median('pairs_per_second'):.0f} pairs/s; data wait {100 * self.median('data_share'):.1f}% "
            f"of the epoch (median step {100 * self.median_step_wait_share:.1f}%); busy {busy} [{self.busy_kind}]; "
            f"epoch / floor {self.floor_ratio:.2f}x",
            f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; 1-min load average "
            f"{self.load_before:.2f} before, {self.load_after:.2f} after (other load skews the timings)",
        ]
        return "\n".join(lines + self.notes)


class _GpuSampler:
    """Mean GPU utilisation over a span, sampled by NVML in a thread (None when NVML is unavailable)."""

    def __init__(self, device: torch.device, interval: float = 0.05):
        self.device, self.interval = device, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def available(device: torch.device) -> bool:
        if device.type != "cuda":
            return False
        try:
            torch.cuda.utilization(device)
            return True
        except Exception:  # no pynvml / NVML
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(torch.cuda.utilization(self.device) / 100.0)

    def __enter__(self) -> "_GpuSampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_epoch(trainer: Trainer, epoch: int, gpu_nvml: bool, max_steps: int | None = None,
               time_limit: float | None = None) -> EpochTiming:
    """One training epoch of ``trainer`` (its first ``max_steps`` steps), timed step by step (the trainer's
    batches and steps); it stops after the first step that ends past ``time_limit`` seconds."""
    device = trainer.device
    trainer.method.train()
    trainer.method.set_epoch(epoch)
    log = _StepLog(epoch, every=1 if device.type != "cuda" else CUDA_READ_EVERY)
    waits, shares = 0.0, []
    sampler = _GpuSampler(device) if gpu_nvml else None
    _sync(device)
    cpu_started, started = time.process_time(), time.perf_counter()
    if sampler is not None:
        sampler.__enter__()
    try:
        batches = iter(trainer.epoch_batches(epoch))
        previous_end = time.perf_counter()
        while True:
            over = time_limit is not None and previous_end - started > time_limit
            batch = next(batches, None) if (max_steps is None or len(shares) < max_steps) and not over else None
            if batch is None:
                break
            batch = batch.to(device, non_blocking=True)
            ready = time.perf_counter()
            log.add(trainer.state.step, trainer.train_step(batch, epoch))
            end = time.perf_counter()
            waits += ready - previous_end
            shares.append((ready - previous_end) / (end - previous_end))
            previous_end = end
        log.means()
        _sync(device)
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
    seconds = time.perf_counter() - started
    if sampler is not None:
        busy = sampler.mean()
    elif device.type == "cpu":
        busy = (time.process_time() - cpu_started) / (seconds * torch.get_num_threads())
    else:
        busy = None
    steps = len(shares)
    return EpochTiming(seconds, steps, steps * trainer.config.train.batch_size, waits, shares, busy)


def floor_batches(trainer: Trainer, n_batches: int = 8) -> list:
    """The first ``n_batches`` batches of epoch 1, on the device: the floor's inputs."""
    batches = []
    for batch in trainer.epoch_batches(1):
        batches.append(batch.to(trainer.device))
        if len(batches) == n_batches:
            break
    return batches


def time_floor(trainer: Trainer, batches: list, steps: int) -> float:
    """Seconds per ``train_step`` on ``batches`` already on the device, cycled: ``steps`` steps timed
    together (one device sync at each end), no data loading."""
    device = trainer.device
    trainer.method.train()
    _sync(device)
    started = time.perf_counter()
    for index in range(steps):
        trainer.train_step(batches[index % len(batches)], 0)
    _sync(device)
    return (time.perf_counter() - started) / steps


@contextlib.contextmanager
def bench_trainer(config: ExperimentConfig, run_dir: Path | None = None) -> Iterator[Trainer]:
    """A :class:`Trainer` for ``config`` built as a run builds it (MLflow off, in a temporary run directory
    unless ``run_dir``), torch's threads set by the thread policy (``train.threads``)."""
    from itrlab.train.experiment import build_run_method, prepare_data

    config = config.model_copy(deep=True)
    config.tracking.enabled = False
    device = resolve_device(config.train.device)
    thread_policy.apply(config.train.threads)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        directory = run_dir or Path(tmp)
        data = prepare_data(config, directory)
        seed_everything(config.seed)
        method, _ = build_run_method(config, data, directory, device)
        yield Trainer(config, method, data, directory, device=device)


def run_bench(config: ExperimentConfig, epochs: int = 2, floor_steps: int = 30, warmup: int = 5,
              max_steps: int | None = None, run_dir: Path | None = None) -> BenchReport:
    """Time ``epochs`` training epochs of ``config`` on its device, then the floor (see the module doc)."""
    with bench_trainer(config, run_dir) as trainer:
        config, device = trainer.config, trainer.device
        notes = []
        gpu_nvml = _GpuSampler.available(device)
        busy_kind = "GPU (NVML)" if gpu_nvml else ("CPU (process time)" if device.type == "cpu" else "n/a")
        if device.type == "cuda" and not gpu_nvml:
            notes.append("GPU busy share: n/a (torch.cuda.utilization needs pynvml)")
        batches = floor_batches(trainer)
        time_floor(trainer, batches, warmup)  # warm-up: allocator, thread pools, autotuning
        load_before = os.getloadavg()[0]
        timings, floor = [], []
        for epoch in range(1, epochs + 1):  # floor runs between epochs: both see the same machine load
            timings.append(time_epoch(trainer, epoch, gpu_nvml, max_steps))
            floor.append(time_floor(trainer, batches, floor_steps))
        load_after = os.getloadavg()[0]
    return BenchReport(config.name, describe(device), config.train.precision, trainer.data_path,
                       config.train.data_path, config.train.batch_size, trainer.steps_per_epoch, timings, floor,
                       busy_kind, load_before, load_after, notes)


# A competing process: pure CPU, like `python -c "while True: pass"`, but it also ends by itself once the
# process that started it is gone (killed before it could clean up) or after argv[1] seconds.
BUSY_LOOP = ("import os, signal, sys, time\n"
             "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"  # Ctrl-C ends it without a traceback
             "parent, end = os.getppid(), time.monotonic() + float(sys.argv[1])\n"
             "while os.getppid() == parent and time.monotonic() < end:\n"
             "    for _ in range(100000):\n"
             "        pass\n")


class BusyProcesses:
    """``count`` busy-loop processes for the span of a ``with`` block: started on entry (and given a moment to
    be running), killed on exit, whatever ends the block (an error, Ctrl-C)."""

    def __init__(self, count: int, max_seconds: float = 3600.0):
        self.count, self.max_seconds = count, max_seconds
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "BusyProcesses":
        try:
            for _ in range(self.count):
                self.processes.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(self.max_seconds)],
                                                       stdin=subprocess.DEVNULL))
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
        return {"policy": self.policy, "wait_policy": self.wait_policy, "threads": self.threads,
                "busy_processes": self.busy_processes, "quiet_epoch_seconds": self.quiet_seconds,
                "busy_epoch_seconds": self.busy_seconds, "busy_over_quiet": self.ratio,
                "quiet_epochs": [self.epoch_seconds(t) for t in self.quiet],
                "busy_epochs": [self.epoch_seconds(t) for t in self.busy], "stopped_epochs": self.stopped,
                "load_before": self.load_before, "load_after": self.load_after}


def run_busy_bench(config: ExperimentConfig, busy: int, repeats: int = 3, warmup: int = 5,
                   max_steps: int | None = None, time_limit: float | None = 60.0, policy: str = "as set",
                   run_dir: Path | None = None) -> BusyReport:
    """``repeats`` (quiet epoch, epoch beside ``busy`` busy processes) pairs in this process (module doc)."""
    parent = os.getppid()
    with bench_trainer(config, run_dir) as trainer:
        gpu_nvml = _GpuSampler.available(trainer.device)
        time_floor(trainer, floor_batches(trainer), warmup)  # warm-up: allocator, thread pools
        planned = min(trainer.steps_per_epoch, max_steps or trainer.steps_per_epoch)
        load_before = os.getloadavg()[0]
        quiet, loaded = [], []
        for repeat in range(repeats):
            quiet.append(time_epoch(trainer, 2 * repeat + 1, gpu_nvml, max_steps, time_limit))
            with BusyProcesses(busy):
                loaded.append(time_epoch(trainer, 2 * repeat + 2, gpu_nvml, max_steps, time_limit))
            if os.getppid() != parent:  # the benchmark that started this one is gone
                raise SystemExit("bench_train: the parent process is gone; stopping")
        load_after = os.getloadavg()[0]
    return BusyReport(policy, thread_policy.describe(), torch.get_num_threads(), busy, planned, quiet, loaded,
                      load_before, load_after)


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
    lines = [f"bench_train --busy {first.busy_processes}: {config.name}, {first.planned_steps} steps x batch "
             f"{config.train.batch_size} per epoch; {len(first.quiet)} quiet and {len(first.busy)} busy epochs, "
             f"alternating, per policy; machine: {os.cpu_count()} CPUs",
             f"{'policy':<6}  {'wait policy':<28}  {'threads':>7}  {'quiet s/epoch':>13}  {'busy s/epoch':>12}  "
             f"{'busy / quiet':>12}"]
    for r in reports:
        lines.append(f"{r.policy:<6}  {r.wait_policy:<28}  {r.threads:>7}  {r.quiet_seconds:>13.2f}  "
                     f"{r.busy_seconds:>12.2f}  {r.ratio:>11.2f}x")
        lines.append(f"{'':<6}  epochs (s): quiet {', '.join(f'{r.epoch_seconds(t):.1f}' for t in r.quiet)}; "
                     f"busy {', '.join(f'{r.epoch_seconds(t):.1f}' for t in r.busy)}; 1-min load average "
                     f"{r.load_before:.2f} before, {r.load_after:.2f} after")
    lines.append("each figure a median over the epochs")
    by_policy = {r.policy: r for r in reports}
    if {"new", "old"} <= set(by_policy):
        new, old = by_policy["new"], by_policy["old"]
        lines.append(f"new / old: quiet {new.quiet_seconds / old.quiet_seconds:.2f}x, "
                     f"busy {new.busy_seconds / old.busy_seconds:.2f}x")
    stopped = sum(r.stopped for r in reports)
    if stopped:
        lines.append(f"{stopped} epoch(s) stopped at the {time_limit:g} s limit: their time per step x the planned steps")
    if any(key in os.environ and key not in thread_policy.worker_env() for key in thread_policy.USER_WAIT_KEYS):
        lines.append(f"note: this shell sets {thread_policy.describe()}, which both policies keep")
    return "\n".join(lines)


class ChildFailed(RuntimeError):
    """A policy's benchmark process ended with an error (its own message is above)."""


def _run_policy_child(policy: str, argv: list[str]) -> BusyReport:
    """``argv`` (a busy benchmark) in a subprocess under ``policy``; its report."""
    import json

    with tempfile.TemporaryDirectory(prefix="bench_busy_") as tmp:
        out = Path(tmp) / "report.json"
        command = [sys.executable, "-c", "import sys; from itrlab.bench.train import bench_cli; "
                   "sys.exit(bench_cli(sys.argv[1:]))", *argv, "--in-process", "--policy", policy,
                   "--json", str(out)]
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


def bench_cli(argv: list[str] | None = None) -> int:
    """``jobs/bench_train.py [-c NAME] [--epochs N] [--precision P] [--data-path D] [--busy N] [key=value ...]``."""
    import argparse
    import json

    from itrlab.assembly import load_experiment
    from itrlab.errors import ItrlabError, report

    parser = argparse.ArgumentParser(description="Time training epochs against the in-run compute floor, "
                                     "or (--busy N) beside N busy processes against quiet epochs.")
    parser.add_argument("-c", "--config", default="vsepp_synthetic_small", help="experiment (default vsepp_synthetic_small)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="train.precision (default: the config's)")
    parser.add_argument("--data-path", choices=["auto", "resident", "loader"], help="train.data_path (default: the config's)")
    parser.add_argument("--floor-steps", type=int, default=30, help="floor steps after each epoch (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    parser.add_argument("--max-steps", type=int, help="time only the first N steps of each epoch")
    parser.add_argument("--threads", type=int, help="train.threads: torch threads (default: the thread policy's "
                        "choice, see itrlab.threads)")
    parser.add_argument("--busy", type=int, metavar="N", help="time epochs beside N busy processes against quiet "
                        "epochs, under the new thread policy and the old (see the module doc)")
    parser.add_argument("--repeats", type=int, default=3, help="--busy: quiet and busy epochs per policy (default 3)")
    parser.add_argument("--policy", choices=["both", "new", "old"], default="both",
                        help="--busy: which thread policies to time, each in its own process (default both)")
    parser.add_argument("--epoch-limit", type=float, default=60.0, help="--busy: stop an epoch after this many "
                        "seconds and count its time per step (default 60)")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # one policy's child process
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if args.precision:
        overrides.append(f"train.precision={args.precision}")
    if args.data_path:
        overrides.append(f"train.data_path={args.data_path}")
    if args.threads is not None:
        overrides.append(f"train.threads={args.threads}")
    if args.busy is not None and (args.busy < 0 or args.repeats < 1):
        parser.error("--busy must be >= 0 and --repeats >= 1")
    try:
        config = load_experiment(args.config, overrides)
        if args.busy is None:
            result = run_bench(config, epochs=args.epochs, floor_steps=args.floor_steps, warmup=args.warmup,
                               max_steps=args.max_steps)
        elif args.in_process:
            busy = run_busy_bench(config, args.busy, repeats=args.repeats, warmup=args.warmup,
                                  max_steps=args.max_steps, time_limit=args.epoch_limit,
                                  policy="as set" if args.policy == "both" else args.policy)
            if args.json:  # read by the benchmark that started this process, which prints the table
                args.json.write_text(json.dumps({**asdict(busy), "summary": busy.summary()}, indent=2))
            else:
                print(format_busy([busy], config, args.epoch_limit), flush=True)
            return 0
        else:
            child_argv = ["-c", args.config, "--busy", str(args.busy), "--repeats", str(args.repeats),
                          "--warmup", str(args.warmup), "--epoch-limit", str(args.epoch_limit),
                          *(["--max-steps", str(args.max_steps)] if args.max_steps else []), *overrides]
            policies = ["new", "old"] if args.policy == "both" else [args.policy]
            reports = []
            for policy in policies:
                print(f"bench_train --busy {args.busy}: timing the {policy} thread policy ...", flush=True)
                reports.append(_run_policy_child(policy, child_argv))
            print(format_busy(reports, config, args.epoch_limit), flush=True)
            if args.json:
                args.json.write_text(json.dumps([r.summary() for r in reports], indent=2))
            return 0
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        print("bench_train: interrupted", file=sys.stderr, flush=True)
        return 130
    except ChildFailed as err:
        print(f"bench_train: {err}", file=sys.stderr, flush=True)
        return 1
    print(result.format(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    record_throughput(config, result)
    return 0


def record_throughput(config, result: BenchReport) -> None:
    """The measured pairs per second, for the cost estimates of sweeps' dry runs (itrlab.train.throughput)."""
    from itrlab.data.shape import data_shape
    from itrlab.train.throughput import record, training_shape

    splits = config.dataset.splits
    shape = data_shape(config.dataset.root, (splits.train, splits.val, splits.test), config.dataset.captions_per_image)
    path = record(result.device, training_shape(config, shape.regions, shape.feature_dim),
                  result.median("pairs_per_second"))
    print(f"bench_train: recorded in {path} (what `jobs/sweep.py --dry-run` estimates costs from)", flush=True)
