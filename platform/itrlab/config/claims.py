"""Claims files: each paper's claims as data, one YAML file per paper under ``configs/claims/``
(docs/claims-files.md gives the format, with an example). A claim is one sentence a paper makes about one row of
one of its tables against another row (``id``, ``claim``, ``sweep`` and ``profile``, ``row`` and ``baseline``,
``direction``, ``metric`` and ``also``, its Holm ``family``, ``paper_effect``, ``depends_on``), and the sweep that
measures it here; a file's ``separating`` list holds the experiments of :mod:`itrlab.config.separating`.

:func:`load_claims` checks every entry before anything uses it: the preset and profile exist, the row and
baseline are labels its pivot produces (:func:`itrlab.config.sweep.pivot_labels`: no torch, Ray or MLflow), the
metrics are known, the family is declared, ``depends_on`` has no cycle, ``serves`` names a claim of the same file,
no id is written twice. The first bad input is a :class:`ClaimsError`: one line naming the file, the entry and the
key, exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from itrlab.config.comparison import ID_PATTERN, SHOWN_METRICS, Comparison, kebab, metric_name
from itrlab.config.loader import REFUSED, config_dir, config_error_from_validation, did_you_mean, read_yaml, refused
from itrlab.config.schema import PREHEAD, Section
from itrlab.config.separating import Separating
from itrlab.config.sweep import SweepSpec, load_sweep, pivot_labels, sweep_presets
from itrlab.errors import ConfigError

FOLDER = "claims"  # under configs/


class ClaimsError(ConfigError):
    """A claims file that names what no sweep has (a preset, a profile, a row), a metric, direction or family
    that is not allowed, a claim that ``depends_on`` names none, or an id written twice: one line naming the
    file, the claim and the key, exit status 2 (:class:`~itrlab.errors.UserInputError`)."""


class PaperEffect(Section):
    """The paper's own effect for a claim: row minus baseline in ``metric``, read from its published table."""

    value: float
    metric: str
    source: str = Field(min_length=1)  # the table and the data set it is read from

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        return metric_name(metric, SHOWN_METRICS, "a paper's effect's metric")


class Claim(Comparison):
    """One claim of a paper (see the module doc); :attr:`file` is the claims file it was read from."""

    claim: str = Field(min_length=1)
    paper_effect: PaperEffect
    depends_on: list[str] = Field(default_factory=list)
    note: str = ""
    _file: Path | None = PrivateAttr(default=None)

    @classmethod
    def what(cls) -> str:
        return "claim"

    @property
    def file(self) -> Path | None:
        """The claims file this claim was read from (None for one built in code)."""
        return self._file

    @model_validator(mode="after")
    def _consistent(self) -> Claim:
        if self.paper_effect.metric not in self.metrics:
            raise refused(
                ConfigError(
                    "paper_effect.metric",
                    self.paper_effect.metric,
                    f"a metric the claim shows, so that the paper's effect stands beside ours: its metric or one "
                    f"in also ({', '.join(self.metrics)})",
                )
            )
        if self.id in self.depends_on:
            raise refused(ConfigError("depends_on", self.id, "the ids of other claims, not the claim's own"))
        twice = sorted({name for name in self.depends_on if self.depends_on.count(name) > 1})
        if twice:
            raise refused(ConfigError("depends_on", twice[0], "each claim once"))
        return self


class ClaimsFile(Section):
    """One claims file: its Holm families (name: what the family holds and why), its claims and the experiments
    that separate our setting from the paper's method where a claim fails (:mod:`itrlab.config.separating`)."""

    families: dict[str, str] = Field(min_length=1)
    claims: list[Claim] = Field(min_length=1)
    separating: list[Separating] = Field(default_factory=list)
    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        """The file it was read from (None for one built in code)."""
        return self._path

    @field_validator("families")
    @classmethod
    def _families_named(cls, families: dict[str, str]) -> dict[str, str]:
        for name, text in families.items():
            kebab(name, "a family's name")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"family {name}: say in a sentence what it holds and why (its description is empty)")
        return families


def claims_folder() -> Path:
    """``configs/claims/`` (:func:`itrlab.config.loader.config_dir`)."""
    return config_dir() / FOLDER


