"""Evaluation protocols of the SCAN/VSE++ lineage: which images are ranked together (the list: :data:`PROTOCOLS`,
docs/evaluation.md).

A protocol splits the ``N`` images of a split (with their captions, caption ``j`` of image ``j // captions_per_image``)
into equal, consecutive folds. Each fold is ranked on its own, and every metric of the table (rsum included) is the mean
of the folds', as SCAN's ``evalrank(fold5=True)`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from itrlab.errors import UserInputError


class ProtocolError(UserInputError, ValueError):
    """An unknown protocol, or a split whose size the protocol does not allow: a ``ValueError`` (what callers catch) and
    a :class:`~itrlab.errors.UserInputError` (one line, exit status 2)."""


@dataclass(frozen=True)
class Protocol:
    """How a split is cut into folds for evaluation.

    Attributes:
        name: the registry name; every table carries it.
        n_folds: number of equal, consecutive folds of images (with their captions).
        required_images: the only split size allowed, or None for any size that
            ``n_folds`` divides.
        description: one line for help texts and tables.
    """

    name: str
    n_folds: int
    required_images: int | None
    description: str

    def allowed(self) -> str:
        """What split sizes this protocol accepts, in words."""
        if self.required_images is not None:
            return f"exactly {self.required_images} images"
        if self.n_folds == 1:
            return "at least 1 image"
        return f"a positive multiple of {self.n_folds} images"

    def check(self, n_images: int) -> None:
        """Raise :class:`ProtocolError` (a ``ValueError``) if a split of ``n_images`` does not fit."""
        if isinstance(n_images, bool) or not isinstance(n_images, int):
            raise ProtocolError(f"protocol '{self.name}': n_images must be an int, got {n_images!r}")
        fits = n_images >= self.n_folds and n_images % self.n_folds == 0
        if self.required_images is not None:
            fits = fits and n_images == self.required_images
        if not fits:
            raise ProtocolError(
                f"protocol '{self.name}' ({self.description}) cannot evaluate a split of "
                f"{n_images} images; it needs {self.allowed()}"
            )

    def folds(self, n_images: int) -> list[tuple[int, int]]:
        """The ``[start, stop)`` image ranges of the folds (checks the size first)."""
        self.check(n_images)
        size = n_images // self.n_folds
        return [(fold * size, (fold + 1) * size) for fold in range(self.n_folds)]


PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        Protocol("all", 1, None, "rank against all images of the split"),
        Protocol("f30k_1k", 1, 1000, "Flickr30K 1K test: all 1000 images"),
        Protocol("f8k_1k", 1, 1000, "Flickr8K 1K test: all 1000 images"),
        Protocol("coco_5k", 1, 5000, "COCO 5K test: all 5000 images"),
        Protocol("coco_1k", 5, 5000, "COCO 1K: mean over 5 folds of 1000 images"),
        Protocol("5fold", 5, None, "mean over 5 folds of N/5 images"),
    )
}


def get_protocol(name: str | Protocol) -> Protocol:
    """The protocol registered under ``name``; raises :class:`ProtocolError` listing the names."""
    if isinstance(name, Protocol):
        return name
    try:
        return PROTOCOLS[name]
    except (KeyError, TypeError):
        raise ProtocolError(f"unknown evaluation protocol {name!r}; known protocols: {', '.join(PROTOCOLS)}") from None
