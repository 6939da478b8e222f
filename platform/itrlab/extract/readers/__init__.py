"""Raw data-set formats (``--format``): each registers its reader (``@register_reader``) in its own module.

This import list is the only place that names them (``docs/adding-a-dataset.md``).
"""

from itrlab.extract.readers.registry import (
    DEFAULT_FORMAT,
    READERS,
    Reader,
    SplitPlan,
    format_names,
    reader_of,
    reader_of_source,
    register_reader,
)

# the import list: each format's module registers its reader
from itrlab.extract.readers import coco, flickr8k, karpathy  # noqa: E402,F401  isort: skip

__all__ = [
    "DEFAULT_FORMAT",
    "READERS",
    "Reader",
    "SplitPlan",
    "format_names",
    "reader_of",
    "reader_of_source",
    "register_reader",
]
