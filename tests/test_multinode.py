"""A real multi-node Ray cluster on this machine (:mod:`cluster_harness`): a head with no CPUs and
two worker nodes, each in PID and mount namespaces of its own, sharing only ``<root>/shared`` (the RWX
volume of k8s/) and loopback; MLflow as ``mlflow server`` on PostgreSQL with served artifacts, with the
manifests' flags. Sweeps go in through ``ray job submit``: CODER's two tiny trials side by side on the two
nodes, and DBL's smoke sweep, during which one worker node is lost; a DDP trial trains across two nodes.

Skips where PostgreSQL's server programs are absent (Debian: ``apt-get install postgresql``), where psycopg
is absent (``pip install -e '.[dev]'``) or where processes may not create namespaces.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from held import ray_workers, stopped
from itrlab.tracking.chart_names import chart_name, flat_metrics
from servers import BIN

pytestmark = pytest.mark.cluster

SWEEP = "dbl_smoke"
NODE_TAG, NODES_TAG = "itrlab.node_id", "itrlab.node_ids"
# The two DDP runs do the same float operations in the same order: each rank trains its shard of every
# global batch with one torch thread from the same seed, and gloo's allreduce of two ranks adds the same
# two gradient tensors (one addition, commutative in IEEE arithmetic) whether they travel within a node
# or between nodes. So the results should be equal bit for bit (they are: test rsum 72.4 both, the losses
# to the last digit); 1e-9 is far below anything a change in training would move (a recall moves by
# whole queries, at least 0.4 points on the tiny test set) and leaves room only for how floats are stored.
DDP_TOLERANCE = 1e-9


def skip_reason() -> str | None:
    from cluster_harness import isolation_problem, postgres_bin

    if postgres_bin() is None:
        return (
            "PostgreSQL's server programs (initdb, postgres) are not installed: the multi-node cluster's MLflow "
            "runs on PostgreSQL (Debian: apt-get install postgresql; or set ITRLAB_PG_BIN to their folder)"
        )
    try:
        import psycopg  # noqa: F401  # SQLAlchemy 2.1's driver for postgresql:// URIs
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]'): MLflow cannot reach PostgreSQL"
    return isolation_problem()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from cluster_harness import LocalCluster

    started = time.monotonic()
    root = tmp_path_factory.mktemp("cluster")
    # tie_to_parent: every process ends with this one, even if pytest itself is killed
    with LocalCluster.start(root, workers=2, cpus_per_worker=2, tie_to_parent=True) as running:
        running.startup_seconds = time.monotonic() - started
        print(f"cluster up in {running.startup_seconds:.1f} s", flush=True)
        yield running


def submit(cluster, args: list[str], log: Path) -> subprocess.Popen:
    """``ray job submit`` of ``args`` (the repository as the job's working directory), in the background."""
    command = [
        str(BIN / "ray"),
        "job",
        "submit",
        "--address",
        cluster.dashboard_url,
        "--working-dir",
        str(REPO),
        "--",
        "python",
        *args,
    ]
    env = cluster.client_env()
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    with open(log, "w") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent, start_new_session=True
        )


def finish(job: subprocess.Popen, log: Path, timeout: float) -> str:
    try:
        job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        pytest.fail(f"the job did not end in {timeout:.0f} s:\n{log.read_text()[-4000:]}")
    return log.read_text()


def test_manifest_flags_are_the_local_servers_flags(cluster):
    """The local MLflow server runs with the flags of k8s/base/mlflow.yaml (the values swapped for loopback),
    but the basic-auth app's: the local server listens on loopback only, for the user who started it."""
    docs = [doc for doc in yaml.safe_load_all((REPO / "k8s" / "base" / "mlflow.yaml").read_text()) if doc]
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    manifest = {arg.split("=", 1)[0] for arg in container["args"]}
    local = {arg.split("=", 1)[0] for arg in cluster.mlflow_args(5000)[1:]}
    assert container["command"] == ["mlflow", "server"] and manifest - {"--app-name"} == local
    assert cluster.backend_store_uri.startswith("postgresql://mlflow@")  # the manifests' scheme and user


