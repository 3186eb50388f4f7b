"""Benchmarks behind `tools/bench.py`: each module has `add_arguments(parser)` and `run(args)`."""
