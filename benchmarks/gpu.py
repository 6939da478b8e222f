"""The GPU check in one call (``make gpu-check``): everything the GPU targets need,
measured in at most 8 minutes on synthetic data of the papers' shape generated on the spot (no download,
no data set on the machine), written to a dated page and to the throughput record ``--dry-run`` reads.

Sections, each within its share of the time budget (a measurement stops early past its own limit and
says how many steps it timed; a section that fails is reported and the next one runs):

* **train**: the paper-dimension training of the plan's trials (VSE++, DBL's ``xattn`` alone and under OSS,
  CODER, AsCL), each in fp32 and bf16 (``common.py``: pairs/s, the device's busy share, epoch / floor, the floor
  measured in the same run); a method whose optional packages a bare GPU machine lacks runs without the parts
  that need them, as the plan's sizing says, and the page says so;
* **grouped**: the plan's trials at their group sizes (VSE++ at G = 1, 3, 9, 27, ...)
  (``group.py``: pairs/s per member, the ratio against one run at a time, busy share,
  peak memory);
* **eval**: the plan's evaluations (dense and token-level) of a 1,000-image test split (5,000 captions) at
  the default shard budget;
* **profiles**: 100 steps of each paper profile's full method (the last row of its grid: the papers'
  batch, encoders, embeddings and schemes; its stages and an OAS anchor are not trained first: the step is
  the same with random weights, and OAS is timed as MSS, the same frozen-anchor step).

Everything it writes goes under ``--out`` (at most 4 files): ``<date>-gpu-check.md`` (the page),
``gpu-check.json`` (every figure), ``throughput.jsonl`` (the records) and ``gpu-check.log``. Without
``--out`` the page goes to ``docs/results/`` and the records to the throughput record of this checkout.
``--device cpu --quick`` runs every section at small sizes in about a minute (the test suite runs it).
It imports nothing beyond torch, numpy, PyYAML, pydantic and itrlab (MLflow off; no Ray, no Optuna). What it
measures and on what is :data:`gpu_setup.PLAN`.

    python benchmarks/gpu.py                         # on a CUDA machine: docs/results/<date>-gpu-check.md
    python benchmarks/gpu.py --out /tmp/check        # everything under one folder
    python benchmarks/gpu.py --device cpu --quick    # every section at small sizes, about a minute
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import contextlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common import load_average
from gpu_setup import PLAN, Check, CheckPlan, guarded, missing_packages_notes, pct, preset_config
from itrlab.methods.registry import scheme_labels, with_fresh_branches

SHARES = {"train": 0.36, "grouped": 0.30, "eval": 0.10, "profiles": 0.24}  # of the budget after the set-up


@dataclass
class Budget:
    """The seconds left for the whole check and each section's share of them."""

    total: float
    started: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return self.total - (time.perf_counter() - self.started)

    def section(self, name: str, remaining: list[str]) -> float:
        share = SHARES[name] / sum(SHARES[n] for n in remaining)
        return max(5.0, self.left() * share)


