"""Sweep definitions: a YAML file under ``configs/sweeps/`` describing a set of training runs.

A sweep names a base experiment and either a **grid** (every combination of the listed values, times ``seeds``)
or an **Optuna search space**: separate notions, since Optuna's searcher rejects Tune grids. Keys are dotted
config paths, as in overrides::

    name: margins
    experiment: vsepp_synthetic_small
    overrides: [train.epochs=6]
    grid: {loss.margin: [0.1, 0.2, 0.4]}
    seeds: [0, 1, 2]
    objective: {metric: rsum, mode: max}
    table: {rows: [loss.margin]}

A named row may run its own ``seeds`` (``{name: AsCL, seeds: [0, 1, 2, 3, 4, 5]}``); rows are compared over the
seeds both ran, and a trial's point holds the row without them.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from itrlab.config.loader import config_dir, config_error_from_validation, did_you_mean, read_yaml
from itrlab.config.profiles import apply_profile
from itrlab.config.schema import NAME_PATTERN, PREHEAD, Section, safe_name
from itrlab.errors import ConfigError

VARIANT = "variant"  # grid key whose values are named sets of overrides: {name: "+M-DCL", method.mdcl: true, ...}
ROW_SEEDS = "seeds"  # a named row's own seeds, instead of the sweep's: {name: AsCL, seeds: [0, 1, 2, 3, 4, 5]}
MAX_TRIALS = 10_000  # grid points times seeds, or Optuna's num_trials: checked before any point is listed
MAX_LABEL_CHARS = 100  # a row's label names trial runs in MLflow (run names: 250 characters at most)


def named_row(value: Any, key: str = "") -> bool:
    """Whether a grid value of ``key`` is a named variant: any value of the ``variant`` key, a ``name`` alone
    (the base experiment itself), or a ``name`` with dotted overrides (``{name: B, cooperative.strategy: B,
    train.epochs: 14}``: a row of an axis with settings of its own). A trial sets each of its other keys."""
    return (
        isinstance(value, dict)
        and "name" in value
        and (key == VARIANT or set(value) <= {"name", ROW_SEEDS} or any("." in str(k) for k in value))
    )


def own_seeds(value: Any) -> list[int] | None:
    """A grid value's own seeds (:data:`ROW_SEEDS`), or None: it runs the sweep's."""
    return value.get(ROW_SEEDS) if isinstance(value, dict) and "name" in value else None


def without_seeds(value: Any) -> Any:
    """A grid value as a trial's point holds it: a named row without its own seeds."""
    if isinstance(value, dict) and ROW_SEEDS in value:
        return {k: v for k, v in value.items() if k != ROW_SEEDS}
    return value


def _check_row_seeds(key: str, value: Any) -> None:
    """ValueError unless a grid value's own seeds are a non-empty list of distinct integers of a named row."""
    if not isinstance(value, dict) or ROW_SEEDS not in value:
        return
    name = value.get("name")
    if name is None:
        raise ValueError(f"grid key '{key}': a value with its own seeds needs a name (the row that runs them)")
    seeds = value[ROW_SEEDS]
    if not isinstance(seeds, list) or not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"grid key '{key}', row {name!r}: seeds {seeds!r} must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        raise ValueError(
            f"grid key '{key}', row {name!r}: seeds {seeds} repeat a seed: identical trials would count as "
            f"independent seeds"
        )


def label(value: Any, key: str = "") -> Any:
    """A grid value of ``key`` as a table cell: a named variant (:func:`named_row`) by its name, other dict
    values (whole sections) as ``key=value`` pairs, ``None`` (a section switched off, such as
    ``cooperative: null``) as ``none``."""
    if value is None:
        return "none"
    if named_row(value, key):
        return value["name"]
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return value


def row_key(values: dict[str, Any], keys: list[str]) -> tuple:
    """The cells of the pivot row that a grid point or a trial's params (``values``) falls in."""
    return tuple(label(values.get(key), key) for key in keys)


def row_label(values) -> str:
    """The label of a pivot row from its keys' cell values (``"oss / F"``): how published tables and
    ``table.baseline`` name rows."""
    return " / ".join(str(value) for value in values)


