"""No file under ``platform/itrlab`` outside ``methods/<paper>/`` names a paper's experiment, sweep or table:
code, docstrings and comments alike. A paper's name in code is
``tests/test_architecture.py``'s check (a docstring may credit a paper's equation; a config name credits
nothing).

The papers are the method packages (``itrlab/methods/<paper>/``) less the platform's own baseline: a package
whose name the platform registers itself (VSE++: its losses live in ``itrlab.losses``). A paper's
experiment is one of ``configs/experiments/`` whose method a paper's package registers, or which sets a
scheme's section (DBL's ``cooperative``); a paper's sweep one of ``configs/sweeps/`` whose experiment is a
paper's or whose file begins with a paper's name; a paper's table one of ``configs/paper/`` (its published
numbers). Each is looked for as its file name and, for a sweep, as its preset (dashes).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "platform" / "itrlab"
CONFIGS = REPO / "configs"


def paper_packages() -> set[str]:
    from itrlab.losses import LOSSES

    packages = {p.parent.name for p in (PACKAGE / "methods").glob("*/__init__.py")}
    platform_names = {name for name, cls in LOSSES.items() if not cls.__module__.startswith("itrlab.methods.")}
    return packages - platform_names


def paper_config_names() -> set[str]:
    """Every paper's experiment, sweep (file name and preset) and table."""
    import itrlab.methods as methods
    from itrlab.config import compose

    papers = paper_packages()
    sections = {scheme.section for scheme in methods.SCHEMES.values()}
    experiments = set()
    for path in (CONFIGS / "experiments").glob("*.yaml"):
        tree = compose(path.stem, [])
        method = (tree.get("method") or {}).get("name")
        cls = methods.METHODS.get(method) if method else None
        owner = cls.__module__.split(".")[2] if cls is not None else None
        if owner in papers or sections & set(tree) or path.stem.split("_")[0] in papers:
            experiments.add(path.stem)
    sweeps = set()
    for path in (CONFIGS / "sweeps").glob("*.yaml"):
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if spec.get("experiment") in experiments or path.stem.split("_")[0] in papers:
            sweeps |= {path.stem, path.stem.replace("_", "-")}
    tables = {path.stem for path in (CONFIGS / "paper").glob("*.yaml")}
    return experiments | sweeps | tables


def named_configs(text: str, names: set[str]) -> list[str]:
    """The names of ``names`` that ``text`` holds as whole words (``dbl_tiny`` is not in ``dbl_tiny_x``)."""
    words = set(re.findall(r"[A-Za-z0-9_-]+", text))
    return sorted(words & names)


def test_the_papers_and_their_configs_are_found():
    papers = paper_packages()
    assert {"dbl", "coder", "convse", "ascl"} <= papers and "vse" not in papers
    names = paper_config_names()
    assert {
        "dbl_synthetic_tiny",
        "coder_synthetic_tiny",
        "convsepp_synthetic_small",
        "ascl_synthetic_tiny",
        "dbl_table4",
        "dbl-table4",
        "coder-table2",
        "ascl_table2",
    } <= names
    assert not {"vsepp_synthetic_tiny", "vsepp_synthetic_small", "compare_methods"} & names


def test_the_check_catches_a_named_experiment():
    names = {"dbl_synthetic_tiny", "dbl-table4"}
    assert named_configs('default="dbl_synthetic_tiny"  # or --preset dbl-table4', names) == sorted(names)
    assert named_configs('default="dbl_synthetic_tiny_x"', names) == []


def test_no_platform_file_names_a_papers_experiment():
    names = paper_config_names()
    papers = paper_packages()
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "methods" and len(parts) > 2 and parts[1] in papers:  # a paper's own package
            continue
        found = named_configs(path.read_text(encoding="utf-8"), names)
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert not offenders, offenders
