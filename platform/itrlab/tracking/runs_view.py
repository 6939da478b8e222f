"""A saved view of an experiment's runs table: a sweep's trials as rows (its parent run's description links it).

MLflow 3.17's runs table keeps its state (filter, sort, columns, their order and ``columnWidths``) in the browser,
so a plain link opens it as the last browser left it. A saved view is an experiment tag,
``mlflow.sharedViewState.<id>``, holding ``{"name", "createdAt", "updatedAt", "state"}`` with ``state`` the
table's state as JSON, opened by ``#/experiments/<id>/runs?viewStateShareKey=<id>`` (what the UI's "Save view"
dialog writes). A sweep's view filters on the parent run (rows flat, not nested under a collapsed parent), sorts
by the test objective and shows the test rsum, the six recalls, the swept values and the seed first. Every link
carries ``workflowType=machine_learning``: without it MLflow 3.17 opens its GenAI overview.

The six test recalls are one tag column, :data:`RECALLS_TAG` (:func:`recalls_summary`), and the widths narrow
MLflow's pinned columns (``attributes.`Run Name```, ``runDateAndNestInfo``), because beside MLflow's sidebar and
Assistant panel a 1280-px window holds only four 100-px metric columns: so it shows the test rsum and the recalls'
column, a 1600-px one R@1 and R@5 as metric columns too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from itrlab.eval.names import RECALLS
from itrlab.tracking.chart_names import chart_name

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow's saved views
VIEW_PARAM = "viewStateShareKey"
ITRLAB_VIEW = "itrlab-"  # the ids of the views itrlab saves (a person's views are never touched)
KEEP_VIEWS = 20  # itrlab's views kept per experiment, newest first (MLflow's UI saves no more than 40)
# pixels per metric column: its header whole (the UI shows a metric by its full name, about 7 px a character after
# a 12-px margin), and the sort arrow's 14 px on the column the table is sorted by: 100 for `1_test/i2t_R01`, 133 for
# `1_test-sum/rsum` sorted
METRIC_WIDTH = 100
SORT_ARROW_WIDTH = 14
TAG_WIDTH = 110
# MLflow's pinned columns, narrowed: the run's name (`strategy=F seed=0`) and "Created" (`2 minutes ago`)
PINNED_WIDTHS = {"attributes.`Run Name`": 132, "runDateAndNestInfo": 110}
# a run's six test recalls in one tag (module doc): its key is the column's header (letters, digits, spaces, "/")
RECALLS_TAG = "test i2t R1 R5 R10 / t2i R1 R5 R10"
SUMMARY_WIDTH = 248


def metric_width(name: str, sorted_by: bool = False) -> int:
    """The width of the column of the metric whose MLflow name is ``name``: its header whole (``sorted_by``: with the
    sort arrow)."""
    return max(METRIC_WIDTH, 7 * len(name) + 14) + (SORT_ARROW_WIDTH if sorted_by else 0)


def recalls_summary(metrics: Mapping[str, float], prefix: str = "test_") -> str | None:
    """The value of :data:`RECALLS_TAG` from a run's metrics (itrlab's names): ``13.8 32.4 44.1 / 4.4 12.4 18.5``
    (R@1, R@5, R@10 image to text, then text to image, one decimal); None unless all six are there."""
    values = [metrics.get(prefix + name) for name in RECALLS]
    if any(value is None for value in values):
        return None
    text = [f"{float(value):.1f}" for value in values]
    return f"{' '.join(text[:3])} / {' '.join(text[3:])}"


@dataclass(frozen=True)
class RunsView:
    """What a saved view shows: runs matching ``search`` (MLflow's search syntax), sorted by the metric ``order_by``,
    with these columns first: the first of ``metrics``, the tag ``summary``, the tags ``tags``, then the rest of
    ``metrics`` (itrlab's names, shown by their MLflow names)."""

    name: str
    search: str
    order_by: str
    ascending: bool = False
    tags: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    def metric_columns(self) -> list[str]:
        return [f"metrics.`{chart_name(metric)}`" for metric in self.metrics]

    def tag_columns(self) -> list[str]:
        return [f"tags.`{tag}`" for tag in self.tags]

    def summary_columns(self) -> list[str]:
        return [f"tags.`{tag}`" for tag in self.summary]

    def columns(self) -> list[str]:
        """The table's column ids (MLflow's ``<kind>.`<name>```), in their order."""
        metrics = self.metric_columns()
        return [*metrics[:1], *self.summary_columns(), *self.tag_columns(), *metrics[1:]]

    def state(self) -> dict:
        """The table state MLflow's runs page reads from a saved view."""
        columns = self.columns()
        widths = {
            **PINNED_WIDTHS,
            **{
                column: metric_width(chart_name(metric), metric == self.order_by)
                for column, metric in zip(self.metric_columns(), self.metrics)
            },
            **dict.fromkeys(self.tag_columns(), TAG_WIDTH),
            **dict.fromkeys(self.summary_columns(), SUMMARY_WIDTH),
        }
        return {
            "searchFilter": self.search,
            "orderByKey": f"metrics.`{chart_name(self.order_by)}`",
            "orderByAsc": self.ascending,
            "selectedColumns": columns,
            "columnOrder": [*PINNED_WIDTHS, *columns],
            "columnWidths": widths,
        }


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
    ours = sorted(
        (
            (_created(value), key)
            for key, value in tags.items()
            if key.startswith(VIEW_TAG_PREFIX + ITRLAB_VIEW) and key != VIEW_TAG_PREFIX + view_id
        ),
        reverse=True,
    )
    for _, key in ours[KEEP_VIEWS - 1 :]:
        client.delete_experiment_tag(experiment_id, key)
    return view_id


def _created(value: str) -> int:
    try:
        return int(json.loads(value)["createdAt"])
    except (ValueError, KeyError, TypeError):
        return 0