def load_claim_files(folder: str | Path | None = None) -> list[ClaimsFile]:
    """Every claims file of ``folder`` (None: ``configs/claims/``), by name, each checked as the module doc
    says; the first bad input raises :class:`ClaimsError`."""
    folder = Path(folder) if folder is not None else claims_folder()
    if not folder.is_dir():
        raise ClaimsError("claims", str(folder), "a folder of claims files (*.yaml), one per paper")
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise ClaimsError("claims", str(folder), "a folder of claims files (*.yaml), one per paper: it holds none")
    files = [_read_file(path) for path in paths]
    _check_across(files)
    try:
        presets = sweep_presets()
    except ConfigError as err:  # a sweep file whose aliases cannot be read: said as it is, as a claims error
        raise ClaimsError(err.field, err.value, err.allowed, err.hint) from None
    pivots: dict[tuple[str, str | None], SweepSpec] = {}
    for file in files:
        for entry in [*file.claims, *file.separating]:
            _check_rows(entry, _where(file.path, entry.id), presets, pivots)
    return files


def load_claims(folder: str | Path | None = None) -> list[Claim]:
    """Every claim of ``folder``'s claims files (None: ``configs/claims/``), file by file in name order, each
    file's in its own order; the first bad input raises :class:`ClaimsError` (one line, exit status 2)."""
    return [claim for file in load_claim_files(folder) for claim in file.claims]


