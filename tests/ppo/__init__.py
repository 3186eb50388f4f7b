"""Tests of derl.ppo: the learner."""
