"""MLflow tracking: :class:`MlflowTracker` writes one run, and reads runs back through the
:class:`~itrlab.tracking.run_reader.RunReader` it extends (the only package of itrlab that imports MLflow: this
module, :mod:`~itrlab.tracking.run_reader`, :mod:`~itrlab.tracking.store`, :mod:`~itrlab.tracking.tables`,
:mod:`~itrlab.tracking.models` and :mod:`~itrlab.tracking.model_registry`).

One tracker writes one run: the flattened config as params, per-epoch metrics, recall tables (as an
MLflow table, JSON and Markdown), and tags naming the method, dataset, protocol and seed. Metrics go to MLflow
in its chart sections (``1_test/rsum``: :mod:`~itrlab.tracking.chart_names`) and come back by itrlab's flat
names (``test_rsum``), from runs logged either way. It talks to
MLflow through an explicit ``MlflowClient`` bound to one tracking URI, never through the process-global
active run, so that several trackers (a sweep's parent and its trials) can live in one process. How its
run ends is one owner's (:meth:`MlflowTracker.ending`); a store that can no longer be written becomes one
:class:`~itrlab.errors.TrackingError` line.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Dataset as MlflowDataset
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException

from itrlab.errors import TrackingError, UserInputError, failure_reason, one_line_logs
from itrlab.interrupts import interruption
from itrlab.process_id import owner_id
from itrlab.tracking.chart_names import chart_name, flat_name, logged_flat
from itrlab.tracking.run_reader import PARENT_TAG, RunReader
from itrlab.tracking.runs_view import RECALLS_TAG, RunsView, recalls_summary, save_view
from itrlab.tracking.store import (
    COMMIT_TAG,
    COMMITS_TAG,
    RUN_TAB,
    commit_history,
    resolve_tracking_uri,
    short_reason,
    source_tags,
    ui_hint,
)
from itrlab.tracking.tables import significant, write_table

_log = logging.getLogger(__name__)

if TYPE_CHECKING:  # only for annotations: the store check runs before torch is imported
    from itrlab.eval import RecallTable


class BesideTable(Protocol):
    """What a recall table's chance level gives MLflow (:class:`itrlab.report.chance.ChanceLevel`): flat metrics,
    and Markdown to follow the table's."""

    def metrics(self) -> dict[str, float]: ...

    def markdown(self) -> str: ...


MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
# MLflow 3 opens an experiment on its GenAI overview (traces, tokens) unless the experiment says it holds
# model training (and the page is in the machine-learning view: store.ML_VIEW): then on the runs table
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
DESCRIPTION_TAG = "mlflow.note.content"  # a run's description
STOP_REASON_TAG = "itrlab.stop_reason"  # why a run ended FAILED or KILLED, on one line
OWNER_TAG = "itrlab.owner"  # the process that ends the run (itrlab.tracking.watchdog, itrlab.tracking.owners)
CHANGES_TAG = "itrlab.resume_changes"  # what the latest --resume --allow-changes changed
CLOCK_TAG = "itrlab.clock_warning"  # a run whose recorded start lies in the future of the clock that reopened it
CLOCK_SLACK_MS = 60_000  # clocks of one cluster may differ this much without a warning


def end_time_ms(start_ms: int | None, elapsed_s: float = 0.0) -> int:
    """When a run ends, for MLflow (which shows end - start as its duration): now, or, when the run's start
    lies in the future of this clock (a machine whose clock was ahead started it), its start plus the time
    measured here on the monotonic clock: never a negative duration."""
    now = int(time.time() * 1000)
    if start_ms is not None and now < start_ms:
        return int(start_ms + max(0.0, elapsed_s) * 1000)
    return now


one_line_logs("mlflow.store.db.utils")  # its store errors reach the user as one TrackingError line


