"""Benchmarks behind `tools/bench.py` (and the GPU check behind `tools/gpu_check.py`): each benchmark module has
`add_arguments(parser)` and `run(args)`. Not part of derl (not installed, never imported by it): the tools find
this package beside them, the processes it starts through `children.with_benchmarks`."""
