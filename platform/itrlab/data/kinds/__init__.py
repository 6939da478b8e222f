"""Dataset kinds (``dataset.kind``): each on-disk layout registers itself (``@register_kind``) in its own module.

This import list is the only place that names them (``docs/adding-a-dataset.md``).
"""

from itrlab.data.kinds.registry import DATASET_KINDS, ROLES, DataSummary, DatasetKind, kind_of, register_kind

# the import list: each kind's module registers its class
from itrlab.data.kinds import precomp, synthetic  # noqa: E402,F401  isort: skip

__all__ = ["DATASET_KINDS", "ROLES", "DataSummary", "DatasetKind", "kind_of", "register_kind"]