def _store_writes(method):
    """A tracker call that writes to the store: a store that can no longer be written (a full disk,
    a read-only folder, a server gone) becomes one TrackingError instead of MLflow's traceback."""

    @functools.wraps(method)
    def write(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except TrackingError:
            raise
        except (MlflowException, OSError, sqlite3.Error) as err:
            raise TrackingError(
                f"the MLflow store {self.tracking_uri} can no longer be written: {short_reason(err)}{_left_as_is(self)}"
            ) from None
        except Exception as err:  # sqlalchemy's errors, unwrapped by MLflow in some paths
            if type(err).__module__.startswith("sqlalchemy"):
                raise TrackingError(
                    f"the MLflow store {self.tracking_uri} can no longer be written: "
                    f"{short_reason(err)}{_left_as_is(self)}"
                ) from None
            raise

    return write


def _left_as_is(tracker: MlflowTracker) -> str:
    """What becomes of the tracker's run when its store cannot record how it ended."""
    if tracker.run_id is None:
        return ""
    return f"; run {tracker.run_id} stays as the store last recorded it (--resume ends it once the store is writable)"


class MlflowTracker(RunReader):
    """Writes one MLflow run (create, or reopen by id when a training resumes), and reads runs back
    (:class:`~itrlab.tracking.run_reader.RunReader`)."""

    def __init__(self, experiment: str, tracking_uri: str | None = None):
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        mlflow.set_tracking_uri(self.tracking_uri)  # for the artifact helpers of log_table
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        self.run_id: str | None = None
        self.experiment_id = self._experiment_id(experiment)
        self.experiment = experiment
        self.default_tags: dict[str, Any] = {}  # added to the tags of a run this tracker creates or reopens
        self.default_params: dict[str, Any] = {}  # and to its params (a sweep trial's variant, by name)
        self._start_ms: int | None = None  # the run's recorded start, and when this process took it up
        self._taken_up = time.monotonic()
        self.resume_changes: list[str] = []  # what a --resume --allow-changes changed: recorded when reopened
        self.flat_names = False  # a run logged before the chart sections, reopened: it keeps its flat names
        self.logged_names: dict[str, str] = {}  # a reopened run's metrics: itrlab's name -> the MLflow name it has

    @classmethod
    def for_reading(cls, tracking_uri: str | None = None) -> MlflowTracker:
        """A tracker that reads runs of any experiment (``run_record``, ``download_artifact``) and
        creates nothing."""
        tracker = cls.__new__(cls)
        tracker.tracking_uri = resolve_tracking_uri(tracking_uri)
        tracker.client = MlflowClient(tracking_uri=tracker.tracking_uri)
        tracker.experiment_id = tracker.experiment = tracker.run_id = None
        tracker.default_tags, tracker.default_params = {}, {}
        tracker._start_ms, tracker._taken_up, tracker.resume_changes = None, time.monotonic(), []
        tracker.flat_names, tracker.logged_names = False, {}
        return tracker

    @_store_writes
    def _experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return found.experiment_id
        try:
            return self.client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException:  # created by another process at the same moment (two sweeps, two trials)
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    # -- run lifecycle -----------------------------------------------------------------------
    def start(
        self,
        run_name: str,
        tags: Mapping[str, Any],
        params: Mapping[str, str],
        run_id: str | None = None,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a run, or reopen ``run_id`` (a resumed training) and mark it running again."""
        params = {**self.default_params, **params}
        # the process that ends this run (a sweep's driver for its trials): runs it leaves RUNNING when
        # it dies are closed by the next command (itrlab.tracking.owners)
        owner = str(self.default_tags.get(OWNER_TAG) or tags.get(OWNER_TAG) or owner_id())
        self._taken_up = time.monotonic()
        if run_id is not None:
            try:
                self.client.get_run(run_id)
            except MlflowException:
                raise UserInputError(
                    f"MLflow run {run_id} (recorded in the run directory's mlflow_run.json) is not "
                    f"in the tracking store {self.tracking_uri}; point MLFLOW_TRACKING_URI at the "
                    f"store it was logged to, or delete mlflow_run.json to start a new run"
                ) from None
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            run = self.client.get_run(run_id)
            previous = run.data
            if STOP_REASON_TAG in previous.tags:  # why it stopped last time no longer holds
                self.client.delete_tag(run_id, STOP_REASON_TAG)
            # where the run lives now (a trial restarted after its sweep's driver died may get a new folder)
            moved = {k: str(v) for k, v in self.default_tags.items() if previous.tags.get(k) != str(v)}
            # resumed at another commit (a sweep continued after a change of code): the commit now, and the history
            now = source_tags().get(COMMIT_TAG)
            history = commit_history(previous.tags, now)
            if history is not None:
                moved |= {COMMIT_TAG: now, COMMITS_TAG: history}
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in {**moved, OWNER_TAG: owner}.items()])
            self._start_ms = run.info.start_time
            self.flat_names = logged_flat(previous.metrics)  # one run's charts keep one name per metric
            self.logged_names = {flat_name(key): key for key in previous.metrics}
            self._warn_of_clock()
            if self.resume_changes:
                self.record_changes(self.resume_changes)
            params = {k: v for k, v in params.items() if k not in previous.params}
        else:
            all_tags = {
                **source_tags(),
                **{k: str(v) for k, v in {**tags, **self.default_tags}.items()},
                OWNER_TAG: owner,
            }
            if parent_run_id:
                all_tags[PARENT_TAG] = parent_run_id
            run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=run_name)
            self.run_id = run.info.run_id
            self._start_ms = run.info.start_time
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])
        return self.run_id

    def find_run(self, tags: Mapping[str, str]) -> str | None:
        """The id of this experiment's run carrying all ``tags`` (the newest), or None."""
        query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=query, max_results=1, order_by=["attributes.start_time DESC"]
        )
        return runs[0].info.run_id if runs else None

    def _warn_of_clock(self) -> None:
        """A reopened run whose recorded start lies in the future of this clock: said once, and tagged."""
        ahead_ms = (self._start_ms or 0) - int(time.time() * 1000)
        if ahead_ms > CLOCK_SLACK_MS:
            note = (
                f"the run's recorded start is {ahead_ms / 1000:,.0f} s in the future of the clock of the machine "
                f"that resumed it (the clock that started it was ahead); its duration counts the time measured "
                f"on this machine's monotonic clock"
            )
            _log.warning(f"itrlab: warning: MLflow run {self.run_id}: {note}")
            self.client.set_tag(self.run_id, CLOCK_TAG, note)

    @_store_writes
    def end(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.client.set_terminated(
                self.run_id,
                status=RunStatus.to_string(RunStatus.from_string(status)),
                end_time=end_time_ms(self._start_ms, time.monotonic() - self._taken_up),
            )

    def end_if_running(self, status: str) -> None:
        """End this run ``status`` unless it has ended already: a sweep's driver that was interrupted
        ends its trials' runs KILLED, and a trial process stopped with an exception a moment later
        must not turn that into FAILED."""
        if self.run_id is not None and self.status() == "RUNNING":
            self.end(status)

    def stop(self, status: str, reason: str) -> None:
        """Leave ``reason`` (its first line) in ``itrlab.stop_reason`` and end this run ``status`` unless it
        has ended already (a training loop ends its own run when it fails)."""
        self.set_tags({STOP_REASON_TAG: reason.splitlines()[0] if reason.strip() else status})
        self.end_if_running(status)

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """The one owner of how this tracker's run ends, however the block ends: FINISHED (if still
        RUNNING), KILLED on Ctrl-C or SIGTERM (the signal as the reason), FAILED with the error's first line
        in ``itrlab.stop_reason``. A run ended already (a sweep driver ends its trials' runs KILLED
        when interrupted) keeps its status. MLflow failing too never hides the block's own error."""
        try:
            yield
        except KeyboardInterrupt:
            self._settle("KILLED", interruption()[0])
            raise
        except TrackingError:
            raise  # the store cannot record how the run ended: the error says so
        except BaseException as err:
            self._settle("FAILED", failure_reason(err))
            raise
        if self.run_id is not None:
            self.end_if_running("FINISHED")

    def _settle(self, status: str, reason: str) -> None:
        if self.run_id is None:
            return
        try:
            self.stop(status, reason)
        except Exception as err:  # the block's own error is the one to show
            _log.warning(f"itrlab: could not end the MLflow run {status}: {failure_reason(err)}")

    def end_run(self, run_id: str, status: str, tags: Mapping[str, Any] | None = None) -> None:
        """End another run of this store (a sweep's trial left RUNNING by a killed process)."""
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        start = self.client.get_run(run_id).info.start_time
        self.client.set_terminated(
            run_id, status=RunStatus.to_string(RunStatus.from_string(status)), end_time=end_time_ms(start)
        )

    # -- logging ------------------------------------------------------------------------------
    @_store_writes
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Every metric (itrlab's names), in its chart section (:func:`~itrlab.tracking.chart_names.chart_name`), to 6
        significant digits (31.8, not 31.799999999999997: the UI shows what is stored). A reopened run logs a metric
        under the name it already has (one chart per metric, whatever names the code gives now)."""
        timestamp = mlflow.utils.time.get_current_time_millis()
        new = (lambda key: key) if self.flat_names else chart_name
        batch = [
            Metric(self.logged_names.get(k) or new(k), significant(float(v)), timestamp, step)
            for k, v in metrics.items()
        ]
        self.client.log_batch(self.run_id, metrics=batch)

    @_store_writes
    def log_final_metrics(self, metrics: Mapping[str, float]) -> None:
        """Values a run has once (test recall, best epoch, cost), logged at step 0.

        MLflow's chart view draws a metric as a line over steps when any run logged it at a step
        >= 1, and as one bar per run otherwise: a final value logged at the last epoch's step would
        show as a lone dot.
        """
        self.log_metrics(metrics, step=0)

    def run_metrics(self, keys: tuple[str, ...]) -> dict[str, float]:
        """The latest values of ``keys`` that this tracker's run holds (a key it lacks is left out)."""
        metrics = self.metrics(self.run_id) if self.run_id else {}
        return {key: float(metrics[key]) for key in keys if key in metrics}

    @_store_writes
    def record_changes(self, lines: list[str], run_id: str | None = None) -> int:
        """What a ``--resume --allow-changes`` changed, on the run: the param ``resume.<n>.changes`` (a param is
        never logged twice) and the tag ``itrlab.resume_changes`` (the latest). Returns n."""
        run_id = run_id or self.run_id
        known = self.client.get_run(run_id).data.params
        count = 1 + sum(1 for key in known if key.startswith("resume.") and key.endswith(".changes"))
        text = "; ".join(lines)
        self.client.log_batch(
            run_id,
            params=[Param(f"resume.{count}.changes", text[:6000])],
            tags=[RunTag(CHANGES_TAG, f"resume {count}: {text}"[:8000])],
        )
        return count

    @_store_writes
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def delete_tag(self, key: str) -> None:
        if key in self.client.get_run(self.run_id).data.tags:
            self.client.delete_tag(self.run_id, key)

    @_store_writes
    def log_recall_table(
        self, table: RecallTable, split: str, epoch: int = 0, chance: BesideTable | None = None
    ) -> None:
        """The table as an MLflow table, JSON and Markdown artifacts, and ``{split}_*`` metrics; with ``chance``
        (a random model's recalls on the table's protocol), its metrics (``chance_*``) and its Markdown under the
        table's.

        MLflow appends to an existing table artifact, so each logging adds rows tagged with
        ``epoch`` (the epochs trained): a resumed run that trains longer shows both results.
        The JSON and Markdown artifacts hold the latest table. The metrics are final values and go
        to step 0 (``log_final_metrics``). The test table's six recalls also go to the tag
        :data:`~itrlab.tracking.runs_view.RECALLS_TAG`, the runs table's one column of them.
        """
        columns = table.columns()
        columns["epoch"] = [epoch] * len(columns["direction"])
        self.client.log_table(self.run_id, data=columns, artifact_file=f"recall/{split}_table.json")
        self.client.log_dict(self.run_id, table.to_dict(), f"recall/{split}.json")
        text = table.to_markdown() + (f"\n\n{chance.markdown()}" if chance is not None else "")
        self.client.log_text(self.run_id, text, f"recall/{split}.md")
        metrics = table.metrics(prefix=f"{split}_")
        self.log_final_metrics({**metrics, **(chance.metrics() if chance is not None else {})})
        summary = recalls_summary(metrics) if split == "test" else None
        if summary is not None:
            self.set_tags({RECALLS_TAG: summary})

    @_store_writes
    def log_table(self, data: dict[str, list], artifact_file: str) -> None:
        self.client.log_table(self.run_id, data=data, artifact_file=artifact_file)

    @_store_writes
    def replace_table(self, data: dict[str, list], artifact_file: str) -> None:
        """Write ``data`` as the MLflow table ``artifact_file``, replacing what was there.

        Dotted column names (``cooperative.strategy``) become ``cooperative/strategy``: MLflow's table view
        reads a dot as a path into the row and shows an empty column. ``MlflowClient.log_table`` appends
        to an existing table (reading it back through pandas, which
        turns string ids that look like numbers into integers): a resumed sweep would list its trials
        twice. This writes the same JSON layout (pandas' ``split`` orientation) over the old file, with
        floats to 6 significant digits (the UI shows them as written: ``13.8333333333``).
        """
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            write_table(data, path)
            self.client.log_artifact(self.run_id, str(path), str(Path(artifact_file).parent) or None)
        logged = json.loads(self.client.get_run(self.run_id).data.tags.get("mlflow.loggedArtifacts", "[]"))
        entry = {"path": artifact_file, "type": "table"}
        if entry not in logged:  # how the MLflow UI knows the file is a table
            self.client.set_tag(self.run_id, "mlflow.loggedArtifacts", json.dumps([*logged, entry]))

    @_store_writes
    def log_dict(self, data: dict, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, data, artifact_file)

    @_store_writes
    def log_dataset(self, name: str, digest: str, source: str, context: str = "training") -> None:
        """Log the run's data set as an MLflow input (the UI's Dataset column): name, digest, source."""
        dataset = MlflowDataset(name=name, digest=digest, source_type="local", source=json.dumps({"uri": source}))
        inputs = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])]
        try:
            self.client.log_inputs(self.run_id, datasets=inputs)
        except MlflowException as err:
            # MLflow looks a data set up, then inserts it: two runs of one experiment that start together (a
            # sweep's trials) can both miss it, and the second insert breaks the store's unique key. The data
            # set is there now, and the same call finds it.
            if "unique" not in str(err).lower():
                raise
            self.client.log_inputs(self.run_id, datasets=inputs)

    @_store_writes
    def log_model(self, bundle: str | Path, requirements: list[str]) -> str:
        """Log the itrlab model folder ``bundle`` as this run's MLflow model (``pyfunc``, artifact ``model``,
        :mod:`itrlab.tracking.models`); its URI."""
        from itrlab.tracking.models import log_model_folder

        return log_model_folder(self.client, self.run_id, bundle, requirements)

    @_store_writes
    def register_rows(self, rows) -> list:
        """A sweep's rows (:class:`~itrlab.tracking.model_registry.RowModels`) in the store's model registry, one
        version per seed's model (:mod:`itrlab.tracking.model_registry`); what each version became."""
        from itrlab.tracking.model_registry import register_rows

        return register_rows(self.client, rows)

    @_store_writes
    def log_gallery(self, page: str, artifact: str, run_id: str | None = None) -> None:
        """The retrieval gallery ``page`` (HTML) as the artifact ``artifact`` of this run, or of ``run_id`` (a
        finished run whose model it shows); the run's tag ``itrlab.gallery`` names it."""
        from itrlab.tracking.models import log_gallery

        log_gallery(self.client, run_id or self.run_id, page, artifact)

    @_store_writes
    def log_file(self, path: str | Path, artifact_dir: str | None = None) -> None:
        """Log the file ``path`` (a plot, say) under ``artifact_dir`` of this run."""
        self.client.log_artifact(self.run_id, str(path), artifact_dir)

    @_store_writes
    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def set_description(self, text: str) -> None:
        """The run's description (Markdown), shown in full at the top of its page in the MLflow UI."""
        self.set_tags({DESCRIPTION_TAG: text})

    @_store_writes
    def save_view(self, view_id: str, view: RunsView) -> str:
        """Save a view of the experiment's runs table (:mod:`itrlab.tracking.runs_view`); returns its id."""
        return save_view(self.client, self.experiment_id, view_id, view)

    def ui_hint(self, view: str | None = None, tab: str = RUN_TAB, artifact: str | None = None) -> str:
        """How to open this run in the MLflow UI (its ``tab``, or its ``artifact``), or the saved view ``view`` of its
        experiment's runs table."""
        return ui_hint(self.tracking_uri, self.experiment_id, None if view else self.run_id, view, tab, artifact)
