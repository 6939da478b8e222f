"""Offline feature extraction: a data set's photos and captions, in any registered format
(:mod:`itrlab.extract.readers`: COCO-format captions, Flickr8K as downloaded, ...) -> the precomp layout
(a packaged EfficientNet-Lite0, 7x7 = 49 regions of 1280-d per image), in one process or across a Ray cluster."""
