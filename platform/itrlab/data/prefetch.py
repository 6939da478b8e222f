"""A prefetching batch iterator for GPU training from host memory (``train.data_path: loader`` on a GPU, when the split
does not fit on the device: :mod:`itrlab.data.resident`).

:class:`DevicePrefetcher` reads the next ``depth`` batches in a background thread (page reads, collation and pinning
release the GIL most of their time) while the GPU works, and copies each to the device asynchronously from pinned
memory. The batches and their order are the loader's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

import torch

from itrlab.data.dataset import Batch

_END = object()


class DevicePrefetcher:
    """Iterate ``batches`` on ``device``, reading up to ``depth`` ahead in a background thread. An error raised while
    reading is raised at the batch where it happened; leaving the loop early stops the thread."""

    def __init__(self, batches: Iterable[Batch], device: torch.device, depth: int = 2):
        if depth < 1:
            raise ValueError(f"prefetch depth must be >= 1, got {depth}")
        self.batches, self.device, self.depth = batches, device, depth

    def __iter__(self) -> Iterator[Batch]:
        ready: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        pin = self.device.type == "cuda"

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            try:
                for batch in self.batches:
                    if not put(batch.pin_memory() if pin else batch):
                        return
            except BaseException as err:  # handed to the consumer, raised there
                put(err)
                return
            put(_END)

        reader = threading.Thread(target=read, name="itrlab-prefetch", daemon=True)
        reader.start()
        try:
            while True:
                item = ready.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item.to(self.device, non_blocking=pin)
        finally:
            stop.set()
            reader.join(timeout=5)