def test_ddp_trial_across_two_nodes_matches_one_node(cluster):
    from mlflow import MlflowClient

    while len(cluster.live_workers()) < 2:  # a node lost by another test: KubeRay would start a new pod
        cluster.add_worker()
    storage = cluster.shared / "ddp"
    data = cluster.shared / "data" / "synthetic" / "tiny"
    log = cluster.root / "ddp-job.log"
    output = finish(
        submit(
            cluster,
            ["jobs/local_cluster.py", "ddp", "--storage", str(storage), f"dataset.root={data}", "train.epochs=2"],
            log,
        ),
        log,
        300,
    )
    assert "succeeded" in output, output[-4000:]
    report = json.loads((storage / "ddp_check.json").read_text())
    spread, pack = report["runs"]["STRICT_SPREAD"], report["runs"]["STRICT_PACK"]
    workers = {node.node_id for node in cluster.live_workers()}
    assert len(set(spread["nodes"])) == 2 and set(spread["nodes"]) <= workers  # rank 0 and rank 1 on two nodes
    assert len(set(pack["nodes"])) == 1 and set(pack["nodes"]) <= workers  # both ranks on one node
    two, one = spread["metrics"]["test_rsum"], pack["metrics"]["test_rsum"]
    print(f"DDP test_rsum: two nodes {two!r}, one node {one!r}, difference {abs(two - one)!r}")
    assert two > 0 and abs(two - one) <= DDP_TOLERANCE
    for key in ("test_i2t_R1", "test_t2i_R1", "test_md", "rsum", "best_val_rsum", "loss"):
        assert abs(spread["metrics"][key] - pack["metrics"][key]) <= DDP_TOLERANCE, key
    # both trials logged through the server (rank 0's run, FINISHED, tagged with rank 0's node)
    client = MlflowClient(tracking_uri=cluster.mlflow_uri)
    for run in (spread, pack):
        found = client.get_run(run["run_id"])
        assert found.info.status == "FINISHED" and found.data.tags[NODE_TAG] == run["nodes"][0]
        assert found.info.artifact_uri.startswith("mlflow-artifacts:")
    # the workers see the shared storage and nothing of the head's disk (the job's working directory)
    assert set(report["workers_see"]) == workers
    for seen in report["workers_see"].values():
        assert seen[report["driver_cwd"]] is None and seen[str(storage)] is not None


def test_coder_sweep_runs_on_both_nodes_at_once(cluster):
    """The CODER preset for clusters: two 2-CPU trials on the 2-CPU worker nodes; each keeps its concept
    vocabulary in its own run folder (checkpointed to the storage), all results reach MLflow."""
    from mlflow import MlflowClient

    while len(cluster.live_workers()) < 2:
        cluster.add_worker()
    log = cluster.root / "coder-job.log"
    output = finish(
        submit(
            cluster,
            [
                "jobs/sweep.py",
                "--preset",
                "coder-tiny",
                "--storage",
                str(cluster.shared / "sweeps"),
                f"dataset.root={cluster.shared / 'data' / 'synthetic' / 'tiny'}",
            ],
            log,
        ),
        log,
        300,
    )
    assert "succeeded" in output, output[-4000:]
    client = MlflowClient(tracking_uri=cluster.mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("coder_tiny").experiment_id])
    children = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
    assert {run.info.status for run in runs} == {"FINISHED"} and len(runs) == 3
    assert sorted(run.data.tags["param.method.K"] for run in children) == ["10", "20"]
    # on worker nodes only (the head has no CPUs); both nodes when both were free at the start, which the
    # DDP test's placement groups may delay: the lost-node test asserts a sweep spread over two nodes
    nodes = {run.data.tags[NODE_TAG] for run in children}
    assert nodes and nodes <= {node.node_id for node in cluster.live_workers()}
    assert all("test_rsum" in flat_metrics(run.data.metrics) for run in children)
    for run in children:  # the trial's folder, concept vocabulary included, checkpointed to the storage
        assert list(Path(run.data.tags["run_dir"]).glob("epoch_*/concepts.json")), run.data.tags["run_dir"]


