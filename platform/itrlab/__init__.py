"""itrlab: a Ray-distributed experiment platform for image-text retrieval research."""

__version__ = "0.1.0"
