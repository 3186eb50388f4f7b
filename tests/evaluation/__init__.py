"""Tests of derl.evaluation: the transfer evaluation of finished runs."""
