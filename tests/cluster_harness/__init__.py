"""A multi-node Ray cluster on one machine, to check here what a KubeRay cluster does (docs/cluster.md).

``jobs/local_cluster.py up`` (and the fixture of ``tests/test_multinode.py``) starts, all on loopback:

* **PostgreSQL** (:mod:`~cluster_harness.postgres`), a server of its own, MLflow's backend store;
* **MLflow** (:mod:`~cluster_harness.mlflow_server`): ``mlflow server`` with the flags of
  ``k8s/base/mlflow.yaml``, serving the artifacts;
* **Ray** (:mod:`~cluster_harness.nodes`): a head (``--num-cpus 0``, as in
  ``k8s/base/raycluster.yaml``: it runs the sweep's driver, the GCS and the dashboard, no trial) and
  ``workers`` worker nodes, each in a PID and a mount namespace of its own (what a pod is), with token
  authentication.

:mod:`~cluster_harness.lifecycle` holds them together (folders, state file, start and stop in order),
:mod:`~cluster_harness.processes` starts and ends processes (through psutil), :mod:`~cluster_harness.ddp_check`
is the DDP check run as a Ray job, :mod:`~cluster_harness.commands` the command line. It is a test bench, not
part of a run: the tests import it as they import their other helpers (``tests/`` on the path), and
``jobs/local_cluster.py`` puts ``tests/`` on the path to run its command line; the package ``itrlab`` never
imports it.
"""

from cluster_harness.lifecycle import LocalCluster
from cluster_harness.nodes import isolation_problem
from cluster_harness.postgres import postgres_bin
from cluster_harness.processes import ClusterError

__all__ = ["ClusterError", "LocalCluster", "isolation_problem", "postgres_bin"]
