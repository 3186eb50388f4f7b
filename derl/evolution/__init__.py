"""Asynchronous DERL evolution over worker processes and nodes that share only a file system.

- ``selection``: Pareto front and tournaments (pure functions).
- ``population``: slots, morphology ids, seed streams, the split of the initial population.
- ``storage``: ``RunDir``, the only code that knows the ``OUT_DIR`` layout.
- ``search_config``: one ``config.yaml`` per search, node-local keys, each node's versions (``manifest/``).
- ``results``: published metadata, parent selection, ``summary.json``.
- ``lease``: heartbeats and the takeover of slots whose owner went silent (dead nodes).
- ``backend``: genomes and training (derl.morphology, derl.envs, derl.ppo).
- ``worker``: one worker process; ``coordinator``: one node (``evo_single_proc.py``).
- ``status``: progress of a run (``tools/status.py``).

Nothing is imported here: ``python -m derl.evolution.worker`` must find its module unloaded.
"""