def test_sweep_survives_a_lost_worker_node(cluster):
    """The smoke sweep through `ray job submit`; the node of the running trial is killed once that trial
    has a checkpoint in the shared storage. Its trial resumes on the other node from that checkpoint,
    the sweep finishes (exit 0), and everything is in MLflow, once."""
    from mlflow import MlflowClient

    started = time.monotonic()
    while len(cluster.live_workers()) < 2:
        cluster.add_worker()
    client = MlflowClient(tracking_uri=cluster.mlflow_uri)
    storage = cluster.shared / "sweeps"
    log = cluster.root / "sweep-job.log"
    # the preset's own data on the shared storage, 3 epochs without a decay, one 2-CPU trial at a time: each
    # trial seconds long, so the node dies while a trial trains, and the 6 trials take a few minutes
    job = submit(
        cluster,
        [
            "jobs/sweep_dbl.py",
            "--preset",
            "smoke",
            "--storage",
            str(storage),
            "--cpus-per-trial",
            "2",
            "--concurrency",
            "1",
            f"dataset.root={cluster.shared / 'data' / 'synthetic' / 'smoke'}",
            "train.epochs=3",
            "train.lr_decay_epochs=[]",
        ],
        log,
    )

    def checkpointed_trial():
        """The RUNNING child run of a trial that saved an epoch (its copy named, with the results it reported, in
        the trial's folder of the shared storage), or None."""
        experiment = client.get_experiment_by_name(SWEEP)
        if experiment is None:
            return None
        for run in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'"):
            stored = Path(run.data.tags.get("run_dir") or "/nonexistent")
            if (
                "mlflow.parentRunId" in run.data.tags
                and (stored / "latest.json").is_file()
                and any(stored.glob("epoch_*/last.pt"))
            ):
                return run
        return None

    victim = lost = None
    deadline = time.monotonic() + 240
    while victim is None:
        assert job.poll() is None, f"the job ended before a trial checkpointed:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, "no trial checkpointed in time"
        try:
            candidate = checkpointed_trial()
        except Exception:  # the store busy or the experiment not there yet: look again
            candidate = None
        if candidate is not None:
            node = cluster.node(candidate.data.tags[NODE_TAG])
            # the node's Ray workers held, then its trial's run read again: still RUNNING, it cannot end before
            # its node is lost, however fast it trains (tests/held.py)
            with stopped(ray_workers(node.pid)) as workers:
                assert workers, f"no Ray worker of {node.name} (pid {node.pid}) was found to hold"
                if client.get_run(candidate.info.run_id).info.status == "RUNNING":
                    victim = candidate
                    lost = cluster.lose_node(node.node_id)  # every process of that node, at once
        if victim is None:
            time.sleep(0.5)
    lost_at = time.monotonic() - started
    output = finish(job, log, 400)
    elapsed = time.monotonic() - started
    print(
        f"lost {lost.name} at {lost_at:.0f} s; sweep job ended after {elapsed:.0f} s "
        f"(cluster start {cluster.startup_seconds:.0f} s)"
    )

    assert job.returncode == 0 and "succeeded" in output, output[-6000:]
    # the report's headline, then where MLflow holds the runs
    # (a short sweep's rows are often still learning: an inconclusive headline is one too)
    assert (
        re.search(
            r"no (converged )?row (differs from|beats) \w+ at 95%|best row: |inconclusive against \w+|"
            r"\w+ beats every",
            output,
        )
        and "MLflow: parent run" in output
    )
    assert len([node for node in cluster.ray_nodes() if not node["is_head_node"]]) == 1  # the lost node is gone

    # MLflow: one parent and one child per grid point, none RUNNING, all through the server
    experiment = client.get_experiment_by_name(SWEEP)
    runs = client.search_runs([experiment.experiment_id])
    assert not [run for run in runs if run.info.status == "RUNNING"]
    parents = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    children = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(run.data.tags["param.cooperative.strategy"] for run in children) == ["A"] * 3 + ["F"] * 3
    assert {run.info.status for run in children} == {"FINISHED"}
    for run in [*parents, *children]:
        assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri  # served, no node's disk
    trials = json.loads(
        Path(client.download_artifacts(parents[0].info.run_id, "sweep/trials.json", str(cluster.root))).read_text()
    )
    assert len(trials["data"]) == 6  # each grid point exactly one result
    statuses = {row[trials["columns"].index("status")] for row in trials["data"]}
    assert statuses == {"finished"}
    # a pivot sweep's report (its one best is the headline: no 'best trial' artifact)
    assert {"sweep/summary.md", "sweep/table.json", "sweep/summary.json", "sweep/report.html", "sweep/report.md"} <= {
        artifact.path for artifact in client.list_artifacts(parents[0].info.run_id, "sweep")
    }
    # the report says what happened: a line of the job's output, and a tag of the retried trial's run
    retried_id = victim.data.tags["itrlab.trial_id"]
    assert f"trial {retried_id} finished after 1 failed attempt(s), retried from its last checkpoint" in output
    notes = {run.data.tags["itrlab.trial_id"]: run.data.tags.get("itrlab.retried") for run in children}
    note = notes.pop(retried_id) or ""
    assert note.startswith("finished after 1 failed attempt(s)") and "actor" in note, note
    assert not any(notes.values()), notes

    # the trials ran on both worker nodes: the lost node, then the other one
    workers = {node.node_id for node in cluster.nodes if not node.head}
    attempts = {run.data.tags["param.cooperative.strategy"]: run.data.tags[NODES_TAG].split(",") for run in children}
    assert set().union(*attempts.values()) <= workers and len(set().union(*attempts.values())) >= 2, attempts
    retried = next(run for run in children if run.info.run_id == victim.info.run_id)
    nodes = retried.data.tags[NODES_TAG].split(",")
    assert nodes[0] == lost.node_id and nodes[-1] != lost.node_id and retried.data.tags[NODE_TAG] == nodes[-1]

    # resumed from its checkpoint in the shared storage: no epoch it had checkpointed is trained again
    resumed = [int(epoch) for epoch in re.findall(r"resuming \S+ after epoch (\d+)", output)]
    assert len(resumed) == 1 and resumed[0] >= 1, output[-4000:]
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, chart_name("rsum"))]
        assert sorted(set(steps)) == [1, 2, 3]
        assert all(steps.count(epoch) == 1 for epoch in range(1, resumed[0] + 1))
        assert run.data.params["train.epochs"] == "3" and "test_rsum" in flat_metrics(run.data.metrics)
        listed = {artifact.path for artifact in client.list_artifacts(run.info.run_id, "recall")}
        assert {"recall/test.json", "recall/test_table.json", "recall/test.md"} <= listed
    # artifacts went to the server's destination folder, which no worker node can see
    assert any((cluster.mlflow_dir / "artifacts").rglob("test_table.json"))