def train_section(check: Check, seconds: float) -> None:
    from common import bench_trainer, floor_batches, time_epoch, time_floor
    from itrlab.train.throughput import training_shape

    methods = [(r.label, r.preset, r.row, r.extra) for r in check.plan.training]
    precisions = ["fp32", "bf16"] if check.device.type == "cuda" else ["fp32"]
    limit = seconds / (len(methods) * len(precisions))
    check.say(f"\n## Training at the papers' dimensions ({limit:.0f} s each)\n")
    check.say("| model | precision | batch | steps | pairs/s | busy | epoch / floor |")
    check.say("|---|---|---|---|---|---|---|")
    rows = []
    for name, preset, row, extra in methods:
        for precision in precisions:

            def measure():
                config = preset_config(check, preset, row, (*extra, f"train.precision={precision}"))
                with bench_trainer(config) as trainer:
                    batches = floor_batches(trainer, 4)
                    time_floor(trainer, batches, 2)  # warm-up: allocator, cuDNN, autotuning
                    epoch = time_epoch(trainer, 1, time_limit=limit * 0.6)
                    floor = time_floor(trainer, batches, max(3, min(20, epoch.steps)))
                    pairs = epoch.pairs_per_second
                    ratio = epoch.seconds / (floor * epoch.steps)
                    split = trainer.data.train
                    shape = training_shape(config, split.n_regions, split.feature_dim)
                    return {
                        "model": name,
                        "precision": precision,
                        "batch": config.train.batch_size,
                        "steps": epoch.steps,
                        "pairs_per_s": pairs,
                        "busy": epoch.busy,
                        "epoch_over_floor": ratio,
                        "shape": shape,
                    }

            result = guarded(check, f"{name} {precision}", measure)
            if result:
                rows.append(result)
                check.records.append((result["shape"], result["pairs_per_s"]))
                check.say(
                    f"| {name} | {precision} | {result['batch']} | {result['steps']} | "
                    f"{result['pairs_per_s']:,.0f} | {pct(result['busy'])} | {result['epoch_over_floor']:.2f}x |"
                )
    for note in missing_packages_notes(check):
        check.say(f"\n{note}.")
    check.results["train"] = rows


def grouped_section(check: Check, seconds: float) -> None:
    from group import time_group
    from itrlab.sweep.cost import group_shape
    from itrlab.train.throughput import training_shape

    plans = [(r.label, r.preset, r.row, quick if check.quick else full) for r, full, quick in check.plan.grouped]
    count = sum(len(sizes) for *_, sizes in plans)
    check.say(f"\n## Grouped training: G runs as one batched model ({seconds / count:.0f} s each)\n")
    check.say("| model | G | pairs/s per member | alone | ratio vs one at a time | busy | memory |")
    check.say("|---|---|---|---|---|---|---|")
    rows = []
    for name, preset, row, sizes in plans:
        solo = None
        for size in sizes:

            def measure():
                configs = [preset_config(check, preset, row, (f"seed={seed}",)) for seed in range(size)]
                steps = 3 if check.quick else 10
                return configs[0], time_group(
                    configs, steps, warmup=2, repeats=2, time_limit=seconds / count, solo=size == 1
                )

            measured = guarded(check, f"{name} G={size}", measure)
            if measured is None:
                continue
            config, timing = measured
            summary = timing.summary()
            if size == 1:
                solo = timing.member_pairs_solo
            ratio = size * timing.member_pairs_grouped / solo if solo else None
            shape = training_shape(config, 36, 2048)  # the paper-shaped data's regions
            check.records.append(
                (shape, timing.member_pairs_solo)
                if size == 1
                else (group_shape(shape, size), timing.member_pairs_grouped)
            )
            rows.append({"model": name, "group": size, **summary, "ratio_vs_alone": ratio})
            memory = summary["memory_grouped_gb"]
            check.say(
                f"| {name} | {size} | {timing.member_pairs_grouped:,.0f} | "
                f"{(f'{solo:,.0f}' if solo else '-')} | {(f'{ratio:.2f}x' if ratio else '-')} | "
                f"{pct(summary['busy_grouped'])} | {(f'{memory:.1f} GB' if memory else '-')} |"
            )
    check.results["grouped"] = rows


def eval_section(check: Check, seconds: float) -> None:
    from common import bench_trainer

    check.say(f"\n## Evaluation of the test split ({seconds / 2:.0f} s each)\n")
    check.say("| model | images x captions | seconds | shard budget |")
    check.say("|---|---|---|---|")
    rows = []
    for name, preset, row in ((r.label, r.preset, r.row) for r in check.plan.evaluation):

        def measure():
            config = preset_config(check, preset, row)
            with bench_trainer(config) as trainer:
                split = trainer.data.test
                trainer.evaluate(trainer.data.val, "all")  # warm-up
                started = time.perf_counter()
                trainer.evaluate(split, "all")
                if trainer.device.type == "cuda":
                    torch.cuda.synchronize(trainer.device)
                budget = getattr(trainer.method, "shard_elements", None)
                return {
                    "model": name,
                    "images": split.n_images,
                    "captions": split.n_images * split.captions_per_image,
                    "seconds": time.perf_counter() - started,
                    "shard_elements": str(budget),
                }

        result = guarded(check, name, measure)
        if result:
            rows.append(result)
            check.say(
                f"| {name} | {result['images']:,} x {result['captions']:,} | {result['seconds']:.2f} | "
                f"{result['shard_elements']} |"
            )
    check.results["eval"] = rows


