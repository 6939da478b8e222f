"""The data set config an extraction of a folder of photos writes beside its features, and the training command
that reads it (docs/data.md#your-own-photos).

The data set takes ``--name``, else the output folder's name; ``{out}/{name}.yaml`` is a config like those of
``configs/datasets/``, which ``defaults.dataset`` takes by its path, and the printed command trains the
stored-text recipe (:data:`RECIPE`) as the experiment ``<method>_<name>``, so the run and its gallery carry the
data set's name. Paths are relative to the project folder where the output lies inside it, else absolute. Formats
with a config of their own (``--flickr8k``) write none; a name that is not one folder name, or that a shipped data
set has, is refused before anything is extracted.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from itrlab.config.loader import compose, config_dir
from itrlab.config.schema import DatasetConfig, safe_name
from itrlab.errors import UserInputError
from itrlab.extract.readers import Reader
from itrlab.files import atomic_write_text
from itrlab.workdir import project_folder

RECIPE = "vsepp_photos"  # configs/experiments/: the stored-text recipe, for any data set it is given
TEXT_MANIFEST = Path("text") / "text.json"  # the captions' stored text states (the extraction's --text)
VAL_PREFIXES = ("dev", "val")  # a validation split's prefix, in the order they are looked for


def shipped_datasets() -> dict[str, Path]:
    """Each shipped data set's names (its file's and its ``name``) and its file in ``configs/datasets/``."""
    found: dict[str, Path] = {}
    for path in sorted((config_dir() / "datasets").glob("*.yaml")):
        found[path.stem] = path
        try:
            tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(tree, dict) and isinstance(tree.get("name"), str):
            found.setdefault(tree["name"], path)
    return found


def experiment_name(name: str) -> str:
    """The experiment (and run folder) the printed command trains: the recipe's method and the data set's name."""
    return f"{recipe()['method']['name']}_{name}"


def recipe() -> dict[str, Any]:
    """The recipe's composed tree (its method's file and its own; no data set)."""
    return compose(RECIPE)


def dataset_name(given: str | None, out: Path) -> str:
    """The data set's name: ``given`` (``--name``), else the output folder's; a UserInputError when it is not one
    folder name or a shipped data set has it."""
    name = given if given is not None else Path(os.path.abspath(out)).name
    source = f"--name {name!r}" if given is not None else f"the data set's name {name!r} (the --out folder's)"
    try:
        safe_name(name)
        safe_name(experiment_name(name))
    except ValueError as err:
        raise UserInputError(
            f"{source}: a data set's name is one folder name, and so is its experiment's, "
            f"{experiment_name(name)!r}: {err}" + ("" if given is not None else "; pass --name")
        ) from None
    clash = shipped_datasets().get(name)
    if clash is not None:
        raise UserInputError(
            f"{source}: a shipped data set has this name (configs/datasets/{clash.name}); pass --name with another"
        )
    return name


def config_name(given: str | None, reader: type[Reader] | None, out: Callable[[], Path]) -> str | None:
    """The name of the data set config an extraction with ``reader`` (None: no photos extracted, ``--text-only``)
    into ``out()`` writes, checked before any work (:func:`dataset_name`); None where it writes none: a format with
    a data set config of its own (a default ``--out``: ``--flickr8k``) or no photos. ``given``: ``--name``, which
    those refuse."""
    if reader is None or reader.default_out is not None:
        if given is not None:
            owner = (
                "--text-only extracts no photos" if reader is None else f"{reader.flag()} has its own data set config"
            )
            raise UserInputError(f"--name names the data set config an extraction of photos writes; {owner}")
        return None
    return dataset_name(given, out())


def shown_path(path: Path) -> str:
    """``path`` as the printed command and the config write it: relative to the project folder when inside it,
    else absolute."""
    absolute = Path(os.path.abspath(path))
    project = project_folder()
    if project is not None and absolute.is_relative_to(project):
        return absolute.relative_to(project).as_posix()
    return str(absolute)


def split_roles(splits: list[str]) -> dict[str, str] | None:
    """The prefixes of the training, validation and test splits among ``splits`` (by name: ``train``, ``dev`` or
    ``val``, ``test``; else three splits in their order); None when there are not three."""
    val = next((prefix for prefix in VAL_PREFIXES if prefix in splits), None)
    if "train" in splits and "test" in splits and val is not None:
        return {"train": "train", "val": val, "test": "test"}
    if len(splits) == 3:
        return dict(zip(("train", "val", "test"), splits))
    return None


@dataclass(frozen=True)
class Written:
    """The data set config written beside the features and the command that trains on it."""

    path: Path
    name: str
    command: str
    lines: list[str]  # what the extraction reports of it, the command last


def write_dataset_config(out: Path, name: str, manifest: dict[str, Any], made_by: str) -> Written | None:
    """``{out}/{name}.yaml`` for the extraction ``manifest`` of ``out``, checked as a data set config, and the
    training command; None (with nothing written) when the splits are not three."""
    counts = {split: int(sizes["images"]) for split, sizes in manifest["splits"].items()}
    roles = split_roles(list(counts))
    if roles is None:
        return None
    per_image = int(manifest["captions"]["per_image"])
    root = shown_path(out)
    tree = {
        "name": name,
        "kind": "precomp",
        "root": root,
        "splits": roles,
        "captions_per_image": per_image,
        "made_by": made_by,
    }
    DatasetConfig.model_validate(tree)  # a config of the schema's, as any data set's
    path = Path(out) / f"{name}.yaml"
    command = training_command(path, name, counts[roles["train"]] * per_image)
    source = manifest.get("source", {})
    header = [
        f"The data set {name}: the photos of {source.get('images', '?')} with their captions "
        f"({source.get('captions', '?')}),",
        "as EfficientNet-Lite0 features (docs/data.md#your-own-photos). Written by the extraction (made_by), "
        "again each time it runs;",
        "train a model on it from the project folder with:",
        f"  {command}",
    ]
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)
    atomic_write_text(path, text)
    sizes = ", ".join(f"{roles[role]} {counts[roles[role]]}" for role in ("train", "val", "test"))
    lines = [f"data set config: {shown_path(path)} (the data set {name}: {sizes} photos)"]
    if not (Path(out) / TEXT_MANIFEST).is_file():
        lines.append(
            f"the training command reads the captions' stored text states, which {shown_path(out)} lacks: run "
            f"the extraction again with --text first (the photos are not extracted again)"
        )
    lines += ["train a model on it (from the project folder):", f"  {command}"]
    return Written(path, name, command, lines)


def training_command(config: Path, name: str, train_captions: int) -> str:
    """The command that trains the recipe on the data set config ``config`` under the experiment named after
    ``name``; with fewer training captions than the recipe's batch, a batch of all of them."""
    words = ["python", "jobs/train.py", "-c", RECIPE, f"defaults.dataset={shown_path(config)}"]
    words.append(f"name={experiment_name(name)}")
    if train_captions < int(recipe()["train"]["batch_size"]):
        words.append(f"train.batch_size={train_captions}")
    return shlex.join(words)
