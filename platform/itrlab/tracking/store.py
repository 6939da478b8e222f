"""The MLflow tracking store: which one (its URI), whether it works, and what a run records of its source.

The tracking URI is ``MLFLOW_TRACKING_URI`` when set, else a SQLite store ``mlflow.db`` in the working directory
(MLflow 3's default, made explicit so that every process agrees on it). :func:`check_tracking_store` fails on one
line within seconds, before a training or sweep starts, when the store does not answer or cannot be written; a busy
server (429, 5xx, no answer in time) is asked again with a growing pause for at most ``$ITRLAB_MLFLOW_WAIT_S``
seconds (default 120). The client's own retries during a run are bounded too (:data:`CLIENT_LIMITS`): about a
minute of 5xx answers, or four minutes without one. :func:`source_tags` are MLflow's source tags (user, script,
git commit); :func:`ui_command` and :func:`ui_hint` say how a person opens the UI on a run or a saved view.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from itrlab.errors import UnavailableError, UserInputError
from itrlab.files import check_writable_dir, file_lock
from itrlab.tracking.runs_view import VIEW_PARAM

_log = logging.getLogger(__name__)

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
WAIT_ENV = "ITRLAB_MLFLOW_WAIT_S"  # how long the store check waits for a busy server
WAIT_DEFAULT_S = 120.0
# MLflow's own retries of a request (its defaults: 7 retries, 120 s each: minutes of silence, then tracebacks)
CLIENT_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "5",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
for _key, _value in CLIENT_LIMITS.items():
    os.environ.setdefault(_key, _value)
# an answer of a server that works but cannot serve now
# A status code alone counts where no digit, dot, colon or equals sign touches it: a refused connection to
# port 50321 ("port=50321", "127.0.0.1:50321/api") is broken, not a 503
BUSY = re.compile(
    r"too many (?:429|5\d\d) error responses|error code (?:429|5\d\d)|timed out|reset by peer|"
    r"RemoteDisconnected|Temporary failure|temporarily unavailable|(?<![\d.:=])50[234](?![\d.])",
    re.IGNORECASE,
)
# MLflow 3.17 shows its GenAI pages (traces, judges, prompts) unless the address says workflowType=machine_learning;
# without it, the browser's last choice (local storage `mlflow.workflowType_v1`), else GenAI: no server setting
# chooses it (docs/mlflow.md#what-mlflow-lets-itrlab-turn-off)
ML_VIEW = "workflowType=machine_learning"
RUN_TAB = "model-metrics"  # a run's page opens on its charts: its test recalls first (itrlab.tracking.chart_names)
OVERVIEW_TAB = "overview"  # a run's description first (a sweep's parent: the links to its report and trials)

logging.getLogger("alembic").setLevel(logging.WARNING)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."


def resolve_tracking_uri(uri: str | None = None) -> str:
    """The tracking URI to use: the argument, else ``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``."""
    if uri:
        return uri
    if os.environ.get(TRACKING_URI_ENV):
        return os.environ[TRACKING_URI_ENV]
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (None for other stores)."""
    prefix = "sqlite:///"  # SQLAlchemy's form: sqlite:///relative.db, sqlite:////absolute.db
    if not tracking_uri.startswith(prefix):
        return None
    path = unquote(tracking_uri[len(prefix) :].split("?", 1)[0])
    return Path(path).absolute() if path and path != ":memory:" else None


@contextlib.contextmanager
def _quick_requests(timeout_s: int) -> Iterator[None]:
    """MLflow's HTTP requests in this block: no retries, ``timeout_s`` seconds (by default MLflow retries
    a dead server for minutes before it says anything)."""
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def short_reason(err: BaseException) -> str:
    """One line out of a (often very long) connection error: the errno text, a timeout, or the first line."""
    text = str(err)
    status = re.search(r"too many (\d{3}) error responses", text)
    if status:
        return f"it answers HTTP {status.group(1)}"
    database = re.search(r"\((?:sqlite3|psycopg2?|pymysql)\.\w+\) ([^\n]+)", text)
    if database:
        return database.group(1).strip()
    errno = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno[-1].strip().lower()
    if "timed out" in text.lower() or "timeout" in type(err).__name__.lower():
        return "no answer (timed out)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    return first if len(first) <= 300 else first[:300] + "..."


