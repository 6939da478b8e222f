"""Compose YAML files and ``key=value`` overrides into one raw tree, and check it against a schema.

An experiment file names its dataset and method files under ``defaults``
(``defaults: {dataset: synthetic_small, method: vsepp}``); they become its sections, the experiment file is merged
over them and the overrides over that (``train.epochs=3``; ``defaults.dataset=synthetic_tiny`` or a YAML file's
path swaps a file). Override values are parsed as YAML. Every problem is a :class:`~itrlab.errors.ConfigError`
naming the field, the bad value and what is allowed, before any expensive work. Limits hold while a file or an
override is parsed, so no input runs for minutes or fills the memory: :data:`MAX_FILE_BYTES`, :data:`MAX_DEPTH`,
:data:`MAX_ALIASES` and :data:`MAX_NODES` values once aliases are expanded (an "alias bomb").
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from itrlab.config.schema import ExperimentConfig
from itrlab.errors import ConfigError, SettingError

CONFIG_DIR_ENV = "ITRLAB_CONFIG_DIR"
MAX_FILE_BYTES = 256 << 10  # a config or sweep file: the largest here is a few KB; PyYAML is slow on large files
MAX_OVERRIDE_CHARS = 1 << 16  # one key=value override
MAX_DEPTH = 64  # nested mappings and lists
MAX_ALIASES = 100  # YAML aliases (*name) in one document
MAX_NODES = 200_000  # values of a document with its aliases expanded


def config_dir() -> Path:
    """The ``configs/`` folder: ``$ITRLAB_CONFIG_DIR``, else ``./configs``, else the source tree's."""
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV])
    local = Path.cwd() / "configs"
    if local.is_dir():
        return local
    return Path(__file__).resolve().parents[3] / "configs"


def closest(word: str, choices: list[str] | tuple[str, ...]) -> str | None:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return match[0] if match else None


