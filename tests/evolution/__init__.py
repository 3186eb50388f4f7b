"""Tests of derl.evolution: the search, its workers and its shared run folder."""