class SearchDimension(Section):
    """One Optuna dimension: ``uniform``/``loguniform`` (low, high), ``int`` (low, high inclusive), ``choice`` (values).
    ``when`` samples it (and sets its key) only where each named dimension, a ``choice`` listed before it without a
    ``when``, took a listed value (DBL's α only for its absolute losses: ``when: {cooperative.strategy: [C, E]}``)."""

    type: Literal["uniform", "loguniform", "int", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[Any] | None = None
    when: dict[str, list[Any]] | None = None

    def applies(self, point: dict[str, Any]) -> bool:
        """Whether this dimension is sampled in a trial whose other values are ``point``."""
        return all(point.get(key) in allowed for key, allowed in (self.when or {}).items())

    @model_validator(mode="after")
    def _bounds(self) -> SearchDimension:
        if self.type == "choice":
            if not self.values:
                raise ValueError("a choice dimension needs a non-empty 'values' list")
        elif self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"a {self.type} dimension needs low < high")
        elif self.type == "loguniform" and self.low <= 0:
            raise ValueError("a loguniform dimension needs low > 0")
        return self

    def corners(self) -> list[Any]:
        """Values that exercise the extremes of the dimension (validated before the sweep starts)."""
        if self.type == "choice":
            return list(self.values)
        if self.type == "int":
            return [int(self.low), int(self.high)]
        return [self.low, self.high]


class OptunaSpec(Section):
    """Optuna's search: ``num_trials`` configurations drawn from ``space`` (TPE seeded by ``seed``), each run once
    per seed of the sweep (Optuna learns from a configuration's mean over them: :mod:`itrlab.sweep.search`)."""

    space: dict[str, SearchDimension]
    num_trials: int = Field(ge=1, le=MAX_TRIALS)
    seed: int = 0

    @field_validator("space")
    @classmethod
    def _conditions_name_earlier_choices(cls, space: dict[str, SearchDimension]) -> dict[str, SearchDimension]:
        keys = list(space)
        for key, dim in space.items():
            for name, allowed in (dim.when or {}).items():
                parent = space.get(name)
                if parent is None or keys.index(name) > keys.index(key) or parent.type != "choice" or parent.when:
                    raise ValueError(
                        f"{key}: 'when' names {name}, which must be a choice dimension listed before it, "
                        f"without a 'when' of its own"
                    )
                unknown = [value for value in allowed if value not in parent.values]
                if not allowed or unknown:
                    raise ValueError(
                        f"{key}: 'when' lists {unknown or 'nothing'} for {name}, whose values are {parent.values}"
                    )
        return space


class Objective(Section):
    metric: str = "rsum"  # the validation metric reported every epoch
    mode: Literal["max", "min"] = "max"


class Resources(Section):
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)  # fractions only for single-worker trials (NCCL needs whole GPUs)


class AshaSpec(Section):
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(2.0, gt=1)


class TableSpec(Section):
    """The parent run's pivot (:mod:`itrlab.report.pivot`): one row per combination of ``rows`` keys, the
    mean over seeds with its 95% interval, and the difference to the ``baseline`` row with its interval."""

    rows: list[str]
    columns: list[str] = Field(
        default_factory=lambda: ["test_i2t_R1", "test_i2t_R5", "test_t2i_R1", "test_t2i_R5", "test_rsum", "test_md"]
    )
    # configs/paper/<name>.yaml: published numbers, shown beside ours only on the paper's data and protocol
    paper: str | None = None
    # configs/paper/anchors/<name>.yaml: published results of other methods on the same data and protocol,
    # reference rows under the table (never rows of the grid), under the same rule as `paper`
    anchors: str | None = None
    baseline: str | None = None  # the row the others are compared with, by its label ("A", "BTR"); default: the first
    # further pairs [row, reference] (labels): each row's objective minus the reference's, with Welch's 95%
    # interval, a line under the table (ConVSE Table III: ConVSE++ against ConVSE, besides both against VSE++)
    compare: list[tuple[str, str]] = Field(default_factory=list)
    # pairs [row, reference] where the row adds one component to its reference (CODER Table 2's cumulative
    # rows): compared as `compare`'s, and a step whose reference failed its own comparison with the baseline
    # is inconclusive (measured on a failed base). A `compare` pair's rows are siblings: each stands alone
    steps: list[tuple[str, str]] = Field(default_factory=list)


