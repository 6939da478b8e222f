"""Benchmarks behind `jobs/bench_*.py`: each prints a ratio against a baseline measured in the same run."""
