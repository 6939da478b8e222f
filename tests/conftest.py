"""Shared fixtures: the repository's configs, tiny precomp folders, and helpers to run the CLI; the test
tiers' run-time guard and their order under pytest-xdist (docs/tests.md#tiers)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from itrlab import console_log, threads

# Before any test imports torch (itrlab.threads): OpenMP's threads sleep when they wait, and the
# pytest-xdist workers, which share the machine, each take their share of its CPUs as torch threads.
threads.configure_env()
os.environ.setdefault("OMP_NUM_THREADS", str(threads.cpu_share(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))))

# The library logs; the tests read what a command shows, so their process has the command line's console
# (itrlab.console_log): INFO records as lines on stdout, warnings on stderr (tests/test_console_log.py
# checks an embedding without it in a process of its own)
console_log.configure()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# a job loaded as a module finds what it imports first (jobs/_bootstrap.py), as `python jobs/NAME.py` does
sys.path.insert(0, str(REPO / "jobs"))
BENCHMARKS = REPO / "benchmarks"


@pytest.fixture(autouse=True, scope="session")
def _shared_step_counts(tmp_path_factory):
    """One cache of counted training steps (itrlab.train.flops) for the whole run, both xdist workers and
    the commands the tests start: each paper recipe's step is counted once (about a second each), not once
    per test that lists presets or dry-runs one."""
    base = tmp_path_factory.getbasetemp()
    os.environ["ITRLAB_STEP_COUNTS"] = str(
        (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "step_counts.json"
    )
    yield


@pytest.fixture(autouse=True, scope="session")
def _repo_configs():
    """Tests read the repository's configs wherever they run from."""
    previous = os.environ.get("ITRLAB_CONFIG_DIR")
    os.environ["ITRLAB_CONFIG_DIR"] = str(REPO / "configs")
    yield
    if previous is None:
        os.environ.pop("ITRLAB_CONFIG_DIR", None)
    else:
        os.environ["ITRLAB_CONFIG_DIR"] = previous


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``):
    tiny models gain nothing from a second thread, and on a busy 2-core machine two OpenMP threads
    spin-wait on each other (measured: a small run took 2.9 s with one thread, 58 s with two)."""
    import torch

    previous, previous_env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # what run_experiment's thread policy then keeps (itrlab.threads)
    yield
    torch.set_num_threads(previous)
    if previous_env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = previous_env


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A test's own working folder with its own SQLite MLflow store (``mlflow.db`` there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture(scope="session")
def small_bert_dir(tmp_path_factory) -> Path:
    """A local model directory: the packaged MiniLM cut to its first layer (fast, and it exercises
    ``model.text.bert_path`` and ``--text-model``)."""
    from itrlab.data.tokenizers import PretrainedTokenizer
    from itrlab.models.bert_text import load_pretrained_model

    path = tmp_path_factory.mktemp("bert1")
    model = load_pretrained_model(None)
    model.encoder.layer = model.encoder.layer[:1]
    model.config.num_hidden_layers = 1
    model.save_pretrained(path)
    PretrainedTokenizer().hf_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    """Where a module's runs generate (once) and share the tiny synthetic dataset."""
    return tmp_path_factory.mktemp("data") / "tiny"


def ascl_stored_config(root: Path, *overrides: str):
    """AsCL on the tiny stored-state data under ``root`` (features and MiniLM-shaped token states, F30K's layout),
    D = 16, MLflow off, with ``overrides``."""
    from itrlab.assembly import load_experiment

    return load_experiment(
        "ascl_synthetic_tiny",
        [
            "defaults.dataset=f30k_precomp",
            f"dataset.root={root}",
            "tracking.enabled=false",
            "model.embed_dim=16",
            "model.text.encoder=precomp",
            *overrides,
        ],
    )


def tiny_config(root: Path, *overrides: str):
    """VSE++ on the tiny synthetic data under ``root``, MLflow off, with ``overrides``."""
    from itrlab.assembly import load_experiment

    return load_experiment("vsepp_synthetic_tiny", [f"dataset.root={root}", "tracking.enabled=false", *overrides])


