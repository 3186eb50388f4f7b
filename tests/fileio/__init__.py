"""Tests of derl.fileio: atomic writes, checked reads, output paths."""
