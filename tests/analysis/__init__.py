"""Tests of derl.analysis: the read side of a run, the report, replays."""
