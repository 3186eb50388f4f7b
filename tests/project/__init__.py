"""Tests of The whole project: its architecture, docs, packaging, tools and the suite's own rules."""