def paper_recipes(check: Check) -> list[tuple[str, int, str]]:
    """One recipe per paper profile: each preset's full method (its grid's last row, first seed), as
    (preset, grid point, what it trains)."""
    from itrlab.config.loader import config_dir, read_yaml
    from itrlab.config.sweep import load_sweep

    recipes = []
    for path in sorted((config_dir() / "sweeps").glob("*.yaml")):
        if "paper" not in (read_yaml(path, "sweep").get("profiles") or {}):
            continue
        spec = load_sweep(path.stem, "paper")
        points = spec.grid_points()
        index = max(i for i, point in enumerate(points) if point.get("seed") == spec.seeds[0])
        config = preset_config(check, path.stem, index)
        scheme = "".join(f" {label}" for label in scheme_labels(config).values() if label != "none")
        recipes.append(
            (
                path.stem,
                index,
                f"{config.method.name} ({config.loss.name}{scheme}), "
                f"{config.model.text.encoder}, batch {config.train.batch_size}",
            )
        )
    return recipes


def profiles_section(check: Check, seconds: float) -> None:
    from common import bench_trainer, floor_batches, time_epoch, time_floor

    recipes = paper_recipes(check)
    if check.quick:
        recipes = recipes[:2]
    limit = seconds / max(1, len(recipes))
    steps = 3 if check.quick else 100
    check.say(
        f"\n## {steps} steps of each paper profile's full method ({len(recipes)} profiles, at most "
        f"{limit:.0f} s each)\n"
    )
    check.say("| preset | trains | steps | s/step | pairs/s |")
    check.say("|---|---|---|---|---|")
    rows = []
    for preset, index, recipe in recipes:

        def measure():
            config = preset_config(check, preset, index)
            config = with_fresh_branches(config)  # no anchor trained first
            with bench_trainer(config) as trainer:
                time_floor(trainer, floor_batches(trainer, 2), 1)
                epoch = time_epoch(trainer, 1, max_steps=steps, time_limit=limit * 0.8)
                return {
                    "preset": preset,
                    "recipe": recipe,
                    "steps": epoch.steps,
                    "seconds_per_step": epoch.seconds / max(1, epoch.steps),
                    "pairs_per_s": epoch.pairs_per_second,
                }

        result = guarded(check, f"{preset} {recipe}", measure)
        if result:
            rows.append(result)
            check.say(
                f"| {preset} | {recipe} | {result['steps']} | {result['seconds_per_step']:.3f} | "
                f"{result['pairs_per_s']:,.0f} |"
            )
    check.results["profiles"] = rows


SECTIONS = {"train": train_section, "grouped": grouped_section, "eval": eval_section, "profiles": profiles_section}


# ---------------------------------------------------------------------- the check


