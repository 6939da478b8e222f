"""Trained models evaluated on any data set, split and protocol (``itrlab evaluate``), alone or as an ensemble: the mean
of the members' similarity matrices (the published convention: SGRAF, VSE∞'s ``eval_ensemble.py``), each member's own
table beside it.

Every check runs before any scoring. A member scores with the function its run's test table was computed with, so
a run evaluated on its own test split and protocol gives that table again, to the digit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from itrlab.config.schema import PREHEAD
from itrlab.data import PrecompSplit, open_precomp
from itrlab.errors import UserInputError
from itrlab.eval import RecallTable, ScoreFn, evaluate, get_protocol
from itrlab.report.chance import ChanceLevel, chance_of_table
from itrlab.trained.model import TrainedModel

READ_AS = {PREHEAD: " (read before its projection head)"}  # a member's heading, by the embedding it read


@dataclass(frozen=True)
class EvalData:
    """The split to evaluate on and the protocol it is ranked under."""

    split: PrecompSplit
    protocol: str
    dataset: str  # a name for tags and tables: the data folder


@dataclass(frozen=True)
class Evaluation:
    """Each member's table, by its source, and (two or more members) the ensemble's."""

    data: EvalData
    members: dict[str, RecallTable]
    ensemble: RecallTable | None
    embeddings: dict[str, str] = field(default_factory=dict)  # the embedding each member read (eval.embedding)

    def to_dict(self) -> dict:
        return {
            "dataset": self.data.dataset,
            "split": self.data.split.split,
            "protocol": self.data.protocol,
            "n_images": self.data.split.n_images,
            "members": {source: table.to_dict() for source, table in self.members.items()},
            "embeddings": self.embeddings,
            **({"ensemble": self.ensemble.to_dict()} if self.ensemble is not None else {}),
        }

    @property
    def chance(self) -> ChanceLevel | None:
        """What a random ranking gets on this split under this protocol: every table's chance level."""
        return chance_of_table(next(iter(self.members.values())), self.data.split.captions_per_image)

    def format(self) -> str:
        """Each table, then (once: they share the split and protocol) their chance level."""
        blocks = [
            f"{source}{READ_AS.get(self.embeddings.get(source, ''), '')}\n{table.format()}"
            for source, table in self.members.items()
        ]
        if self.ensemble is not None:
            blocks.append(f"ensemble of {len(self.members)} (mean of their similarities)\n{self.ensemble.format()}")
        chance = self.chance
        if chance is not None:
            blocks.append("\n".join(chance.lines()))
        return "\n\n".join(blocks)


def check_ensemble(models: Sequence[TrainedModel]) -> None:
    """UserInputError when two members are one model (the same weights, however each is named) or the members
    expect different inputs (feature layouts)."""
    seen: dict[str, TrainedModel] = {}
    for model in models:
        twin = seen.setdefault(model.weights_sha256, model)
        if twin is not model:
            raise UserInputError(
                f"ensemble: {twin.source} and {model.source} are one model (the same weights, sha256 "
                f"{model.weights_sha256[:12]}); an ensemble's members are different models"
            )
    first = models[0]
    for model in models[1:]:
        if (model.info.n_regions, model.info.feature_dim) != (first.info.n_regions, first.info.feature_dim):
            raise UserInputError(
                f"ensemble: {model.source} expects {model.info.layout()} features, {first.source} "
                f"{first.info.layout()}; an ensemble's members read the same features"
            )


