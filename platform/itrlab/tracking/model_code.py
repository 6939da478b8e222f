"""The code of an itrlab MLflow model (MLflow's models from code, :mod:`itrlab.tracking.models`): loading it
builds :class:`~itrlab.tracking.models.ItrlabPyfunc`, no pickled object."""

import mlflow

from itrlab.tracking.models import ItrlabPyfunc

mlflow.models.set_model(ItrlabPyfunc())