def did_you_mean(word: str, choices) -> str | None:
    match = closest(str(word), list(choices))
    return f"did you mean '{match}'?" if match else None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (plain YAML keeps the last), nesting
    deeper than :data:`MAX_DEPTH` and more than :data:`MAX_ALIASES` aliases, as it composes."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Limit(f"more than {MAX_ALIASES} aliases (*name)", self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limit(f"nesting deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is written twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Limit(yaml.YAMLError):
    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def _expanded_size(value: Any, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values ``value`` holds with every alias expanded (shared parts counted each time they occur,
    computed once each)."""
    if not isinstance(value, (dict, list)):
        return 1
    key = id(value)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise _Limit("an alias refers to a value that contains it")
    open_.add(key)
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    total = 1 + sum(_expanded_size(item, sizes, open_) for item in items)
    open_.discard(key)
    sizes[key] = total
    if total > MAX_NODES:
        raise _Limit(f"more than {MAX_NODES:,} values once its aliases are expanded")
    return total


def load_yaml(text: str) -> Any:
    """``text`` parsed by the safe loader within the limits above (a yaml.YAMLError otherwise), each call its own
    copy. A text is parsed once per process: PyYAML's parser is pure Python (about 10 ms a sweep file), and one
    command reads every sweep file more than once (``--list`` reads each under each of its profiles)."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    _expanded_size(data, {}, set())
    return data


def read_yaml(path: Path, field: str = "config") -> dict[str, Any]:
    if path.is_dir():
        raise ConfigError(field, str(path), "it is a folder; name a YAML file (or an experiment by its name)")
    if not path.is_file():
        raise ConfigError(
            field,
            str(path),
            "the file does not exist" if not path.exists() else "it is not a regular file; name a YAML file",
        )
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                field, str(path), f"the file holds {size:,} bytes; a config or sweep file may hold {MAX_FILE_BYTES:,}"
            )
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            field, str(path), f"the file is not valid YAML{where}: {getattr(err, 'problem', err)}"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(field, str(path), f"the file cannot be read: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(field, str(path), "the file must hold a mapping of keys to values")
    return data


def deep_merge(base: dict, over: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_override(text: str) -> tuple[list[str], Any]:
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError(
            "override",
            text[:60] + "...",
            f"an override holds at most {MAX_OVERRIDE_CHARS:,} characters (this one {len(text):,})",
        )
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("override", text, "overrides have the form section.key=value, e.g. train.epochs=3")
    try:
        value = load_yaml(raw) if raw != "" else ""
    except _Limit as err:
        raise ConfigError(key, raw[:60] + ("..." if len(raw) > 60 else ""), f"the value has {err.problem}") from None
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def set_path(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(path), value, f"'{'.'.join(path[: i + 1])}' is a value, not a section")
        node = child
    node[path[-1]] = value


def resolve_experiment_path(experiment: str | Path) -> Path:
    path = Path(experiment)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    candidate = config_dir() / "experiments" / f"{experiment}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in (config_dir() / "experiments").glob("*.yaml"))
    raise ConfigError(
        "experiment", str(experiment), f"known experiments: {', '.join(known)}", did_you_mean(str(experiment), known)
    )


def is_config_path(name: Any) -> bool:
    """Whether ``defaults.<kind>`` names a YAML file by its path (``data/holiday/holiday.yaml``: the data set config
    an extraction writes beside its features) rather than a file of ``configs/<kind>s/`` by its name."""
    return isinstance(name, str) and name.endswith((".yaml", ".yml"))


def _named_file(kind: str, name: Any) -> Path:
    """The file ``defaults.<kind>`` names: ``configs/<kind>s/<name>.yaml``, or a YAML file's path."""
    if is_config_path(name):
        return Path(name).expanduser()
    folder = config_dir() / f"{kind}s"
    known = sorted(p.stem for p in folder.glob("*.yaml"))
    if not isinstance(name, str) or not (folder / f"{name}.yaml").is_file():
        raise ConfigError(
            f"defaults.{kind}",
            name,
            f"allowed: {', '.join(known)} (files in {folder}), or a YAML file's path",
            did_you_mean(str(name), known),
        )
    return folder / f"{name}.yaml"


def compose(experiment: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Merge the method, dataset and experiment files and the overrides into one raw tree."""
    path = resolve_experiment_path(experiment)
    raw = read_yaml(path, "experiment")
    parsed = [parse_override(o) for o in overrides]
    defaults = dict(raw.pop("defaults", None) or {})
    for key, value in parsed:
        if key[0] == "defaults":
            if len(key) != 2 or key[1] not in ("dataset", "method"):
                raise ConfigError(".".join(key), value, "allowed: defaults.dataset, defaults.method")
            defaults[key[1]] = value
    unknown = set(defaults) - {"dataset", "method"}
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(f"defaults.{name}", defaults[name], "allowed keys under defaults: dataset, method")
    tree: dict[str, Any] = {}
    if "method" in defaults:
        tree = deep_merge(tree, read_yaml(_named_file("method", defaults["method"]), "defaults.method"))
    if "dataset" in defaults:
        dataset = read_yaml(_named_file("dataset", defaults["dataset"]), "defaults.dataset")
        tree = deep_merge(tree, {"dataset": dataset})
    tree = deep_merge(tree, raw)
    for key, value in parsed:
        if key[0] != "defaults":
            set_path(tree, key, value)
    return tree


def _model_at(loc: tuple, root: type[BaseModel] = ExperimentConfig) -> type[BaseModel] | None:
    """The config section class that owns the field at ``loc`` (for suggesting keys); a list's index in
    ``loc`` (``claims.3.row``) stays in the section of the list's items."""
    model: Any = root
    for part in loc[:-1]:
        if part.isdigit():
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model


def config_error_from_settings(err: Exception, section: str, owner: str, allowed: tuple[str, ...]) -> ConfigError:
    """A loss's or a scheme's refusal of its settings as a ConfigError on ``<section>.<setting>``.

    The setting is named by what refused it, never read from a message: pydantic's location of the
    first error of a typed constructor (``validate_call``: a setting ``owner`` does not take, or a value
    it does not accept), or :class:`~itrlab.errors.SettingError`'s ``setting``. ``allowed`` lists the
    section's keys for an unknown one.
    """
    if isinstance(err, SettingError):
        return ConfigError(f"{section}.{err.setting}", err.value, err.allowed)
    if not isinstance(err, ValidationError):
        raise TypeError(f"not a settings error: {err!r}")
    first = err.errors()[0]
    setting = ".".join(str(part) for part in first["loc"]) or "name"
    value = first.get("input")
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        return ConfigError(
            f"{section}.{setting}",
            value,
            f"unknown key for {owner}; allowed: {', '.join(allowed)}",
            did_you_mean(setting, allowed),
        )
    return ConfigError(f"{section}.{setting}", value, first["msg"].removeprefix("Value error, "))


REFUSED = "itrlab_refused"


def refused(error: ConfigError) -> PydanticCustomError:
    """A section's refusal of one of its keys, raised from the section's validator: pydantic carries
    ``error`` (which names ``<section>.<key>``) as one of the section's errors, in the schema's order, and
    :func:`config_error_from_validation` gives it back as it is."""
    return PydanticCustomError(REFUSED, "{message}", {"message": str(error), "error": error})


def config_error_from_validation(err: ValidationError, root: type[BaseModel], prefix: str = "") -> ConfigError:
    """The first pydantic error as a ConfigError naming the field, the value and what is allowed."""
    first = err.errors()[0]
    if first["type"] == REFUSED:
        return first["ctx"]["error"]
    loc = tuple(str(p) for p in first["loc"])
    field = prefix + (".".join(loc) or "config")
    value = first.get("input")
    if first["type"] == "extra_forbidden":
        owner = _model_at(loc, root)
        known = sorted(f.alias or name for name, f in owner.model_fields.items()) if owner else []
        section = (prefix + ".".join(loc[:-1])).rstrip(".: ") or "the top level"
        return ConfigError(
            field, value, f"unknown key; keys allowed in {section}: {', '.join(known)}", did_you_mean(loc[-1], known)
        )
    if first["type"] == "missing" and field == "dataset":
        return ConfigError(
            "defaults.dataset",
            None,
            "the experiment names no data set; pass defaults.dataset=NAME (a file of configs/datasets/) or the "
            "path of a data set config (the one an extraction writes beside its features: docs/data.md)",
        )
    if first["type"] == "missing":
        return ConfigError(field, None, "this key is required")
    message = first["msg"].removeprefix("Value error, ")
    key, sep, rest = message.partition(": a number, not ")
    if sep and isinstance(value, dict) and key in value:  # a section's check of one of its keys
        return ConfigError(f"{prefix}{'.'.join((*loc, key))}", value[key], f"a number, not {rest}")
    return ConfigError(field, value, message)


def validate(tree: dict[str, Any], schema: type[ExperimentConfig] = ExperimentConfig) -> ExperimentConfig:
    """Turn a composed raw tree into a config of ``schema`` (structure, types, ranges).

    This layer knows no method: the ``method`` section keeps its keys as given. :mod:`itrlab.assembly`
    passes the schema whose ``method`` is typed by the registered methods and runs the method checks.
    """
    try:
        return schema.model_validate(tree)
    except ValidationError as err:
        raise config_error_from_validation(err, schema) from None