class SweepSpec(Section):
    name: str  # names the sweep's folder and MLflow experiment: one safe folder name
    description: str = ""
    # short names of the preset beside its file's name with dashes (``jobs/sweep.py --preset smoke``)
    aliases: list[str] = Field(default_factory=list)
    experiment: str
    overrides: list[str] = Field(default_factory=list)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    optuna: OptunaSpec | None = None
    objective: Objective = Field(default_factory=Objective)
    concurrency: int = Field(1, ge=1)
    resources: Resources = Field(default_factory=Resources)
    num_workers: int = Field(1, ge=1)
    # auto: one-worker trials train in the trial process, several workers in a TorchTrainer;
    # torch: always a TorchTrainer (DDP) inside the trial
    trainer: Literal["auto", "torch"] = "auto"
    max_failures: int = Field(1, ge=0)
    # trials of one model shape trained together in one process as one batched model, G per Ray trial
    # (itrlab.sweep.groups); 1: one trial per training run
    group: int = Field(1, ge=1)
    asha: AshaSpec | None = None
    table: TableSpec | None = None
    # the profile this spec was read under (itrlab.config.profiles) and how it deviates from the paper
    profile: str | None = None
    deviations: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name_is_a_folder(cls, name: str) -> str:
        return safe_name(name, "a sweep's name")

    @model_validator(mode="after")
    def _grid_or_search(self) -> SweepSpec:
        if self.optuna is not None and self.grid:
            raise ValueError(
                "a sweep has either a grid or an optuna search space, not both "
                "(Optuna's searcher rejects Tune grids); write two sweep files"
            )
        if self.optuna is None and not self.grid:
            raise ValueError("the grid is empty: list at least one key with its values (or give an optuna section)")
        trials = self.optuna.num_trials if self.optuna is not None else 1
        most_seeds = len(self.seeds)  # a bound: the most seeds any row runs
        for key, values in self.grid.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"grid key '{key}' needs a non-empty list of values")
            for value in values:
                _check_row_seeds(key, value)
            trials *= len(values)
            most_seeds = max(most_seeds, *(len(own_seeds(value) or self.seeds) for value in values))
        trials *= most_seeds
        seeded = [key for key, values in self.grid.items() if any(own_seeds(v) is not None for v in values)]
        if len(seeded) > 1:
            raise ValueError(
                f"rows of grid keys {', '.join(seeded)} give their own seeds: one grid key at most may, or a "
                f"trial would have two sets of seeds"
            )
        if trials > MAX_TRIALS:
            raise ValueError(
                f"the {'grid' if self.optuna is None else 'search'}'s points times the seeds make {trials:,} trials; "
                f"a sweep runs at most "
                f"{MAX_TRIALS:,} (split it into several sweep files)"
            )
        for key, values in self.grid.items():
            shown = [label(value, key) for value in values]
            bad = next((str(v) for v in shown if not _fits_a_run_name(str(v))), None)
            if bad is not None:
                raise ValueError(
                    f"grid key '{key}': the row label {bad[:40]!r} must be printable text of 1-"
                    f"{MAX_LABEL_CHARS} characters (it names MLflow runs)"
                )
            twice = sorted({str(v) for v in shown if shown.count(v) > 1})
            if twice:
                what = "names" if key == VARIANT or any(isinstance(v, dict) for v in values) else "values"
                raise ValueError(
                    f"grid key '{key}' lists the {what} {', '.join(twice)} twice: each would run as "
                    f"another row of identical trials"
                )
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed: identical trials would count as independent seeds")
        if self.resources.gpu % 1 and (self.num_workers > 1 or self.resources.gpu > 1):
            raise ValueError(
                "fractional GPUs break NCCL for multi-worker trials: use whole GPUs, or at most "
                "one GPU for a one-worker trial"
            )
        return self

    @property
    def workers(self) -> tuple[int, float, float]:
        """(workers, CPUs per worker, GPUs per worker) of each trial: a one-worker trial asking for k > 1 GPUs
        trains as k DDP workers of one GPU each, since one process cannot use several GPUs."""
        if self.num_workers == 1 and self.resources.gpu > 1:
            count = int(self.resources.gpu)
            return count, self.resources.cpu / count, 1.0
        return self.num_workers, self.resources.cpu, self.resources.gpu

    def with_settings(self, settings: dict[str, Any], labels: dict[str, str] | None = None) -> SweepSpec:
        """The spec with the command-line ``settings`` (dotted spec keys; None: as the file has it) applied and
        re-validated; an error names the flag that set the key where ``labels`` has one."""
        given = {key: value for key, value in settings.items() if value is not None}
        if not given:
            return self
        data = self.model_dump()
        for key, value in given.items():
            *parents, leaf = key.split(".")
            node = data
            for part in parents:
                node = node[part]
            node[leaf] = value
        try:
            return SweepSpec.model_validate(data)
        except ValidationError as err:
            error = config_error_from_validation(err, SweepSpec)
            label = (labels or {}).get(error.field)
            if label is not None:
                error = ConfigError(f"{label} ({error.field})", error.value, error.allowed, error.hint)
            raise error from None

    def grid_points(self) -> list[dict[str, Any]]:
        """Every combination of the grid's values, times the seeds (each a dict of dotted overrides): a row's own
        seeds where it gives them (the row held without them), else the sweep's."""
        keys = list(self.grid)
        points = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            seeds = next((own for own in map(own_seeds, values) if own is not None), self.seeds)
            point = {key: without_seeds(value) for key, value in zip(keys, values)}
            for seed in seeds:
                points.append({**point, "seed": seed})
        return points

    @property
    def row_seeds(self) -> bool:
        """Whether some row of the grid runs its own seeds (the trials are then no product of grid and seeds)."""
        return any(own_seeds(value) is not None for values in self.grid.values() for value in values)

    @property
    def trial_count(self) -> int:
        """The sweep's trials: the grid's points, or Optuna's ``num_trials`` configurations, times its seeds."""
        return self.optuna.num_trials * len(self.seeds) if self.optuna is not None else len(self.grid_points())

    def search_corners(self) -> list[dict[str, Any]]:
        """One point per extreme value of each Optuna dimension (the others at their first corner), a
        conditional dimension's under the first values its condition allows; each point holds only the
        dimensions that apply to it, as a trial would."""
        space = self.optuna.space
        first = {key: dim.corners()[0] for key, dim in space.items()}

        def point(**values: Any) -> dict[str, Any]:
            chosen = {**first, **values}
            return {**{k: v for k, v in chosen.items() if space[k].applies(chosen)}, "seed": self.seeds[0]}

        points = [point()]
        for key, dim in space.items():
            condition = {name: allowed[0] for name, allowed in (dim.when or {}).items()}
            corners = dim.corners() if condition else dim.corners()[1:]
            points += [point(**condition, **{key: value}) for value in corners]
        return list({json_key(p): p for p in points}.values())


