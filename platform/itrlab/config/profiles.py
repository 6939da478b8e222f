"""Profiles of a sweep (docs/sweeps.md gives the format): one preset, run as the paper ran it (``paper``) or as a
miniature of the same recipe (``budget``, the default; ``default_profile: NAME`` names another).

The chosen profile's ``values`` fill every ``${name}`` of the file (a whole value keeps its type), its
``overrides`` follow the sweep's, and its ``deviations`` from the paper are tagged on every run. A profile may set
its own ``experiment``, ``seeds``, ``resources``, ``concurrency`` and ``group``, replace the values of the grid's
axes (never add one) and ``table`` keys. ``extends: OTHER`` puts its keys over another profile's (lists appended
after the other's), which extends none.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationError

from itrlab.config.loader import config_error_from_validation, did_you_mean
from itrlab.config.schema import Section
from itrlab.errors import ConfigError

DEFAULT_PROFILE = "budget"
PROFILE_TAG = "itrlab.profile"  # the MLflow tag of the profile a sweep and its trials ran under
DEVIATIONS_TAG = "itrlab.deviations"  # the tag of the profile's deviations from the paper, one a line
# the tag of the overrides a sweep's command line added to its preset and profile (a JSON list): a verdict reads
# only the preset as declared (itrlab.report.claims_board)
COMMAND_OVERRIDES_TAG = "itrlab.command_overrides"
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class Profile(Section):
    """One profile of a sweep file (see the module doc)."""

    overrides: list[str] = Field(default_factory=list)
    values: dict[str, Any] = Field(default_factory=dict)
    deviations: list[str] = Field(default_factory=list)
    seeds: list[int] | None = None  # the paper's runs may use fewer seeds than the miniature
    resources: dict[str, float] | None = None  # what a trial asks of Ray under this profile (a GPU for paper)
    concurrency: int | None = None
    group: int | None = None  # trials trained together per Ray trial (a GPU profile's grouping)
    experiment: str | None = None  # the base experiment this profile trains (e.g. a real data set's recipe)
    grid: dict[str, list[Any]] | None = None  # axes of the sweep's grid whose values this profile replaces
    table: dict[str, Any] | None = None  # keys of the sweep's table this profile replaces (compare, baseline ...)
    description: str = ""
    extends: str | None = None  # the profile this one is, with its own keys on top (see the module doc)


def _extended(profiles: dict[str, Profile], name: str, where: str) -> Profile:
    """Profile ``name`` with what it ``extends`` under it: the other's overrides and deviations first, then its
    own; ``values``, ``grid`` and ``table`` merged key by key, its own winning; every other key its own where set.
    One level only: a chain is hard to read in a sweep file."""
    profile = profiles[name]
    if profile.extends is None:
        return profile
    base = profiles.get(profile.extends)
    if base is None or base.extends is not None or profile.extends == name:
        raise ConfigError(
            f"{where}profiles.{name}.extends",
            profile.extends,
            "another profile of this sweep that extends none: "
            + ", ".join(other for other, p in profiles.items() if other != name and p.extends is None),
            did_you_mean(str(profile.extends), [other for other in profiles if other != name]),
        )
    own = profile.model_dump(exclude_unset=True, exclude={"extends"})
    merged = base.model_dump()
    for key in ("overrides", "deviations"):
        merged[key] = [*merged[key], *own.pop(key, [])]
    for key in ("values", "grid", "table"):
        if key in own:
            merged[key] = {**(merged[key] or {}), **own.pop(key)}
    if "description" in own:
        merged["description"] = f"{merged['description']}\n{own.pop('description')}".strip()
    merged.update(own)
    return Profile.model_validate(merged)


def _fill(node: Any, values: dict[str, Any], where: str) -> Any:
    if isinstance(node, dict):
        return {key: _fill(value, values, f"{where}.{key}" if where else str(key)) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill(value, values, f"{where}[{i}]") for i, value in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    names = PLACEHOLDER.findall(node)
    missing = [name for name in names if name not in values]
    if missing:
        raise ConfigError(
            where,
            node,
            f"the profile defines no value '{missing[0]}' (its values: {', '.join(values) or 'none'})",
            did_you_mean(missing[0], list(values)),
        )
    whole = PLACEHOLDER.fullmatch(node)
    if whole:
        return values[whole.group(1)]
    return PLACEHOLDER.sub(lambda m: _text(values[m.group(1)]), node)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def apply_profile(data: dict[str, Any], profile: str | None, where: str = "") -> dict[str, Any]:
    """The sweep file's data as ``profile`` runs it (``None``: the file's ``default_profile``, else ``budget``):
    values filled in, the profile's overrides after the sweep's own, its name and deviations in ``profile`` and
    ``deviations``. A file without profiles runs only as it is (``--profile`` is then an error)."""
    raw = dict(data.get("profiles") or {})
    body = {key: value for key, value in data.items() if key not in ("profiles", "default_profile")}
    default = data.get("default_profile", DEFAULT_PROFILE)
    if not raw:
        if profile not in (None, DEFAULT_PROFILE):
            raise ConfigError(f"{where}--profile", profile, "this sweep defines no profiles: it runs only as written")
        if PLACEHOLDER.search(str(body)):
            raise ConfigError(f"{where}profiles", None, "the file uses ${...} values but defines no profiles")
        return body
    for name in raw:  # a profile's name tags its runs and names its results page (itrlab.report.results_page)
        if not isinstance(name, str) or not PROFILE_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}profiles",
                name,
                "a profile's name is letters, digits, '-' and '_', starting with a letter or digit (e.g. flickr8k)",
            )
    try:
        declared = {name: Profile.model_validate(section or {}) for name, section in raw.items()}
    except ValidationError as err:
        raise config_error_from_validation(err, Profile, prefix=f"{where}profiles.") from None
    profiles = {name: _extended(declared, name, where) for name in declared}
    if default not in profiles:
        raise ConfigError(
            f"{where}default_profile",
            default,
            f"profiles of this sweep: {', '.join(profiles)}",
            did_you_mean(str(default), list(profiles)),
        )
    name = profile or default
    if name not in profiles:
        raise ConfigError(
            f"{where}--profile",
            name,
            f"profiles of this sweep: {', '.join(profiles)}",
            did_you_mean(name, list(profiles)),
        )
    for other, section in profiles.items():  # every profile must fill every value: checked for all, not just this one
        _fill(body, section.values, f"{where}(profile {other})")
    chosen = profiles[name]
    filled = _fill(body, chosen.values, where.rstrip(": "))
    filled["overrides"] = [*filled.get("overrides", []), *_fill(chosen.overrides, chosen.values, "overrides")]
    if chosen.grid:
        axes = filled.get("grid") or {}
        unknown = [axis for axis in chosen.grid if axis not in axes]
        if unknown:
            raise ConfigError(
                f"{where}profiles.{name}.grid",
                unknown[0],
                f"a profile replaces axes of the sweep's grid ({', '.join(axes) or 'none'}), it adds none",
                did_you_mean(unknown[0], list(axes)),
            )
        filled["grid"] = {**axes, **_fill(chosen.grid, chosen.values, f"profiles.{name}.grid")}
    if chosen.table:
        filled["table"] = {
            **(filled.get("table") or {}),
            **_fill(chosen.table, chosen.values, f"profiles.{name}.table"),
        }
    for key in ("experiment", "seeds", "resources", "concurrency", "group"):
        if getattr(chosen, key) is not None:
            filled[key] = getattr(chosen, key)
    if chosen.description:
        filled["description"] = f"{filled.get('description', '')}\n{chosen.description}".strip()
    filled["profile"] = name
    filled["deviations"] = chosen.deviations
    return filled
