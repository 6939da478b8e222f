"""A data set's raw files onto this machine, checked against a manifest shipped in the repository, and its features
extracted: ``itrlab data NAME --from PATH_OR_URL`` (docs/data.md#flickr8k; the modules: docs/architecture.md). Nothing
here names a data set: the manifest does."""

from itrlab.acquire.install import Installed, Step, install
from itrlab.acquire.manifest import DataManifest, find_manifest, manifest_names, read_manifest, write_manifest
from itrlab.acquire.verify import Problems, verify_folder

__all__ = [
    "DataManifest",
    "Installed",
    "Problems",
    "Step",
    "find_manifest",
    "install",
    "manifest_names",
    "read_manifest",
    "verify_folder",
    "write_manifest",
]
