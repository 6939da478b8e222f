"""Dataset kinds (``dataset.kind``) and the features stored beside a data set: each registers itself
(``@register_kind``, ``@register_stored``) in its own module.

This import list is the only place that names them (``docs/adding-a-dataset.md``).
"""

from itrlab.data.kinds.registry import (
    DATASET_KINDS,
    ROLES,
    STORED_FEATURES,
    DatasetKind,
    DataSummary,
    StoredFeatures,
    kind_of,
    register_kind,
    register_stored,
)

# the import list: each kind's module registers its class, each stored feature set's module its reader
from itrlab.data.kinds import precomp, synthetic  # noqa: E402,F401  isort: skip
from itrlab.data import text_features  # noqa: E402,F401  isort: skip

__all__ = [
    "DATASET_KINDS",
    "ROLES",
    "STORED_FEATURES",
    "DataSummary",
    "DatasetKind",
    "StoredFeatures",
    "kind_of",
    "register_kind",
    "register_stored",
]
