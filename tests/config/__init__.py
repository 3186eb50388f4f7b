"""Tests of derl.config and derl.checked_config: keys, their bounds, loading."""