def _fits_a_run_name(text: str) -> bool:
    return 0 < len(text) <= MAX_LABEL_CHARS and text.isprintable()


def json_key(point: dict[str, Any]) -> str:
    """A point's identity (for dropping repeated corner points)."""
    return json.dumps(point, sort_keys=True, default=str)


def objective_metrics() -> list[str]:
    """What ``objective.metric`` may name: the validation metrics every epoch reports, and the loss."""
    from itrlab.eval import METRIC_NAMES

    return [*METRIC_NAMES.values(), "loss"]


def table_columns() -> list[str]:
    """What ``table.columns`` may name: the final test table (``test_*``; ``prehead_test_*``, read before the
    projection head, of trials with ``eval.log_prehead``), the last validation table, and the best epoch's
    validation rsum."""
    from itrlab.eval import METRIC_NAMES

    return [
        *(f"{prefix}test_{m}" for prefix in ("", f"{PREHEAD}_") for m in METRIC_NAMES.values()),
        *METRIC_NAMES.values(),
        "best_val_rsum",
        "best_epoch",
    ]


PUBLISHED = {"paper": ("paper",), "anchors": ("paper", "anchors")}  # table key -> its folder under configs/


def published_files(key: str) -> list[str]:
    """What ``table.<key>`` may name: the files of ``configs/paper/`` (a paper's own tables) or of
    ``configs/paper/anchors/`` (published results of other methods)."""
    return sorted(p.stem for p in config_dir().joinpath(*PUBLISHED[key]).glob("*.yaml"))


