"""The GPU check (``benchmarks/gpu.py``) on a CPU at small sizes, what it imports, and the cost that a dry
run prints before launch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import BENCHMARKS, REPO, SHARED
from test_profiles import dry_run

BUNDLER = SHARED / "tools" / "gpu_bundle.py"
CHECK = """
import json, runpy, sys
sys.argv = ["gpu.py", *sys.argv[2:]]
sys.path.insert(0, __import__("os").path.dirname({job!r}))  # as `python JOB` does
try:
    runpy.run_path({job!r}, run_name="__main__")
except SystemExit as done:
    code = done.code
out = sys.argv[sys.argv.index("--out") + 1]
json.dump({{"code": code, "modules": sorted(sys.modules)}}, open(out + "/modules.json", "w"))
"""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(wanted: list[str]) -> set[str]:
    """The distributions that ``wanted`` requirements (``ray[default,tune,train]==2.60.0``) bring, with the
    extras they name, as installed here."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(w) for w in wanted]
    while todo:
        req = todo.pop()
        key = (_normal(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(sub)
    return {name for name, _ in seen}


@pytest.mark.e2e
def test_the_gpu_check_runs_on_a_cpu_and_imports_only_what_a_gpu_machine_has(tmp_path):
    """``--device cpu --quick``: every section at small sizes; the page, the figures, the throughput records
    and the log under ``--out``; and every module it imported comes from a distribution the GPU machine has
    or the bundle brings (benchmarks/gpu.py must run there with ``source .gpu/gpu_env.sh``)."""
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "platform"),
        "ITRLAB_CONFIG_DIR": str(REPO / "configs"),
        "HOME": str(tmp_path),
        "OMP_NUM_THREADS": "1",
    }
    script = CHECK.format(job=str(BENCHMARKS / "gpu.py"))
    # a 20 s budget: each section at its floor (one measurement of each), about 40 s on 2 cores, not 55
    done = subprocess.run(
        [sys.executable, "-c", script, "x", "--device", "cpu", "--quick", "--budget", "20", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=tmp_path,
        env=env,
    )
    result = json.loads((out / "modules.json").read_text())
    assert result["code"] in (0, None), done.stderr[-3000:]
    page = next(out.glob("*-gpu-check.md")).read_text()
    for heading in ("## Training", "## Grouped training", "## Evaluation", "of each paper profile"):
        assert heading in page, page
    assert "failed" not in page, page
    figures = json.loads((out / "gpu-check.json").read_text())
    assert {row["model"] for row in figures["train"]} == {"VSE++", "xattn", "xattn OSS F", "CODER", "AsCL"}
    assert {(row["model"], row["group"]) for row in figures["grouped"]} >= {("VSE++", 1), ("VSE++", 3)}
    records = [json.loads(line) for line in (out / "throughput.jsonl").read_text().splitlines()]
    assert any(r["shape"].endswith("group3") for r in records) and all(r["pairs_per_second"] > 0 for r in records)
    assert (out / "gpu-check.log").stat().st_size > 0
    assert len(list(out.iterdir())) <= 8

    if not BUNDLER.is_file():
        pytest.skip(f"{BUNDLER} is not here: the GPU machine's package list is unknown")
    text = BUNDLER.read_text()
    present = set(re.search(r'PRESENT = set\("""(.*?)"""', text, re.S).group(1).split())
    wanted = re.findall(r'"([^"]+)"', re.search(r"^WANTED = \[(.*)\]$", text, re.M).group(1))
    assert any(w.startswith("ray") for w in wanted), wanted
    available = {_normal(name) for name in present} | _distributions(wanted)
    owners = metadata.packages_distributions()
    loaded = {module.split(".")[0] for module in result["modules"]}
    lacking = {}
    for top in sorted(_imported_by_ours(result["modules"]) & loaded):  # what itrlab's and the check's code imported
        if top in sys.stdlib_module_names or top.startswith("_") or top == "itrlab":
            continue
        dists = {_normal(dist) for dist in owners.get(top, [])}
        if dists and not dists & available:  # a module that one of its distributions brings is there
            lacking[top] = sorted(dists)
    assert not lacking, f"bench_gpu imports what a GPU machine (or the bundle) lacks: {lacking}"


def _imported_by_ours(modules: list[str]) -> set[str]:
    """The top-level packages that the loaded itrlab modules and the check's own files (``benchmarks/gpu.py`` and
    the benchmark modules it loaded) import themselves (at module level or in a function): third-party packages'
    own optional imports of what happens to be installed here are theirs."""
    import ast
    import importlib.util

    ours = {p.stem for p in BENCHMARKS.glob("*.py")}
    sources = [BENCHMARKS / "gpu.py"]
    for module in modules:
        if module.startswith("itrlab"):
            spec = importlib.util.find_spec(module)
            if spec is not None and str(spec.origin).endswith(".py"):
                sources.append(Path(spec.origin))
        elif module in ours:
            sources.append(BENCHMARKS / f"{module}.py")
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.e2e  # two dry runs in subprocesses, each counting the FLOPs of two paper-sized steps
def test_a_dry_run_estimates_the_gpu_hours_of_a_paper_table_at_g_1_and_at_its_group(tmp_path):
    """On a machine that never measured it: an estimated wall time and GPU-hours for one H100-class GPU, at
    G = 1 and at the chosen G = 3, from the FLOPs of one step; a measurement then replaces it. (The paper
    profile does not group: xattn under OSS did not fit three to an 80 GB H100; a larger GPU may.)"""
    done = dry_run(
        tmp_path,
        "--preset",
        "dbl-table4",
        "--profile",
        "paper",
        "--group",
        "3",
        "--dry-run",
        "dataset.root=/data/f30k_precomp",
    )
    assert done.returncode == 0, done.stderr
    lines = {int(m.group(1)): line for line in done.stdout.splitlines() if (m := re.match(r"\s+G = (\d+) \(", line))}
    assert set(lines) == {1, 3}, done.stdout
    hours = {}
    for size, line in lines.items():
        found = re.search(r"about ([0-9.]+) h of wall time, ([0-9.]+) GPU-hours; estimated, not measured", line)
        assert found and "H100-class" in line, line
        hours[size] = float(found.group(1))
    assert 0 < hours[3] < hours[1]  # three members per step share the launches
    assert "9 Ray trial(s)" in done.stdout and "A seed 0, A seed 1, A seed 2" in done.stdout

    from itrlab.train.throughput import record

    shapes = {
        "xattn 36x2048 embed1024 bigru300 batch128 fp32": 400.0,
        "xattn 36x2048 embed1024 bigru300 batch128 fp32 oss x2": 200.0,
    }
    for shape, pairs in shapes.items():  # measured on an H100 (made up here): G = 1 is measured now
        record("cuda:0 (NVIDIA H100 80GB HBM3)", shape, pairs, tmp_path / "throughput.jsonl")
    again = dry_run(
        tmp_path,
        "--preset",
        "dbl-table4",
        "--profile",
        "paper",
        "--group",
        "3",
        "--dry-run",
        "dataset.root=/data/f30k_precomp",
    )
    one = next(line for line in again.stdout.splitlines() if line.strip().startswith("G = 1"))
    # row A: 3 trials x 40 epochs x 145,000 pairs at 400 pairs/s; rows B-I: 24 trials at 200 pairs/s
    expected = (3 * 40 * 145_000 / 400 + 24 * 40 * 145_000 / 200) / 3600
    assert "measured on cuda:0 (NVIDIA H100 80GB HBM3)" in one and "estimated" not in one, one
    assert f"about {expected:.2f} h of wall time, {expected:.2f} GPU-hours" in one, one


def test_the_grouped_step_counts_more_work_but_one_set_of_launches():
    from itrlab.assembly import load_experiment
    from itrlab.sweep.cost import NOMINAL
    from itrlab.train.flops import count_step

    config = load_experiment("vsepp_synthetic_small", ["model.embed_dim=1024", "model.text.word_dim=300"])
    counted = count_step(config, 36, 2048, 14)
    # the region FC alone: forward 2·B·R·D·E and its weight gradient as much again (regions need none)
    assert counted.flops > 4 * 128 * 36 * 2048 * 1024 and counted.ops > 100
    gpu = NOMINAL["cuda"]
    one, three = (gpu.step_seconds(counted.flops, counted.ops, "fp32", g) for g in (1, 3))
    assert three < 3 * one and three >= one


@pytest.mark.parametrize(
    "experiment, device",
    [("vsepp_synthetic_small", "meta"), ("coder_synthetic_tiny", "meta"), ("ascl_synthetic_tiny", "cpu")],
)
def test_the_step_counter_gives_flop_counter_modes_flops_and_every_operator(experiment, device):
    """itrlab's one dispatch mode against torch's ``FlopCounterMode`` and a plain operator counter stacked
    (what it replaced), on one training step: the same FLOPs and operators, on the meta device and, for a
    method that reads values (AsCL's generators), on the CPU."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from itrlab.assembly import load_experiment
    from itrlab.methods import build_method
    from itrlab.methods.registry import with_fresh_branches
    from itrlab.models.batched import make_batchable
    from itrlab.train import flops

    class Operators(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    config = with_fresh_branches(load_experiment(experiment, ["train.batch_size=8"]))

    def step(*modes) -> None:
        """One training step at batch 8 under ``modes`` (entered in order: the last sees each operator first)."""
        with (
            torch.random.fork_rng(),
            torch.device(device),
            torch.inference_mode(False),
            contextlib.ExitStack() as stack,
        ):
            torch.manual_seed(0)
            method = build_method(config, vocab_size=flops.COUNT_VOCAB, feature_dim=16)
            method = (make_batchable(method) if device == "meta" else method).train()
            for mode in modes:
                stack.enter_context(mode)
            method(flops._batch(config, 8, 4, 16, 5)).loss.backward()

    reference, operators, counted = FlopCounterMode(display=False), Operators(), flops._StepCounter()
    step(reference, operators)
    step(counted)
    assert reference.get_total_flops() > 0 and operators.count > 50
    assert (counted.flops, counted.ops) == (reference.get_total_flops(), operators.count)


def test_counted_steps_are_kept_beside_the_throughput_record_or_where_asked(tmp_path, monkeypatch):
    """``step_counts.json`` beside the throughput record; ``$ITRLAB_STEP_COUNTS`` elsewhere. A count is read
    back, and two processes' counts in one file both stay (each merges the file before it writes)."""
    from itrlab.assembly import load_experiment
    from itrlab.train import flops

    monkeypatch.delenv(flops.CACHE_ENV, raising=False)
    monkeypatch.setenv("ITRLAB_THROUGHPUT", str(tmp_path / "bench" / "throughput.jsonl"))
    assert flops.step_counts_file() == tmp_path / "bench" / "step_counts.json"
    cache = tmp_path / "shared.json"
    monkeypatch.setenv(flops.CACHE_ENV, str(cache))
    assert flops.step_counts_file() == cache
    cache.write_text(json.dumps({"counted-elsewhere": [1.0, 2]}))
    monkeypatch.setattr(flops, "_COUNTED", {})
    config = load_experiment("vsepp_synthetic_small", [])
    counted = flops.count_step(config, 4, 16, 5)
    kept = json.loads(cache.read_text())
    assert kept["counted-elsewhere"] == [1.0, 2] and [counted.flops, counted.ops] in kept.values()
    monkeypatch.setattr(flops, "_COUNTED", {})
    monkeypatch.setattr(flops, "_count", lambda *args: pytest.fail("counted again"))
    assert flops.count_step(config, 4, 16, 5) == counted
