"""The MLflow server exactly as k8s/ configures it, for real, against a real S3 API.

The command and flags come from k8s/base/mlflow.yaml and the settings from the base kustomization's
ConfigMaps (basic_auth.ini: MLflow's basic-auth app), with four swaps only: SQLite for PostgreSQL (the
runs' store and the auth database), a loopback host and port, one worker. The client logs with the
account the Secret gives the Ray pods; a request without it is refused (401).
The S3 bucket is served by ``moto`` in server mode on loopback. A client without any S3
credentials (like a Ray worker, which only has MLFLOW_TRACKING_URI) logs a run with a recall table
through the server (--serve-artifacts), reads the artifacts back, and finds the objects in the
bucket under the manifests' --artifacts-destination. --allowed-hosts lets the Service's names in
and keeps other Host headers out.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import boto3
import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from itrlab.eval import RecallTable
from itrlab.tracking import MlflowTracker
from itrlab.tracking.chart_names import flat_metrics
from servers import BIN, free_port, moto_server, stop, wait_http

pytestmark = pytest.mark.e2e

BASE = REPO / "k8s" / "base"
AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "MLFLOW_S3_ENDPOINT_URL",
)
S3_KEY, S3_SECRET = "itrlab-test-key", "itrlab-test-secret"  # any pair: moto accepts all


def manifest_mlflow() -> tuple[dict, dict[str, str]]:
    """The MLflow container of the base manifests and the settings its ConfigMap gives it."""
    docs = [doc for doc in yaml.safe_load_all((BASE / "mlflow.yaml").read_text()) if doc]
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "mlflow")
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    generator = next(g for g in kustomization["configMapGenerator"] if g["name"] == "itrlab-mlflow-settings")
    settings = dict(literal.split("=", 1) for literal in generator["literals"])
    refs = [e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e]
    assert refs == ["itrlab-mlflow-settings"], refs
    return container, settings


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in args."""

    def sub(match: re.Match) -> str:
        assert match.group(1) in env, f"$({match.group(1)}) is not set in the container"
        return env[match.group(1)]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


ACCOUNT = ("itrlab", "itrlab-test-password-0123456789")  # the Secret itrlab-mlflow-auth's username and password


