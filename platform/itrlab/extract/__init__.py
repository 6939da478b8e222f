"""Offline feature extraction: a folder of photos and COCO-format captions -> the precomp layout
(a packaged EfficientNet-Lite0, 7x7 = 49 regions of 1280-d per image), in one process or across a
Ray cluster."""
