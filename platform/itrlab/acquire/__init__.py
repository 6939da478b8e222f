"""A data set's raw files onto this machine, checked against a manifest shipped in the repository, and its
features extracted: ``itrlab data NAME --from PATH_OR_URL`` (docs/data.md#flickr8k).

Who holds what:

* :mod:`~itrlab.acquire.manifest`: the manifest (``configs/datasets/manifests/<name>.json.gz``): each file's
  sha256, the official split lists, where the copy and its features go; made by ``jobs/make_data_manifest.py``;
* :mod:`~itrlab.acquire.origins`: what ``--from`` names (a folder, a zip or tar archive, a URL) and the copy of
  what the manifest names out of it;
* :mod:`~itrlab.acquire.download`: an archive over http(s), resumed with ``Range`` requests;
* :mod:`~itrlab.acquire.verify`: a copy held against the manifest, its problems on one line;
* :mod:`~itrlab.acquire.install`: the steps in order, timed, and the extraction (:mod:`itrlab.extract`).

Nothing here names a data set: the manifest does.
"""

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