def check_sweep_keys(spec: SweepSpec, prefix: str = "") -> None:
    """The names a sweep uses that the schema cannot check: the objective's metric, the table's columns,
    paper and anchors. Checked before Ray starts (Tune would only fail after training, or after the whole sweep)."""
    metrics = objective_metrics()
    if spec.objective.metric not in metrics:
        raise ConfigError(
            f"{prefix}objective.metric",
            spec.objective.metric,
            f"a validation metric reported every epoch: {', '.join(metrics)}",
            did_you_mean(spec.objective.metric, metrics),
        )
    if spec.table is None:
        return
    columns = table_columns()
    for column in spec.table.columns:
        if column not in columns:
            raise ConfigError(
                f"{prefix}table.columns",
                column,
                f"columns are metrics of a trial: {', '.join(columns)}",
                did_you_mean(column, columns),
            )
    for key, folder in PUBLISHED.items():
        name = getattr(spec.table, key)
        known = published_files(key)
        if name is not None and name not in known:
            raise ConfigError(
                f"{prefix}table.{key}",
                name,
                f"published {'tables' if key == 'paper' else key} under "
                f"{config_dir().joinpath(*folder)}: {', '.join(known) or 'none'}",
                did_you_mean(name, known),
            )


def pivot_labels(spec: SweepSpec) -> list[str]:
    """The labels of the pivot's rows in the grid's order: each grid point's cells of ``table.rows``, as
    :mod:`itrlab.report.pivot` labels the row a trial falls in. What ``table.baseline``, ``table.compare``,
    ``table.steps`` and a claim (:mod:`itrlab.config.claims`) may name; empty for a sweep without a table or
    with a search space."""
    if spec.table is None or spec.optuna is not None:
        return []
    return list(dict.fromkeys(row_label(row_key(point, spec.table.rows)) for point in spec.grid_points()))


def seeds_by_row(spec: SweepSpec) -> dict[str, list[int]]:
    """The seeds each pivot row runs (label -> seeds in grid order): the sweep's, or a row's own."""
    if spec.table is None or spec.optuna is not None:
        return {}
    rows: dict[str, list[int]] = {}
    for point in spec.grid_points():
        seeds = rows.setdefault(row_label(row_key(point, spec.table.rows)), [])
        if point["seed"] not in seeds:
            seeds.append(point["seed"])
    return rows


def seeds_text(spec: SweepSpec) -> str:
    """The sweep's seeds as a report says them: ``[0, 1, 2]``, and the rows that run their own
    (``[0, 1, 2]; AsCL, w/o Neg: [0, 1, 2, 3, 4, 5]``)."""
    return grid_seeds_text(spec.grid, spec.seeds)


def grid_seeds_text(grid: dict[str, list[Any]], seeds: list[int]) -> str:
    """:func:`seeds_text` of a grid and its sweep's ``seeds`` (as a finished sweep's summary keeps them)."""
    own: dict[str, list[str]] = {}
    for values in grid.values() if isinstance(grid, dict) else []:  # a summary's grid, as checked: any shape
        for value in values if isinstance(values, list) else []:
            if own_seeds(value) is not None:
                own.setdefault(str(own_seeds(value)), []).append(str(value["name"]))
    return "; ".join([str(seeds), *(f"{', '.join(names)}: {row}" for row, names in own.items())])


def shared_seeds(spec: SweepSpec, row: str, reference: str) -> int:
    """How many seeds two pivot rows both run: what a paired comparison of them pairs when every trial finishes."""
    rows = seeds_by_row(spec)
    return len(set(rows.get(row, spec.seeds)) & set(rows.get(reference, spec.seeds)))


