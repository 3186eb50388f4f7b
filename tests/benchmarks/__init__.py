"""Tests of tools/benchmarks: the benchmarks, the simulated cluster, the GPU check."""