def check_tracking_store(tracking_uri: str | None = None, timeout_s: int = 5) -> str:
    """Make sure the MLflow store answers and can be written, before anything expensive starts; returns the URI.

    A ``sqlite:///`` store is created under an exclusive lock on the database file, so that two commands started at
    once on a new store create its tables once. A server gets one request without retries, within ``timeout_s``.
    Raises a UserInputError (which store, what went wrong, what to do) otherwise."""
    from mlflow import MlflowClient

    uri = resolve_tracking_uri(tracking_uri)
    hint = f"set {TRACKING_URI_ENV} to a store that works (or start its server)"
    database = sqlite_path(uri)
    try:
        if database is not None:
            if not database.parent.is_dir():
                raise UserInputError(
                    f"MLflow tracking store {uri}: the folder {database.parent} does not exist; {hint}"
                )
            check_writable_dir(database.parent, f"MLflow tracking store {uri} ({TRACKING_URI_ENV})")
            with file_lock(database, what=f"the MLflow store {database}"):
                MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
        else:
            _ask_server(uri, timeout_s, hint)
    except (UserInputError, UnavailableError):
        raise
    except PermissionError as err:
        raise UserInputError(
            f"MLflow tracking store {uri}: cannot write {err.filename or database} "
            f"({err.strerror or 'permission denied'}); {hint}"
        ) from None
    except Exception as err:  # MlflowException, requests' errors, sqlalchemy's errors, OSError
        raise UserInputError(f"MLflow tracking store {uri} does not work: {short_reason(err)}; {hint}") from None
    return uri


def _ask_server(uri: str, timeout_s: int, hint: str) -> None:
    """One request to a tracking server, asked again with a growing pause while the server is busy, for at
    most ``$ITRLAB_MLFLOW_WAIT_S`` seconds (said once, on stdout); another error is raised at once."""
    from mlflow import MlflowClient

    try:
        wait_s = max(0.0, float(os.environ.get(WAIT_ENV) or WAIT_DEFAULT_S))
    except ValueError:
        raise UserInputError(f"{WAIT_ENV}={os.environ[WAIT_ENV]!r}: a number of seconds") from None
    deadline, pause, attempts = time.monotonic() + wait_s, 1.0, 0
    while True:
        attempts += 1
        try:
            with _quick_requests(timeout_s):
                MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
            return
        except Exception as err:  # noqa: BLE001 - sorted into busy and broken here
            if not BUSY.search(str(err)):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(
                    f"MLflow tracking store {uri} stayed busy for {wait_s:g} s ({attempts} "
                    f"request(s); the last: {short_reason(err)}); nothing was started: try again "
                    f"later, or wait longer (${WAIT_ENV})"
                ) from None
            if attempts == 1:
                _log.info(
                    f"itrlab: MLflow tracking store {uri} is busy ({short_reason(err)}); asking again for up to "
                    f"{wait_s:g} s (${WAIT_ENV})"
                )
            time.sleep(min(pause, left))
            pause, timeout_s = min(pause * 2, 15.0), min(timeout_s * 2, 30)


COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's: the code's commit (on a resumed run, the latest invocation's)
COMMITS_TAG = "itrlab.source.commits"  # a run resumed at another commit: every commit it ran under, oldest first


def commit_history(before: dict[str, str], now: str | None) -> str | None:
    """The value of ``COMMITS_TAG`` for a run reopened at commit ``now`` whose tags were ``before``: the commits it ran
    under, oldest first, space-separated. None where nothing changes (the same commit as its last, or no git)."""
    history = (before.get(COMMITS_TAG) or before.get(COMMIT_TAG) or "").split()
    if not now or not history or history[-1] == now:
        return None
    return " ".join([*history, now])


@functools.cache
def source_tags() -> dict[str, str]:
    """MLflow's own source tags, which ``MlflowClient.create_run`` (unlike ``mlflow.start_run``) leaves
    unset: who ran it, which script, and the git commit of the code when it runs from a checkout."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] not in ("", "-c") else None
    tags = {"mlflow.user": getpass.getuser(), "mlflow.source.type": "LOCAL"}
    if script is not None:
        tags["mlflow.source.name"] = str(script)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
        if commit.returncode == 0 and commit.stdout.strip():
            tags[COMMIT_TAG] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout (an installed wheel)
        pass
    return tags


# MLflow's job runner off: it and its huey consumers (their memory: docs/mlflow.md) serve MLflow's GenAI jobs, which
# itrlab never asks for. Every server and UI the project starts or documents runs with it (the k8s ConfigMap sets it
# too).
JOB_EXECUTION_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
JOB_EXECUTION_OFF = " ".join(f"{name}={value}" for name, value in JOB_EXECUTION_ENV.items())  # as a shell prefix
UI_PORT = 5000


def mlflow_program() -> str:
    """The ``mlflow`` of this environment: the script beside the interpreter (relative when inside the working folder:
    ``.venv/bin/mlflow``), else ``<python> -m mlflow``; never a bare ``mlflow``, not on PATH outside the venv."""
    script = Path(sys.executable).parent / "mlflow"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m mlflow"
    try:
        return shlex.quote(str(script.absolute().relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(script))


def ui_command(tracking_uri: str, port: int = UI_PORT) -> str:
    """The one command that opens the MLflow UI on a store (docs/mlflow.md shows the same): this
    environment's ``mlflow``, one server worker, MLflow's job runner off, on loopback."""
    return (
        f"{JOB_EXECUTION_OFF} {mlflow_program()} ui --backend-store-uri {shlex.quote(tracking_uri)} "
        f"--host 127.0.0.1 --port {port} --workers 1"
    )


def ui_fragment(
    experiment_id: str,
    run_id: str | None = None,
    view: str | None = None,
    artifact: str | None = None,
    tab: str = RUN_TAB,
) -> str:
    """The UI's page as the part of a link after its ``#``, in the model-training view: a run's ``tab`` (default its
    charts; ``overview``: its description), an ``artifact`` of the run, a saved view of the runs table
    (:mod:`itrlab.tracking.runs_view`), or the runs table. It holds wherever the UI is served."""
    query = f"{VIEW_PARAM}={view}&{ML_VIEW}" if view else ML_VIEW
    page = f"/runs/{run_id}/" + (f"artifacts/{artifact}" if artifact else tab) if run_id else "/runs"
    return f"#/experiments/{experiment_id}{page}?{query}"


def ui_link(
    base: str,
    experiment_id: str,
    run_id: str | None = None,
    view: str | None = None,
    artifact: str | None = None,
    tab: str = RUN_TAB,
) -> str:
    """A link into the MLflow UI at ``base`` (:func:`ui_fragment`)."""
    return f"{base.rstrip('/')}/{ui_fragment(experiment_id, run_id, view, artifact, tab)}"


def ui_hint(
    tracking_uri: str,
    experiment_id: str,
    run_id: str | None = None,
    view: str | None = None,
    tab: str = RUN_TAB,
    artifact: str | None = None,
) -> str:
    """How a person opens the MLflow UI on this run (its ``tab`` or ``artifact``), a saved ``view`` of the runs table,
    or the runs table, in the model-training view."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {ui_link(tracking_uri, experiment_id, run_id, view, artifact, tab)}"
    local = ui_link(f"http://127.0.0.1:{UI_PORT}", experiment_id, run_id, view, artifact, tab)
    return f"run `{ui_command(tracking_uri)}` and open {local}"