def check_table_rows(spec: SweepSpec, prefix: str = "") -> None:
    """``table.rows`` name keys of the grid (or ``seed``): another key gives a column of '-'. Checked
    after the grid's own keys (a misspelt grid key is the error to report first)."""
    if spec.table is None or spec.optuna is not None:  # Optuna sweeps get no pivot
        return
    keys = [*spec.grid, "seed"]
    for key in spec.table.rows:
        if key not in keys:
            raise ConfigError(
                f"{prefix}table.rows",
                key,
                f"rows are keys of the sweep's grid: {', '.join(keys)}",
                did_you_mean(key, keys),
            )
    labels = pivot_labels(spec)
    named = [("table.baseline", spec.table.baseline)] if spec.table.baseline is not None else []
    declared = [("compare", spec.table.compare), ("steps", spec.table.steps)]
    named += [(f"table.{key}[{i}]", label) for key, pairs in declared for i, pair in enumerate(pairs) for label in pair]
    for field, label in named:
        if label not in labels:
            raise ConfigError(
                f"{prefix}{field}",
                label,
                f"the label of a row of the pivot: {', '.join(labels)}",
                did_you_mean(label, labels),
            )
    if spec.row_seeds:  # the baseline is compared with every row
        base = spec.table.baseline if spec.table.baseline is not None else labels[0]
        apart = next((label for label in labels if label != base and shared_seeds(spec, label, base) < 2), None)
        if apart is not None:
            raise ConfigError(
                f"{prefix}table.baseline",
                base,
                f"a row that runs two seeds or more in common with every other row (row {apart!r} shares "
                f"{shared_seeds(spec, apart, base)}): a comparison pairs rows by seed",
            )
    for key, pairs in declared:
        for i, (row, reference) in enumerate(pairs):
            if row == reference:
                raise ConfigError(f"{prefix}table.{key}[{i}]", [row, reference], "two different rows")
            if spec.row_seeds and shared_seeds(spec, row, reference) < 2:
                raise ConfigError(
                    f"{prefix}table.{key}[{i}]",
                    [row, reference],
                    f"two rows that run two seeds or more in common (they share "
                    f"{shared_seeds(spec, row, reference)}): a comparison pairs them by seed",
                )


def resolve_sweep_path(sweep: str | Path) -> Path:
    path = Path(sweep)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    folder = config_dir() / "sweeps"
    candidate = folder / f"{sweep}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in folder.glob("*.yaml"))
    raise ConfigError("sweep", str(sweep), f"known sweeps: {', '.join(known)}", did_you_mean(str(sweep), known))


def sweep_presets() -> dict[str, str]:
    """Every preset by the names ``--preset`` takes: each file of ``configs/sweeps/`` by its name with
    dashes (``a_table.yaml`` is ``a-table``) and by the short names its ``aliases`` key lists
    (``aliases: [smoke]``). A short name that is another preset's is a ConfigError."""
    presets: dict[str, str] = {}
    files = sorted((config_dir() / "sweeps").glob("*.yaml"))
    for path in files:
        presets[path.stem.replace("_", "-")] = path.stem
    for path in files:
        aliases = read_yaml(path, "sweep").get("aliases") or []
        for alias in aliases if isinstance(aliases, list) else [aliases]:
            if not isinstance(alias, str) or not NAME_PATTERN.fullmatch(alias):
                raise ConfigError(
                    f"{path.name}: aliases", alias, "short names are 1-100 letters, digits, '.', '_', '-' or '+'"
                )
            if alias in presets:
                raise ConfigError(f"{path.name}: aliases", alias, f"already the name of preset {presets[alias]}")
            presets[alias] = path.stem
    return presets


def load_sweep(sweep: str | Path, profile: str | None = None) -> SweepSpec:
    """Read and validate a sweep file (name under configs/sweeps/ or a path) under ``profile``
    (:mod:`itrlab.config.profiles`; None: ``budget``, or the file as written when it has no profiles)."""
    path = resolve_sweep_path(sweep)
    data = apply_profile(read_yaml(path, "sweep"), profile, where=f"{path.name}: ")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise config_error_from_validation(err, SweepSpec, prefix=f"{path.name}: ") from None
    check_sweep_keys(spec, prefix=f"{path.name}: ")
    return spec
