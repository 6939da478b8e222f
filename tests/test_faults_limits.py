"""Limits before parsing and checks before anything is created: hostile sweep and
config input (an alias bomb, a 50 MB file, a 10⁶-point grid, 10⁶ seeds, 5,000-level nesting, a 5,000-character
or control-character experiment name, a --storage beyond PATH_MAX) and bad data content (an empty caption line,
invalid UTF-8, NaN or inf features) each end in one line and exit status 2 within seconds, before an MLflow
store, a run folder or a sweep folder exists, and before Ray starts."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
import yaml

from conftest import write_precomp
from itrlab.cli import main


@pytest.fixture(scope="module", autouse=True)
def imported():
    """What a sweep and a training import, loaded once: the limits below time the refusal, not the imports
    (a minute on a loaded 2-core machine)."""
    import itrlab.sweep.runner  # noqa: F401
    import itrlab.train  # noqa: F401


def sweep_file(path, **fields) -> str:
    spec = {
        "name": "limits",
        "experiment": "dbl_synthetic_tiny",
        "grid": {"cooperative.strategy": ["A", "F"]},
        "seeds": [0],
        **fields,
    }
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def refused(capsys, argv, fragment: str, workdir, limit_s: float = 30.0) -> str:
    """``itrlab argv``: exit status 2 within ``limit_s``, one line on stderr holding ``fragment``, nothing created."""
    started = time.monotonic()
    code = main(argv)
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, out[-2000:] + err[-2000:]
    assert len(lines) == 1 and fragment in lines[0], err[-3000:]
    assert len(lines[0]) < 1200, len(lines[0])
    assert seconds < limit_s, seconds
    assert (
        not (workdir / "mlflow.db").exists() and not (workdir / "sweeps").exists() and not (workdir / "runs").exists()
    )
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    return lines[0]


ALIAS_BOMB = """name: bomb
experiment: dbl_synthetic_tiny
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
grid: {cooperative.strategy: *h}
"""


def test_a_yaml_alias_bomb_is_refused_before_it_expands(workdir, capsys):
    (workdir / "bomb.yaml").write_text(ALIAS_BOMB)  # 9^8 = 43 million values once expanded
    refused(
        capsys,
        ["sweep", "--sweep", str(workdir / "bomb.yaml"), "--storage", str(workdir / "sweeps")],
        "values once its aliases are expanded",
        workdir,
    )


def test_a_50_mb_sweep_file_is_refused_unread(workdir, capsys):
    path = workdir / "huge.yaml"
    sweep_file(path)
    with open(path, "a") as out:
        out.write("description: '" + "x" * (50 << 20) + "'\n")
    refused(
        capsys,
        ["sweep", "--sweep", str(path), "--storage", str(workdir / "sweeps")],
        "a config or sweep file may hold",
        workdir,
    )


@pytest.mark.parametrize(
    "fields, fragment",
    [
        (
            {"grid": {"train.lr": [i * 1e-6 for i in range(1, 1001)], "train.margin": list(range(1000))}},
            "1,000,000 trials",
        ),
        ({"seeds": list(range(20_000))}, "40,000 trials"),
    ],
    ids=["10^6-point grid", "20,000 seeds"],
)
def test_a_huge_grid_or_seed_list_is_refused_before_its_points_are_listed(workdir, capsys, fields, fragment):
    path = sweep_file(workdir / "grid.yaml", **fields)
    refused(capsys, ["sweep", "--sweep", path, "--storage", str(workdir / "sweeps")], fragment, workdir)


def test_a_million_seeds_are_refused_by_the_file_size(workdir, capsys):
    path = workdir / "seeds.yaml"
    # written as YAML by hand: yaml.safe_dump takes about 20 s over a million numbers
    path.write_text(
        "name: seeds\nexperiment: dbl_synthetic_tiny\ngrid: {cooperative.strategy: [A]}\n"
        f"seeds: [{', '.join(map(str, range(1_000_000)))}]\n"
    )
    refused(
        capsys,
        ["sweep", "--sweep", str(path), "--storage", str(workdir / "sweeps")],
        "a config or sweep file may hold",
        workdir,
    )


def test_5000_levels_of_nesting_are_one_line(workdir, capsys):
    nested = "[" * 5000 + "]" * 5000
    refused(
        capsys,
        ["train", "-c", "vsepp_synthetic_tiny", f"train.lr_decay_epochs={nested}", f"dataset.root={workdir / 'data'}"],
        "nesting deeper than 64 levels",
        workdir,
    )


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("x" * 5000, "printable text of 1-500 characters"),
        ("evil\x1b[2Jname", "printable text"),
        ("run\u202egnp.exe", "printable text"),
    ],
    ids=["5000 characters", "a control character", "U+202E"],
)
def test_an_experiment_name_mlflow_would_refuse_or_garble_is_one_line(workdir, capsys, name, fragment):
    line = refused(
        capsys,
        ["train", "-c", "vsepp_synthetic_tiny", f"tracking.experiment={name}", f"dataset.root={workdir / 'data'}"],
        fragment,
        workdir,
    )
    assert "tracking.experiment" in line and "\x1b" not in line and "\u202e" not in line


def test_a_grid_label_that_cannot_name_a_run_is_refused(workdir, capsys):
    path = sweep_file(workdir / "labels.yaml", grid={"variant": [{"name": "ok"}, {"name": "bad\u202ename"}]})
    refused(
        capsys, ["sweep", "--sweep", path, "--storage", str(workdir / "sweeps")], "printable text of 1-100", workdir
    )


def test_a_storage_path_beyond_path_max_is_one_line(workdir, capsys):
    storage = workdir / ("d" * 200) / ("e" * 200)
    storage = storage.joinpath(*(["f" * 250] * 20))
    sweep = sweep_file(workdir / "ok.yaml")
    refused(capsys, ["sweep", "--sweep", sweep, "--storage", str(storage)], "paths may hold 4,095 bytes", workdir)


def nan_features(root):
    features = np.load(root / "train_ims.npy")
    features[3, 1, 2] = np.nan
    np.save(root / "train_ims.npy", features)


def inf_test_features(root):
    features = np.load(root / "test_ims.npy")
    features[0, 0, 0] = np.inf
    np.save(root / "test_ims.npy", features)


def empty_caption(root):
    lines = (root / "dev_caps.txt").read_text().splitlines()
    lines[7] = "   "
    (root / "dev_caps.txt").write_text("\n".join(lines) + "\n")


def invalid_utf8(root):
    (root / "train_caps.txt").write_bytes((root / "train_caps.txt").read_bytes().replace(b"dog", b"d\xffg", 1))


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (nan_features, "NaN or infinite features"),
        (inf_test_features, "NaN or infinite features"),
        (empty_caption, "empty caption line"),
        (invalid_utf8, "invalid UTF-8"),
    ],
    ids=["NaN features", "inf test features", "an empty caption line", "invalid UTF-8"],
)
def test_bad_data_content_is_refused_before_mlflow_or_the_run_folder(workdir, capsys, damage, fragment):
    root = write_precomp(workdir / "precomp", {"train": 40, "dev": 10, "test": 10})
    damage(root)
    data = ["dataset.kind=precomp", f"dataset.root={root}", "train.batch_size=16"]
    refused(capsys, ["train", "-c", "vsepp_synthetic_tiny", *data, f"output.dir={workdir / 'runs'}"], fragment, workdir)
    sweep = sweep_file(workdir / "data.yaml", overrides=data)
    refused(capsys, ["sweep", "--sweep", sweep, "--storage", str(workdir / "sweeps")], fragment, workdir)