def run_check(
    plan: CheckPlan,
    device: torch.device,
    out: Path | None,
    quick: bool = False,
    budget: float = 450.0,
    sections: list[str] | None = None,
) -> Path:
    """Run the sections within ``budget`` seconds; returns the page. The page, the figures and the
    records are written after every section: a check stopped midway leaves what it measured."""
    from itrlab.config.checks import synthetic_spec_of
    from itrlab.data import generate_synthetic
    from itrlab.train.device import device_label

    clock = Budget(budget)
    date = time.strftime("%Y-%m-%d")
    page_dir = out or Path("docs/results")
    page_dir.mkdir(parents=True, exist_ok=True)
    page = page_dir / f"{date}-gpu-check.md"
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        check = Check(device, quick, Path(tmp) / "paper_shape", out, plan)
        check.say(f"# GPU check, {date}\n")
        sizes = "quick (small sizes)" if quick else "the papers' dimensions"
        check.say(
            f"Device: {device_label(device)}; torch {torch.__version__}; {sizes}; budget {budget:.0f} s. "
            f"Data: synthetic, of the papers' shape (36 x 2048 regions, captions of Flickr30K's length), "
            f"generated here. Written by `benchmarks/gpu.py`."
        )
        generate_synthetic(check.root, synthetic_spec_of(preset_config(check, plan.data.preset, plan.data.row)))
        names, before = sections or list(SECTIONS), load_average()
        written = 0
        for i, name in enumerate(names):
            seconds = clock.section(name, names[i:])
            started = time.perf_counter()
            guarded(check, name, lambda: SECTIONS[name](check, seconds))
            check.results.setdefault("seconds", {})[name] = time.perf_counter() - started
            written = _write(check, page, date, written)
        check.say(
            f"\nTook {time.perf_counter() - clock.started:.0f} s; 1-min load average {before:.2f} before, "
            f"{load_average():.2f} after. Busy: the GPU's utilisation sampled by NVML (or nvidia-smi) while timed; "
            f"on a CPU, process CPU time over wall time x threads."
        )
        _write(check, page, date, written)
    print(f"bench_gpu: wrote {page} and {len(check.records)} throughput records")
    return page


def _write(check: Check, page: Path, date: str, written: int) -> int:
    """The page and (with --out) the figures as they stand; the throughput records not written yet."""
    from itrlab.train.device import device_label
    from itrlab.train.throughput import record, throughput_file

    page.write_text("\n".join(check.lines) + "\n", encoding="utf-8")
    out = check.out
    if out:
        (out / "gpu-check.json").write_text(
            json.dumps(
                {"device": device_label(check.device), "date": date, "quick": check.quick, **check.results},
                indent=2,
                default=str,
            )
        )
    for shape, pairs in check.records[written:]:
        record(device_label(check.device), shape, pairs, (out / "throughput.jsonl") if out else throughput_file())
    return len(check.records)


def main(argv: list[str] | None = None, plan: CheckPlan = PLAN) -> int:
    """``benchmarks/gpu.py [--out DIR] [--device cuda|cpu] [--quick] [--budget S] [--sections a,b]``, measuring
    what ``plan`` names."""
    import argparse

    from itrlab.errors import ItrlabError, report
    from itrlab.train.device import resolve_device

    parser = argparse.ArgumentParser(
        description="The GPU check: training, grouped training, evaluation and the "
        "paper recipes, timed within a budget on synthetic paper-shaped data."
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="write the page, figures, throughput records and log here "
        "(default: the page to docs/results/, the records to the throughput record)",
    )
    parser.add_argument("--device", default="auto", help="auto (the first CUDA GPU), cuda, cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes: every section in about a minute (CPU)")
    parser.add_argument("--budget", type=float, help="seconds for the whole check (default 450; --quick 60)")
    parser.add_argument("--sections", help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    args = parser.parse_args(argv)
    sections = args.sections.split(",") if args.sections else None
    if sections and set(sections) - set(SECTIONS):
        parser.error(
            f"--sections: {', '.join(sorted(set(sections) - set(SECTIONS)))} unknown; of {', '.join(SECTIONS)}"
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "gpu-check.log").open("w", encoding="utf-8") if args.out else None
    try:
        with contextlib.ExitStack() as stack:
            if log is not None:
                stack.enter_context(_tee(log))
            device = resolve_device(args.device)
            run_check(plan, device, args.out, args.quick, args.budget or (60.0 if args.quick else 450.0), sections)
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        print("bench_gpu: interrupted", file=sys.stderr)
        return 130
    finally:
        if log is not None:
            log.close()
    return 0


@contextlib.contextmanager
def _tee(log):
    """stdout and stderr also into ``log``."""

    class Tee:
        def __init__(self, stream):
            self.stream = stream

        def write(self, text):
            log.write(text)
            return self.stream.write(text)

        def flush(self):
            log.flush()
            self.stream.flush()

        def __getattr__(self, name):
            return getattr(self.stream, name)

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Tee(out), Tee(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


if __name__ == "__main__":
    sys.exit(main())