def status_with_host(port: int, host: str, account: tuple[str, str] | None = ACCOUNT) -> int:
    import base64

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": host}
    if account:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(account).encode()).decode()
    try:
        conn.request("GET", "/api/2.0/mlflow/experiments/search?max_results=1", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def auth_config(container: dict, tmp_path: Path) -> dict[str, str]:
    """The basic-auth settings the manifests mount (MLFLOW_AUTH_CONFIG_PATH), written under ``tmp_path`` with
    SQLite for its PostgreSQL database; the environment that points the server at them."""
    env = {e["name"]: e for e in container["env"]}
    name = Path(env["MLFLOW_AUTH_CONFIG_PATH"]["value"]).name
    ini = (BASE / name).read_text()
    assert re.search(r"^database_uri = postgresql://", ini, flags=re.M)
    ini = re.sub(r"^database_uri = .*$", f"database_uri = sqlite:///{tmp_path / 'auth.db'}", ini, flags=re.M)
    (tmp_path / name).write_text(ini)
    secrets = {"username": ACCOUNT[0], "password": ACCOUNT[1], "flask_secret_key": "test-flask-secret"}
    values = {
        key: secrets[e["valueFrom"]["secretKeyRef"]["key"]]
        for key, e in env.items()
        if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "itrlab-mlflow-auth"
    }
    assert set(values) == {"MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"}
    return {**values, "MLFLOW_AUTH_CONFIG_PATH": str(tmp_path / name)}


def test_manifest_mlflow_server_serves_s3_artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("flask_wtf", reason="MLflow's basic-auth app needs Flask-WTF (pip install -e '.[dev]')")
    container, settings = manifest_mlflow()
    assert container["command"] == ["mlflow", "server"]
    args = [expand(arg, settings) for arg in container["args"]]
    flags = dict(arg.split("=", 1) if "=" in arg else (arg, None) for arg in args)
    # what the deployment relies on, and this test with it
    assert urlparse(flags["--backend-store-uri"]).scheme == "postgresql"
    assert "--serve-artifacts" in flags
    destination = flags["--artifacts-destination"]
    assert urlparse(destination).scheme == "s3", destination
    bucket, prefix = urlparse(destination).netloc, urlparse(destination).path.strip("/")

    port = free_port()
    swaps = {
        "--backend-store-uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--host": "127.0.0.1",
        "--port": str(port),
        "--workers": "1",
    }
    assert set(swaps) <= set(flags), "the manifest's flags changed: update the swaps"
    server_args = [
        f"{name}={swaps[name]}" if name in swaps else (name if value is None else f"{name}={value}")
        for name, value in flags.items()
    ]
    uri = f"http://127.0.0.1:{port}"

    with moto_server(tmp_path) as s3_url:
        s3 = boto3.client(
            "s3",
            endpoint_url=s3_url,
            aws_access_key_id=S3_KEY,
            aws_secret_access_key=S3_SECRET,
            region_name=settings["AWS_DEFAULT_REGION"],
        )
        s3.create_bucket(Bucket=bucket)
        # the server gets what the manifests give it: the ConfigMap, the S3 Secret's two keys, and
        # MLFLOW_S3_ENDPOINT_URL as the dev-cpu overlay sets it for its in-cluster store
        server_env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
        server_env.update(
            settings,
            AWS_ACCESS_KEY_ID=S3_KEY,
            AWS_SECRET_ACCESS_KEY=S3_SECRET,
            MLFLOW_S3_ENDPOINT_URL=s3_url,
            HOME=str(tmp_path),
            **auth_config(container, tmp_path),
        )
        log = open(tmp_path / "mlflow-server.log", "wb")
        server = subprocess.Popen(
            [str(BIN / "mlflow"), "server", *server_args],
            env=server_env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http(f"{uri}/health", timeout=300, process=server)  # basic-auth: 85 s on a loaded 2-core machine

            # The client has no S3 credentials whatsoever: only the tracking URI, as a Ray worker.
            for name in AWS_VARS:
                monkeypatch.delenv(name, raising=False)
            monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
            monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
            monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
            assert status_with_host(port, "itrlab-mlflow:5000", account=None) == 401  # no account, no answer
            assert status_with_host(port, "itrlab-mlflow:5000", account=(ACCOUNT[0], "wrong")) == 401
            monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ACCOUNT[0])  # as the Ray pods get it
            monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ACCOUNT[1])
            tracker = MlflowTracker("k8s_s3_artifacts")
            assert tracker.tracking_uri == uri
            run_id = tracker.start(
                run_name="recall", tags={"method": "vsepp", "protocol": "all"}, params={"train.lr": "0.0005"}
            )
            table = RecallTable(
                protocol="all",
                n_images=1000,
                n_folds=1,
                i2t_r1=25.0,
                i2t_r5=54.1,
                i2t_r10=66.6,
                t2i_r1=19.7,
                t2i_r5=37.84,
                t2i_r10=47.26,
                rsum=250.5,
                i2t_medr=5.0,
                i2t_meanr=20.44,
                t2i_medr=13.0,
                t2i_meanr=78.43,
                md=0.0022,
            )
            tracker.log_recall_table(table, "test", epoch=10)
            tracker.end()

            client = MlflowClient(tracking_uri=uri)
            run = client.get_run(run_id)
            assert run.info.status == "FINISHED"
            assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri  # proxied
            assert flat_metrics(run.data.metrics)["test_rsum"] == pytest.approx(250.5)

            # read back through the server
            loaded = client.load_table(tracker.experiment_id, "recall/test_table.json", run_ids=[run_id])
            assert list(loaded["direction"]) == ["i2t", "t2i"]
            assert list(loaded["R1"]) == pytest.approx([25.0, 19.7])
            local = client.download_artifacts(run_id, "recall/test.json", str(tmp_path))
            assert RecallTable.from_dict(json.loads(Path(local).read_text())) == table
            assert {a.path for a in client.list_artifacts(run_id, "recall")} >= {
                "recall/test_table.json",
                "recall/test.json",
                "recall/test.md",
            }

            # the bytes are in the bucket, under the manifests' destination
            keys = [obj["Key"] for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
            table_keys = [
                k
                for k in keys
                if k.startswith(prefix + "/") and run_id in k and k.endswith("/artifacts/recall/test_table.json")
            ]
            assert len(table_keys) == 1, keys
            stored = json.loads(s3.get_object(Bucket=bucket, Key=table_keys[0])["Body"].read())
            assert stored["columns"][0] == "direction" and len(stored["data"]) == 2, stored

            # --allowed-hosts: the Service's names (how pods reach it) in, any other Host out
            for host in ("itrlab-mlflow:5000", "itrlab-mlflow.itrlab.svc.cluster.local:5000", f"localhost:{port}"):
                assert status_with_host(port, host) == 200, host
            assert status_with_host(port, "attacker.example.com") in (400, 403)
        finally:
            stop(server)
            log.close()
