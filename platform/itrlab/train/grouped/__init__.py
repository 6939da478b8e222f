"""Grouped training: G runs of one model shape trained together in one process, as one batched model."""
