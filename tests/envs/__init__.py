"""Tests of derl.envs: the robot world, its tasks, terrains and simulators."""