def write_precomp(
    root: Path, sizes: dict[str, int], regions: int = 4, dim: int = 8, cpi: int = 5, seed: int = 0
) -> Path:
    """A small, valid folder in the SCAN precomp layout with random features and simple captions."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    words = ["dog", "cat", "car", "tree", "red", "blue", "man", "park"]
    for split, n in sizes.items():
        np.save(root / f"{split}_ims.npy", rng.standard_normal((n, regions, dim)).astype(np.float32))
        lines = [" ".join(rng.choice(words, size=4)) for _ in range(n * cpi)]
        (root / f"{split}_caps.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def write_text_features(root: Path, width: int = 384, seed: int = 0) -> Path:
    """Random stored text features of every split of the precomp folder ``root`` (``root/text``), in itrlab's
    layout with the captions' digests: what ``model.text.encoder=precomp`` checks and reads, without running
    a text model (a caption of n words gets n + 2 states)."""
    from itrlab.data import text_features as tf
    from itrlab.data.precomp import read_captions

    rng = np.random.default_rng(seed)
    folder = root / tf.DEFAULT_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    splits = {}
    for path in sorted(root.glob("*_caps.txt")):
        split = path.name[: -len("_caps.txt")]
        captions = read_captions(root, split)
        lengths = np.array([len(c.split()) + 2 for c in captions], dtype=np.int32)
        np.save(tf.tokens_path(folder, split), rng.standard_normal((int(lengths.sum()), width)).astype(np.float16))
        np.save(tf.lengths_path(folder, split), lengths)
        splits[split] = {
            "captions": len(captions),
            "captions_sha256": tf.captions_digest(captions),
            "tokens": int(lengths.sum()),
            "arrays_sha256": tf.array_digests(folder, split),
        }
    manifest = {
        "format": tf.FORMAT,
        "version": tf.FORMAT_VERSION,
        "model": {"name": "random"},
        "hidden_size": width,
        "kinds": ["tokens"],
        "splits": splits,
    }
    (folder / tf.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def precomp_dir(tmp_path: Path) -> Path:
    return write_precomp(tmp_path / "precomp", {"train": 40, "dev": 10, "test": 10})


def interrupt_after_shards(monkeypatch, n: int):
    """Make the extraction job raise KeyboardInterrupt (Ctrl-C) when it would write its ``n+1``-th shard.

    Returns (the names of the shards written, a function that makes the job write normally again)."""
    from itrlab.extract import job

    written: list[str] = []
    real_write = job.write_shard

    def interrupting(work_dir, chunk, result):
        if len(written) == n:
            raise KeyboardInterrupt
        real_write(work_dir, chunk, result)
        written.append(chunk.name)

    monkeypatch.setattr(job, "write_shard", interrupting)
    return written, lambda: monkeypatch.setattr(job, "write_shard", real_write)


def refused_setting(build, *args, **kwargs) -> str:
    """The setting a typed constructor (a loss's, through ``validate_call``) refused, as its error names it:
    pydantic's location, or a SettingError's ``setting``. Fails when ``build`` accepts the call."""
    from pydantic import ValidationError

    from itrlab.errors import SettingError

    try:
        build(*args, **kwargs)
    except ValidationError as err:
        return ".".join(str(part) for part in err.errors()[0]["loc"])
    except SettingError as err:
        return err.setting
    raise AssertionError(f"{build} accepted {args} {kwargs}")


def job_module(name: str):
    """``jobs/<name>.py`` as a module (its ``__main__`` block not run): an entry point's own settings."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"itrlab_job_{name}", REPO / "jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmark(name: str):
    """``benchmarks/<name>.py`` as a module (its ``__main__`` block not run), its folder last on ``sys.path`` so that
    it finds the modules the benchmarks share (common.py ...), as ``python benchmarks/NAME.py`` does; loaded by path
    under its own name (``benchmarks/train.py`` is not ``jobs/train.py``)."""
    import importlib.util

    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"itrlab_benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def sweep_dbl_cli(argv=None) -> int:
    """``jobs/sweep_dbl.py`` with ``argv``: the generic sweep command with the DBL job's default preset and flags."""
    from itrlab.cli import sweep_cli

    job = job_module("sweep_dbl")
    return sweep_cli(argv, default_preset=job.DEFAULT_PRESET, preset_flags=job.PRESET_FLAGS)


# -- tiers ----------------------------------------------------------------------------------------
# A test that starts a process carries `e2e` or `cluster` (tests/test_tiers.py checks the source); this
# guard catches at run time what the source does not show: itrlab code that an unmarked test calls and
# that starts Ray (its binaries live in the virtual environment), a Python process or a server.

PROCESS_TIERS = ("e2e", "cluster")
TIER_ORDER = ("cluster", "e2e", "slow")  # the longest modules first, so that they overlap the rest
EXTERNAL_TOOLS = {
    "kubectl",
    "chromium",
    "chromium-browser",
    "initdb",
    "pg_ctl",
    "postgres",
    "setpriv",
    "mount",
    "umount",
    "ss",
}
STATIC_TOOLS = {"ruff"}  # reads the source, starts nothing: the fast tier's lint (tests/lint_tools.py)
UNGUARDED_POPEN_INIT = subprocess.Popen.__init__
_PREFIXES = tuple({os.path.abspath(sys.prefix) + os.sep, os.path.realpath(sys.prefix) + os.sep})


def starts_a_job(program: str | os.PathLike | bytes) -> bool:
    """Whether running ``program`` starts what only the process tiers may: Python (a training, a CLI job),
    a program of the virtual environment (itrlab, mlflow, ray, moto_server, checkov, hadolint, Ray's own
    binaries), or the external tools the tests use. Library helpers such as ``git`` pass, and the
    static tools (``ruff``)."""
    path = os.fsdecode(program)
    if os.path.basename(path) in STATIC_TOOLS:
        return False
    if os.sep not in path:
        path = shutil.which(path) or path
    if path.startswith(_PREFIXES) or os.path.realpath(path).startswith(_PREFIXES):
        return True
    if os.path.realpath(path) == os.path.realpath(sys.executable):
        return True
    name = os.path.basename(path)
    return name.startswith("python") or name in EXTERNAL_TOOLS


def _refusing_popen(nodeid: str):
    def init(self, args, *rest, **kwargs):
        program = kwargs.get("executable") or (args if isinstance(args, (str, bytes, os.PathLike)) else args[0])
        if kwargs.get("shell"):  # the first word of the command line
            program = os.fsdecode(args if isinstance(args, (str, bytes)) else args[0]).split()[0]
        if starts_a_job(program):
            pytest.fail(
                f"{nodeid} starts {os.fsdecode(program)} without @pytest.mark.e2e (or cluster): "
                "mark it, or it runs in the fast tier",
                pytrace=False,
            )
        UNGUARDED_POPEN_INIT(self, args, *rest, **kwargs)

    return init


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


def _guarded(item):
    if any(item.get_closest_marker(name) for name in PROCESS_TIERS):
        return (yield)
    subprocess.Popen.__init__ = _refusing_popen(item.nodeid)
    try:
        return (yield)
    finally:
        subprocess.Popen.__init__ = UNGUARDED_POPEN_INIT


def pytest_collection_modifyitems(items):
    """Modules in tier order (cluster, e2e, slow, then the fast ones), each kept whole and in its own order:
    with ``--dist loadfile --no-loadscope-reorder`` the longest start first."""

    def rank(item) -> int:
        return min((i for i, name in enumerate(TIER_ORDER) if item.get_closest_marker(name)), default=len(TIER_ORDER))

    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(modules, key=lambda module: min(rank(item) for item in modules[module]))
    items[:] = [item for module in order for item in modules[module]]
