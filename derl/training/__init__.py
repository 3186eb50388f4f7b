"""Wiring between the learner (``derl.ppo``) and the rest of derl: env descriptions, run folders.

``derl.ppo`` knows Gymnasium envs only; this package knows unimals (``derl.envs``,
``derl.morphology``), output folders and ``torchrun``.
"""
