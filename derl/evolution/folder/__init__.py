"""The run folder (``OUT_DIR``) that every node of a search shares, as one package.

- ``shared``: ``SharedFolder``, the primitives of a folder many processes on many nodes write at once
  (staged writes, exclusive creations, reads through folder descriptors, quarantine) and ``Identity``;
- ``claim_store``: ``ClaimStore``, claims by exclusive creation of generation 0, takeovers of generation
  g + 1, the newest deciding: the search's slots (``slot_store``) and the evaluation's cells
  (``derl.evaluation.store``);
- ``run_dir``: ``RunDir``, the layout and the run-level files, composing one store per corner:
  ``slot_store`` (claims and leases), ``worker_store`` (worker states, heartbeats, preparing beats),
  ``genome_store`` (genomes and MJCFs), ``publication_store`` (publication numbers, published records,
  retirements), ``failure_store`` (failed morphologies);
- ``record`` and ``schema``: the published record, typed, and the check of every file kind.

Nothing outside this package builds a path inside ``OUT_DIR`` (``derl.evaluation.store`` builds
``eval/`` on the same primitives).
"""
