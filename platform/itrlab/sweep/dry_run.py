"""``--dry-run``: what a sweep would run and what it would cost; nothing starts (no Ray, no MLflow). Printed: the
profile and its deviations from the paper, each trial's recipe, the stages the trials share, a trial's resources,
the cost estimate (:mod:`itrlab.train.throughput`; or why there is none) and the command that runs it on a cluster.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
from pathlib import Path

from itrlab.assembly import stage_configs
from itrlab.config import ExperimentConfig
from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.sweep import SweepSpec, row_key, row_label, seeds_text
from itrlab.sweep.cost import Cost, group_seconds
from itrlab.sweep.points import base_tree, trial_config
from itrlab.tracking.store import TRACKING_URI_ENV, resolve_tracking_uri
from itrlab.train.stage_identity import stage_key

_log = logging.getLogger(__name__)

# the dashboard of the head docs/sweeps.md starts on this machine (not Ray's 8265, which a sweep's own Ray may hold);
# elsewhere, the head's dashboard address
RAY_DASHBOARD = "http://127.0.0.1:8275"


def schedule(config: ExperimentConfig) -> str:
    """``2e-04 -> 2e-05 at epoch 15``, ``2e-05 fixed`` or, chosen on validation, ``2e-04 -> 2e-05 after epoch 3, 9
    or 15 (chosen on validation: 78 epochs trained)``."""
    train, text = config.train, f"{config.train.lr:.0e}"
    lr = train.lr
    if train.lr_decay_choices:
        *first, last = map(str, train.lr_decay_choices)
        return (
            f"{text} -> {lr * train.lr_decay:.0e} after epoch {', '.join(first)} or {last} (chosen on validation: "
            f"{train.trained_epochs} epochs trained)"
        )
    for epoch in train.lr_decay_epochs:
        lr *= train.lr_decay
        text += f" -> {lr:.0e} at epoch {epoch}"
    return text if train.lr_decay_epochs else text + " fixed"


def recipe(config: ExperimentConfig) -> dict[str, str]:
    loss = {k: v for k, v in config.loss.model_dump(by_alias=True).items() if k != "name" and v not in (None, 0, 0.0)}
    if not config.loss.warmup_epochs:  # the warm-up loss matters only with warm-up epochs
        loss.pop("warmup_loss", None)
    text = config.model.text
    return {
        "method": config.method.name,
        "loss": " ".join([config.loss.name, *(f"{k}={v}" for k, v in loss.items())]),
        "batch": str(config.train.batch_size),
        "epochs": str(config.train.epochs),
        "lr": schedule(config),
        "embed": str(config.model.embed_dim),
        "text": f"{text.encoder} {text.word_dim}-d" + (f" GloVe {text.glove}" if text.glove else "")
        if text.encoder == "bigru"
        else f"{text.encoder} {text.bert_path or '(packaged MiniLM-L6)'}",
        "method settings": " ".join(f"{k}={v}" for k, v in config.method.params().items()) or "-",
        "data": f"{config.dataset.name} ({config.eval.test_protocol})",
    }


def declared_shape(config: ExperimentConfig) -> tuple[int, int] | None:
    """The region features ``configs/datasets/shapes/<dataset>.yaml`` declares for ``dataset.root``'s folder
    (what the extraction writes there), or None."""
    path = config_dir() / "datasets" / "shapes" / f"{config.dataset.name}.yaml"
    if not path.is_file():
        return None
    shape = read_yaml(path, "data shape")
    regions = (shape.get("regions") or {}).get(Path(config.dataset.root).name)
    dim = shape.get("feature_dim")
    return (regions, dim) if isinstance(regions, int) and isinstance(dim, int) else None


def train_pairs(config: ExperimentConfig) -> tuple[int | None, tuple[int, int] | None, str]:
    """Training pairs per epoch and the region-feature shape, read from the data when it is here, else from
    the shape declared for its folder (configs/datasets/shapes/) and the paper's data of the same name
    (configs/paper/data/); and where they came from, or why they are unknown (a sentence's clause)."""
    from itrlab.config.checks import check_data
    from itrlab.data.kinds import kind_of

    try:
        summary = check_data(config)
        kind = kind_of(config.dataset)
        return summary.n_train_captions, kind.shape(), kind.shape_from
    except Exception:  # noqa: BLE001 - the data is not here (or lives on the cluster): its declared shape
        pass
    name = config.dataset.name
    path = config_dir() / "paper" / "data" / f"{name}.yaml"
    paper = read_yaml(path, "paper data") if path.is_file() else {}
    pairs = paper.get("train_images", 0) * paper.get("captions_per_image", 0) or None
    published = (paper.get("regions"), paper.get("feature_dim"))
    features = declared_shape(config) or (published if all(isinstance(n, int) for n in published) else None)
    if pairs is None:
        return None, None, f"the data of {name} is not here and configs/paper/data/ gives no size of it"
    if features is None:
        return (
            pairs,
            None,
            (
                f"the region features of {name} are not here and no shape is declared for "
                f"{Path(config.dataset.root).name} (configs/datasets/shapes/{name}.yaml)"
            ),
        )
    return pairs, features, f"the declared shape of {name} (the data is not here)"


def trial_configs(spec: SweepSpec, overrides: list[str]) -> tuple[list[dict], list[ExperimentConfig]]:
    """The sweep's grid points (an Optuna search's corners) and the validated config of each."""
    tree = base_tree(spec, overrides)
    points = spec.search_corners() if spec.optuna else spec.grid_points()
    return points, [trial_config(tree, point) for point in points]


def stages_of(config: ExperimentConfig) -> list[tuple[tuple[str, int, str], ExperimentConfig]]:
    """The stages a trial starts from, each with what makes it one shared run: its name, seed and key
    (its resolved config and data)."""
    return [
        ((spec_stage.name, stage_config.seed, stage_key(stage_config, str(config.dataset.root))), stage_config)
        for spec_stage, stage_config in zip(config.stages, stage_configs(config))
    ]


def own_key(config: ExperimentConfig) -> tuple[int, str]:
    """The seed and key a stage of exactly ``config`` would have: a trial that trains from scratch keeps its
    model under it (:func:`itrlab.train.stages.publish_run`)."""
    return config.seed, stage_key(config, str(config.dataset.root))


def stages_trained_by_rows(configs: list[ExperimentConfig]) -> set[tuple[int, str]]:
    """The (seed, key) of every stage of the trials that another trial trains from scratch as it is (a base
    network that is also a baseline row): that trial keeps its model as the stage (``output.keep_as_stage``)."""
    needed = {key[1:] for config in configs for key, _ in stages_of(config)}
    return {own_key(config) for config in configs if not config.stages} & needed


def shared_stages(configs: list[ExperimentConfig]) -> list[ExperimentConfig]:
    """The stages the trials start from, each once: per seed, config and data, less those that a trial
    trains from scratch as it is (its model is kept as the stage: :func:`itrlab.train.stages.publish_run`)."""
    rows = stages_trained_by_rows(configs)
    stages = {key[1:]: stage for config in configs for key, stage in stages_of(config)}
    return [stage for key, stage in stages.items() if key not in rows]


def data_line(dataset) -> str:
    """``data: flickr8k_precomp in /abs/data/flickr8k_precomp/pool1x1``, and what makes the folder where it is
    missing (a data set's ``made_by``; a synthetic set is generated by the first trial)."""
    line = f"data: {dataset.name} in {dataset.root}"
    if Path(dataset.root).is_dir():
        return line
    if dataset.synthetic is not None:
        return f"{line} (generated before the first trial)"
    return f"{line}: not here yet" + (f"; make it with `{dataset.made_by}`" if dataset.made_by else "")


def print_plan(spec: SweepSpec, args: argparse.Namespace, cost: str, command: list[str]) -> int:
    """Print the dry run of ``spec``; ``cost``: its cost lines (:func:`itrlab.sweep.estimates.cost_lines`, the
    figures --list prints); ``command``: the words that run it on a cluster (the command given, less --dry-run:
    :func:`itrlab.cli.cluster_command`)."""
    points, configs = trial_configs(spec, list(args.overrides))
    if spec.group > 1:  # Ray's Tune and torch only for a grouped sweep
        from itrlab.sweep.groups import plan_groups
    groups = plan_groups(spec, points, configs) if spec.group > 1 else []  # bad grouping: one line, exit 2
    workers, cpus, gpus = spec.workers
    keys = spec.table.rows if spec.table else [k for k in (spec.grid or {})]
    _log.info(
        f"sweep {spec.name}"
        + (f", profile {spec.profile}" if spec.profile else "")
        + (
            f": {len(configs)} trial(s) ({len(spec.seeds)} seed(s) each)"
            if spec.optuna is None and not spec.row_seeds
            else f": {len(configs)} trial(s) (seeds {seeds_text(spec)})"
            if spec.optuna is None
            else f": {spec.trial_count} trial(s) (Optuna: {spec.optuna.num_trials} configurations x "
            f"{len(spec.seeds)} seed(s); below, the {len(configs)} corners of its search space)"
        )
    )
    _log.info(
        f"each trial: {workers} worker(s) x {cpus:g} CPU"
        + (f" + {gpus:g} GPU" if gpus else "")
        + f"; {spec.concurrency} at a time"
    )
    _log.info(data_line(configs[0].dataset) if configs else "")
    if spec.deviations:
        _log.info("deviations from the paper:")
        _log.info("\n".join(f"  - {line}" for line in spec.deviations))
    _log.info("\ntrials (one line per row; its seeds run the same recipe):")
    rows: dict[str, dict[str, str]] = {}
    settings: dict[str, str] = {}
    stages: dict[tuple[str, int, str], dict] = {}
    trained_by: dict[tuple[int, str], str] = {}  # a stage that a row trains as it is: that row
    for point, config in zip(points, configs):
        name = row_label(row_key(point, keys)) if keys else "-"
        if not config.stages:
            trained_by[own_key(config)] = name
        line = recipe(config)
        settings[name] = line.pop("method settings")
        used = stages_of(config)
        for key, stage_config in used:
            stages.setdefault(key, {"config": stage_config, "rows": []})["rows"].append(name)
        line["stages"] = ", ".join(key[0] for key, _ in used) or "-"
        if name in rows:
            rows[name]["seeds"] += f",{config.seed}"
        else:
            rows[name] = {"row": name, "seeds": str(config.seed), **line}
    _log.info(_table(list(rows.values())))
    if any(value != "-" for value in settings.values()):
        _log.info("\nmethod settings (method.*):")
        _log.info("\n".join(f"  {name}: {value}" for name, value in settings.items()))
    if groups:
        _log.info(
            f"\ngroups: {len(groups)} Ray trial(s), each training up to {spec.group} trials together as one "
            f"batched model (each still its own MLflow run):"
        )
        for group in groups:
            _log.info(
                "  "
                + ", ".join(
                    row_label(row_key(point, keys)) + f" seed {point['seed']}" if keys else f"seed {point['seed']}"
                    for point in group.points
                )
            )
    if stages:
        _log.info(f"\nstages: {len(stages)}, each trained once and shared by the trials that start from it:")
        for (name, seed, key), entry in stages.items():
            r = recipe(entry["config"])
            row = trained_by.get((seed, key))
            _log.info(
                f"  {name} seed={seed}: {r['method']}, loss {r['loss']}, batch {r['batch']}, {r['epochs']} epochs, "
                f"lr {r['lr']}; used by {', '.join(entry['rows'])}"
                + (f"; the {row} row's training, kept as the stage" if row else "")
            )
    _log.info("\n" + cost)
    _log.info(
        "\non a Ray cluster, with its token (docs/sweeps.md#running-on-a-ray-cluster; your head's dashboard address):"
    )
    _log.info(submit_command(command))
    return 0


def submit_command(command: list[str]) -> str:
    """The ``ray job submit`` line of ``command`` as docs/sweeps.md gives it: the cluster's token, an absolute
    MLflow store (the job runs in a copy of the working folder, without runs/, data/ or mlflow.db)."""
    runtime = json.dumps({"env_vars": {TRACKING_URI_ENV: resolve_tracking_uri()}})
    return (
        f"  RAY_AUTH_MODE=token ray job submit --address {RAY_DASHBOARD} --working-dir . \\\n"
        f"      --runtime-env-json {shlex.quote(runtime)} \\\n"
        f"      -- {shlex.join(command)}"
    )


def training_seconds(
    configs: list[ExperimentConfig],
    stages: list[ExperimentConfig],
    spec: SweepSpec,
    group: int = 1,
    points: list[dict] | None = None,
) -> Cost:
    """The training time of every stage (each once, alone) and trial, the trials in groups of ``group``
    (:mod:`itrlab.sweep.groups`; ``points``: the trials' grid points), measured here or estimated
    (:mod:`itrlab.sweep.cost`)."""
    _, cpus, gpus = spec.workers
    cost = Cost("cuda" if gpus else "cpu")
    shapes: dict[int, tuple] = {}

    def add(config: ExperimentConfig, size: int = 1, classes: int = 1) -> None:
        if id(config) not in shapes:
            shapes[id(config)] = train_pairs(config)
        pairs, features, where = shapes[id(config)]
        group_seconds(config, size, cost.device, cpus, pairs, features, where, cost, classes)

    for stage in stages:
        add(stage)
    if group == 1:
        for config in configs:
            add(config)
        return cost
    from itrlab.sweep.groups import plan_groups
    from itrlab.train.grouped.trainer import step_class_key

    grouped = spec.model_copy(update={"group": group})
    for members in plan_groups(grouped, points or spec.grid_points(), configs):
        add(members.configs[0], len(members.configs), len({step_class_key(c) for c in members.configs}))
    return cost


def _table(rows: list[dict[str, str]]) -> str:
    keys = list(rows[0]) if rows else []
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
    lines = ["  " + "  ".join(k.ljust(widths[k]) for k in keys)]
    lines += ["  " + "  ".join(r[k].ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(lines)
