"""Asynchronous DERL evolution over worker processes and nodes that share only a file system.

- ``selection``: Pareto front and tournaments (pure functions).
- ``population``: slots, morphology ids, seed streams, the split of the initial population.
- ``folder``: the run folder (``OUT_DIR``) as one package: ``folder.run_dir.RunDir``, the only code that
  knows its layout, its stores (slots, workers, genomes, publications, failures) on the shared-folder
  primitives of ``folder.shared``, the published record (``folder.record``) and the schema of every
  file kind (``folder.schema``).
- ``search_config``: one ``config.yaml`` per search, node-local keys, each node's versions (``manifest/``).
- ``results``: published metadata, parent selection, ``summary.json``.
- ``backend``: genomes and training (derl.morphology, derl.envs, derl.ppo).
- ``step``: the DERL step (tournament, mutation, training, publication) for one morphology.
- ``scheduling``: which slot a worker fills next (claim, resume, adopt, take over, help).
- ``lease``: heartbeats, the takeover of slots whose owner went silent (dead nodes), the stop signal.
- ``process``: exit codes, signals, the worker lock and state, shared by worker and coordinator.
- ``worker``: one worker process; ``coordinator``: one node (``evo_single_proc.py``).
- ``status``: progress of a run (``tools/status.py``).

Nothing is imported here: ``python -m derl.evolution.worker`` must find its module unloaded.
"""