def open_eval_split(
    models: Sequence[TrainedModel],
    data: str | Path | None = None,
    split: str | None = None,
    protocol: str | None = None,
    captions_per_image: int | None = None,
) -> EvalData:
    """The split to evaluate ``models`` on, checked against them and ``protocol`` (nothing scored yet): without
    ``data``, the first model's own test split (or ``split``) under its test protocol; with ``data`` (a precomp folder),
    its ``split`` (default ``test``) under ``protocol`` (default ``all``)."""
    named = [model.source for model in models]
    twice = sorted({source for source in named if named.count(source) > 1})
    if twice:
        raise UserInputError(f"model {twice[0]} is named twice; an ensemble's members are different models")
    check_ensemble(models)
    own = models[0].config
    if protocol is not None:
        get_protocol(protocol)  # an unknown name: one line listing the known ones
    if data is None:
        root, name = own.dataset.root, split or own.dataset.splits.test
        protocol = protocol or (own.eval.test_protocol if split in (None, own.dataset.splits.test) else "all")
        cpi, label = captions_per_image or own.dataset.captions_per_image, own.dataset.name
    else:
        root, name, protocol = Path(data), split or "test", protocol or "all"
        cpi, label = captions_per_image or own.dataset.captions_per_image, str(data)
    opened = open_precomp(root, name, cpi)
    get_protocol(protocol).check(opened.n_images)
    for model in models:
        model.check_split(opened, f"{model.source} on {root} split {name}")
    return EvalData(opened, protocol, label)


def mean_score_fn(functions: Sequence[ScoreFn]) -> ScoreFn:
    """The mean of ``functions``' blocks: the ensemble's similarity."""

    def score(image_slice: slice, caption_slice: slice):
        blocks = [function(image_slice, caption_slice).float() for function in functions]
        return sum(blocks[1:], blocks[0]) / len(blocks)

    return score


def evaluate_models(models: Sequence[TrainedModel], data: EvalData) -> Evaluation:
    """Each model's table on ``data`` and, for two or more, the ensemble's."""
    split, eval_settings = data.split, models[0].config.eval
    functions = [model.score_fn(split) for model in models]  # each member encodes the split once

    def table(function: ScoreFn, chunk: int) -> RecallTable:
        return evaluate(
            function,
            split.n_images,
            protocol=data.protocol,
            captions_per_image=split.captions_per_image,
            image_chunk=chunk,
        )

    members = {
        model.source: table(function, model.config.eval.image_chunk) for model, function in zip(models, functions)
    }
    ensemble = table(mean_score_fn(functions), eval_settings.image_chunk) if len(models) > 1 else None
    return Evaluation(data, members, ensemble, {model.source: model.config.eval.embedding for model in models})


def log_evaluation(
    tracker, models: Sequence[TrainedModel], result: Evaluation, source_runs: Sequence[str | None]
) -> str:
    """One MLflow run of ``result``, returning its id: the ensemble's (else the model's) table as metrics and ``test``
    table, each member's as ``member<k>`` metrics, tags naming the models and their ``source_runs`` (each checked by
    :func:`itrlab.trained.sources.source_run`; None: not named)."""
    data = result.data
    sources = {f"itrlab.source_run.{k}": run for k, run in enumerate(source_runs, 1) if run}
    kind = f"ensemble of {len(models)}" if len(models) > 1 else "model"
    tags = {
        "itrlab.evaluation": kind,
        "dataset": data.dataset,
        "split": data.split.split,
        "protocol": data.protocol,
        "method": "+".join(model.info.method for model in models),
        "embedding": "+".join(model.config.eval.embedding for model in models),
        **sources,
        **{f"itrlab.source.{k}": model.source for k, model in enumerate(models, 1)},
        "mlflow.note.content": f"evaluation of {kind} ({', '.join(m.source for m in models)}) on {data.dataset} "
        f"split {data.split.split} under {data.protocol}",
    }
    with tracker.ending():
        run_id = tracker.start(run_name=f"evaluate-{kind.replace(' ', '-')}", tags=tags, params={})
        headline = result.ensemble if result.ensemble is not None else next(iter(result.members.values()))
        tracker.log_recall_table(headline, "test", chance=result.chance)
        if len(models) > 1:
            for k, table in enumerate(result.members.values(), 1):
                tracker.log_final_metrics(table.metrics(prefix=f"member{k}_"))
        tracker.log_dict(result.to_dict(), "evaluation.json")
    return run_id
