"""Tests of derl.morphology: genomes, mutations, MJCF."""