def _display(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _where(path: Path, claim_id: Any) -> str:
    return f"{_display(path)}: {claim_id}"


def _read_file(path: Path) -> ClaimsFile:
    try:
        raw = read_yaml(path, _display(path))
    except ConfigError as err:
        raise ClaimsError(err.field, err.value, err.allowed, err.hint) from None
    try:
        file = ClaimsFile.model_validate(raw)
    except ValidationError as err:
        raise _claims_error(path, raw, err) from None
    file._path = path
    for claim in file.claims:
        claim._file = path
    entries = [*file.claims, *file.separating]
    for entry in entries:
        if entry.family not in file.families:
            raise ClaimsError(
                f"{_where(path, entry.id)}.family",
                entry.family,
                f"a family this file declares under families: {', '.join(file.families)}",
                did_you_mean(entry.family, list(file.families)),
            )
    unused = [name for name in file.families if all(entry.family != name for entry in entries)]
    if unused:
        raise ClaimsError(
            f"{_display(path)}: families",
            unused[0],
            "a family that a claim of this file belongs to, or a separating experiment of it",
        )
    claimed = {claim.family for claim in file.claims}
    for experiment in file.separating:
        if experiment.family in claimed:
            raise ClaimsError(
                f"{_where(path, experiment.id)}.family",
                experiment.family,
                "a family of separating experiments only: the claims' families hold the paper's claims, whose Holm "
                "adjustment our own experiments must not change",
            )
    return file


def _claims_error(path: Path, raw: dict[str, Any], err: ValidationError) -> ClaimsError:
    """The first pydantic error as a ClaimsError whose key names the file and the claim or separating experiment
    by its id where it has one (``claims/vse.yaml: an-id.row``; ``claims[2].id``, ``separating[0].id`` for an
    entry without a usable id)."""
    first = err.errors()[0]
    error = config_error_from_validation(err, ClaimsFile)
    loc = [str(part) for part in first["loc"]]
    inner = error.field.split(".") if first["type"] == REFUSED else []  # an entry's check of one of its keys
    entries = raw.get(loc[0]) if isinstance(raw, dict) and loc and loc[0] in ("claims", "separating") else None
    if not (len(loc) >= 2 and loc[1].isdigit() and isinstance(entries, list)):
        return ClaimsError(
            f"{_display(path)}: {'.'.join(loc) or 'the top level'}", error.value, error.allowed, error.hint
        )
    entry = entries[int(loc[1])] if int(loc[1]) < len(entries) else None
    name = entry.get("id") if isinstance(entry, dict) else None
    named = name if isinstance(name, str) and ID_PATTERN.fullmatch(name) else f"{loc[0]}[{loc[1]}]"
    allowed = error.allowed.replace(  # an unknown key: the section it sits in, by the entry's name
        f"keys allowed in {'.'.join(loc[:-1])}:", f"keys allowed in {'.'.join([named, *loc[2:-1]])}:"
    )
    return ClaimsError(".".join([f"{_display(path)}: {named}", *loc[2:], *inner]), error.value, allowed, error.hint)


def _check_across(files: list[ClaimsFile]) -> None:
    """Ids (of claims and separating experiments) and family names written once over all files; every
    ``depends_on`` names a claim, without a cycle; every ``serves`` names a claim of its own file."""
    owner: dict[str, Path] = {}
    for file in files:
        for entry in [*file.claims, *file.separating]:
            if entry.id in owner:
                raise ClaimsError(
                    f"{_where(file.path, entry.id)}.id",
                    entry.id,
                    f"an id no other claim or separating experiment has: {_display(owner[entry.id])} has it already",
                )
            owner[entry.id] = file.path
    for file in files:
        own = [claim.id for claim in file.claims]
        for experiment in file.separating:
            if experiment.serves not in own:
                raise ClaimsError(
                    f"{_where(file.path, experiment.id)}.serves",
                    experiment.serves,
                    f"the id of a claim of this file, whose failure it separates: {', '.join(own)}",
                    did_you_mean(experiment.serves, own),
                )
    declared: dict[str, Path] = {}
    for file in files:
        for name in file.families:
            if name in declared:
                raise ClaimsError(
                    f"{_display(file.path)}: families",
                    name,
                    f"a family one file declares: {_display(declared[name])} declares it already",
                )
            declared[name] = file.path
    claims = {claim.id: (file, claim) for file in files for claim in file.claims}
    for file, claim in claims.values():
        for name in claim.depends_on:
            if name not in claims:
                raise ClaimsError(
                    f"{_where(file.path, claim.id)}.depends_on",
                    name,
                    "the id of a claim in a claims file",
                    did_you_mean(name, list(claims)),
                )
    edges = {cid: c.depends_on for cid, (_, c) in claims.items()}
    for file, claim in claims.values():
        cycle = _cycle(claim.id, edges, [])
        if cycle:
            raise ClaimsError(
                f"{_where(file.path, claim.id)}.depends_on",
                claim.depends_on,
                f"claims that do not depend on each other in a circle: {' -> '.join(cycle)}",
            )


def _cycle(start: str, edges: dict[str, list[str]], path: list[str]) -> list[str]:
    """The first circle of ``depends_on`` reached from ``start`` (ids, the first repeated at the end), or []."""
    if start in path:
        return [*path[path.index(start) :], start]
    for name in edges.get(start, []):
        found = _cycle(name, edges, [*path, start])
        if found:
            return found
    return []


def _check_rows(
    entry: Comparison, where: str, presets: dict[str, str], pivots: dict[tuple[str, str | None], SweepSpec]
) -> None:
    """The preset exists, has the profile, and its pivot has the entry's row and baseline; a separating
    experiment that reads the embedding before the projection head names a preset whose table shows it."""
    if entry.sweep not in presets:
        raise ClaimsError(
            f"{where}.sweep",
            entry.sweep,
            f"a preset of configs/sweeps/ as jobs/sweep.py --preset takes it: {', '.join(sorted(presets))}",
            did_you_mean(entry.sweep, list(presets)),
        )
    key = (entry.sweep, entry.profile)
    if key not in pivots:
        pivots[key] = _pivot(entry, where, config_dir() / "sweeps" / f"{presets[entry.sweep]}.yaml")
    spec = pivots[key]
    labels = pivot_labels(spec)
    under = f" under profile {entry.profile}" if entry.profile else ""
    for field in ("row", "baseline"):
        value = getattr(entry, field)
        if value not in labels:
            raise ClaimsError(
                f"{where}.{field}",
                value,
                f"the label of a row of preset {entry.sweep}'s pivot{under}: {', '.join(labels)}",
                did_you_mean(value, labels),
            )
    column = f"{PREHEAD}_test_{entry.metric}"
    if isinstance(entry, Separating) and entry.prehead and column not in spec.table.columns:
        raise ClaimsError(
            f"{where}.embedding",
            entry.embedding,
            f"output, or a preset whose trials read before the projection head (eval.log_prehead) and whose "
            f"table shows it: preset {entry.sweep}'s table has no column {column}",
        )


def _pivot(entry: Comparison, where: str, path: Path) -> SweepSpec:
    """The preset's sweep file under the entry's profile, checked to have a pivot."""
    try:
        raw = read_yaml(path, "sweep")
    except ConfigError as err:
        raise ClaimsError(f"{where}.sweep", entry.sweep, f"a preset whose file loads; it says: {err}") from None
    profiles = list(raw["profiles"]) if isinstance(raw.get("profiles"), dict) else []
    if profiles and entry.profile not in profiles:
        raise ClaimsError(
            f"{where}.profile",
            entry.profile,
            f"a profile of preset {entry.sweep}: {', '.join(profiles)}",
            did_you_mean(str(entry.profile), profiles),
        )
    if not profiles and entry.profile is not None:
        raise ClaimsError(
            f"{where}.profile",
            entry.profile,
            f"nothing: preset {entry.sweep} defines no profiles (it runs only as written), so leave profile out",
        )
    try:
        spec = load_sweep(path, entry.profile)
    except ConfigError as err:
        raise ClaimsError(f"{where}.sweep", entry.sweep, f"a preset whose file loads; it says: {err}") from None
    if not pivot_labels(spec):
        raise ClaimsError(
            f"{where}.sweep",
            entry.sweep,
            "a preset with a grid and a table: this one's runs get no pivot, so no row to name",
        )
    return spec
