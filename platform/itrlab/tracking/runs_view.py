"""A saved view of an experiment's runs table: the page a sweep's link opens, its trials as rows.

MLflow 3.17's runs table keeps its state (filter, sort, shown columns, their order) in the browser,
so a plain link opens it as the last browser left it: the sweep one collapsed row, the columns Run
Name, Created, Dataset, Duration, Source, Models. Its saved views ("Views" above the table) are
experiment tags, ``mlflow.sharedViewState.<id>``, each holding ``{"name", "createdAt", "updatedAt",
"state"}`` with ``state`` the table's state as JSON; ``#/experiments/<id>/runs?viewStateShareKey=<id>``
opens one (read from MLflow's JS bundle: the "Save view" dialog writes exactly that). A view of one
sweep invocation's trials filters on their parent run (a filter lists runs flat, children included,
where the default view nests them under a collapsed parent), sorts by the test objective and shows
the swept values, the seed and the metrics first. Every link carries ``workflowType=machine_learning``:
without it MLflow 3.17 opens its GenAI overview, whatever the experiment's ``mlflow.experimentKind``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow's saved views
VIEW_PARAM = "viewStateShareKey"
ITRLAB_VIEW = "itrlab-"  # the ids of the views itrlab saves (a person's views are never touched)
KEEP_VIEWS = 20  # itrlab's views kept per experiment, newest first (MLflow's UI saves no more than 40)
COLUMN_WIDTH = 120  # pixels per shown column: the row's values and the metrics fit beside MLflow's panels


@dataclass(frozen=True)
class RunsView:
    """What a saved view shows: runs matching ``search`` (MLflow's search syntax), sorted by the metric
    ``order_by``, with the tag and metric columns ``tags`` and ``metrics`` first, in that order."""

    name: str
    search: str
    order_by: str
    ascending: bool = False
    tags: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)

    def columns(self) -> list[str]:
        """The table's column ids (MLflow's ``<kind>.`<name>```)."""
        return [*(f"tags.`{tag}`" for tag in self.tags), *(f"metrics.`{metric}`" for metric in self.metrics)]

    def state(self) -> dict:
        """The table state MLflow's runs page reads from a saved view."""
        columns = self.columns()
        return {"searchFilter": self.search, "orderByKey": f"metrics.`{self.order_by}`", "orderByAsc": self.ascending,
                "selectedColumns": columns, "columnOrder": columns,
                "columnWidths": {column: COLUMN_WIDTH for column in columns}}


def children_filter(parent_run_id: str) -> str:
    """MLflow's search for the child runs of ``parent_run_id``."""
    return f"tags.`mlflow.parentRunId` = '{parent_run_id}'"


def save_view(client, experiment_id: str, view_id: str, view: RunsView) -> str:
    """Save ``view`` as the experiment's saved view ``view_id`` (replacing one of that id; the oldest of
    itrlab's views beyond :data:`KEEP_VIEWS` are deleted); returns ``view_id``."""
    tags = client.get_experiment(experiment_id).tags
    now = int(time.time() * 1000)
    created = now
    if VIEW_TAG_PREFIX + view_id in tags:
        try:
            created = int(json.loads(tags[VIEW_TAG_PREFIX + view_id])["createdAt"])
        except (ValueError, KeyError, TypeError):
            pass
    envelope = {"name": view.name, "createdAt": created, "updatedAt": now, "state": json.dumps(view.state())}
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + view_id, json.dumps(envelope))
    ours = sorted(((_created(value), key) for key, value in tags.items()
                   if key.startswith(VIEW_TAG_PREFIX + ITRLAB_VIEW) and key != VIEW_TAG_PREFIX + view_id), reverse=True)
    for _, key in ours[KEEP_VIEWS - 1:]:
        client.delete_experiment_tag(experiment_id, key)
    return view_id


def _created(value: str) -> int:
    try:
        return int(json.loads(value)["createdAt"])
    except (ValueError, KeyError, TypeError):
        return 0
