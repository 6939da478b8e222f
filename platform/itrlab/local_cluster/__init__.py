"""A multi-node Ray cluster on one machine, to check here what a KubeRay cluster does (docs/cluster.md).

``jobs/local_cluster.py up`` (and the fixture of ``tests/test_multinode.py``) starts, all on loopback:

* **PostgreSQL** (:mod:`~itrlab.local_cluster.postgres`), a server of its own, MLflow's backend store;
* **MLflow** (:mod:`~itrlab.local_cluster.mlflow_server`): ``mlflow server`` with the flags of
  ``k8s/base/mlflow.yaml``, serving the artifacts;
* **Ray** (:mod:`~itrlab.local_cluster.nodes`): a head (``--num-cpus 0``, as in
  ``k8s/base/raycluster.yaml``: it runs the sweep's driver, the GCS and the dashboard, no trial) and
  ``workers`` worker nodes, each in a PID and a mount namespace of its own (what a pod is), with token
  authentication.

:mod:`~itrlab.local_cluster.lifecycle` holds them together (folders, state file, start and stop in order),
:mod:`~itrlab.local_cluster.processes` starts and ends processes, :mod:`~itrlab.local_cluster.ddp_check`
is the DDP check run as a Ray job, :mod:`~itrlab.local_cluster.commands` the command line. It sits above the
sweep layer (the DDP check trains as a sweep trial does) and nothing in the package imports it: it is
a test bench, not part of a run.
"""

from itrlab.local_cluster.lifecycle import LocalCluster
from itrlab.local_cluster.nodes import isolation_problem
from itrlab.local_cluster.postgres import postgres_bin
from itrlab.local_cluster.processes import ClusterError

__all__ = ["ClusterError", "LocalCluster", "isolation_problem", "postgres_bin"]