def test_sigterm_to_up_stops_everything_it_started(tmp_path):
    """`jobs/local_cluster.py up` stopped by SIGTERM (what timeout, CI and systemd send) once PostgreSQL,
    MLflow and every Ray node have started: it stops each of them as Ctrl-C does, deletes its local folder
    and state file, says why on one line and exits 143."""
    import os
    import signal

    from cluster_harness.processes import alive, in_namespace

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "cluster"
    env = {**os.environ, "PYTHONPATH": str(REPO / "platform")}
    up = subprocess.Popen(
        [
            str(BIN / "python"),
            str(REPO / "jobs" / "local_cluster.py"),
            "up",
            "--root",
            str(root),
            "--workers",
            "1",
            "--cpus-per-worker",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    state = root / "cluster.json"  # written once every node is started, before the workers have joined
    try:
        deadline = time.monotonic() + 240
        started = None
        while started is None:
            assert up.poll() is None, up.communicate()
            assert time.monotonic() < deadline, "the cluster's state file did not appear"
            time.sleep(0.2)
            try:
                started = json.loads(state.read_text())
            except (OSError, ValueError):  # not written yet, or half
                started = None
        up.send_signal(signal.SIGTERM)
        out, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:  # it did not stop: end it, and what it started with its state
            up.kill()
            from cluster_harness import LocalCluster

            LocalCluster.load(root).stop()
    assert up.returncode == 143, (out, err)
    assert err.strip().splitlines()[-1] == (
        "itrlab: local cluster up: terminated (SIGTERM); stopped every process it had started"
    ), err
    assert started["pg_pid"] and started["mlflow_pid"] and len(started["nodes"]) == 2
    assert not alive(started["pg_pid"]) and not alive(started["mlflow_pid"])
    for node in started["nodes"]:
        assert not alive(node["pid"]) and not in_namespace(node["namespace"]), node
    assert not Path(started["local"]).exists() and not state.exists()
