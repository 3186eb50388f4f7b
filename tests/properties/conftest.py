"""How many examples the property tests run: Hypothesis settings profiles.

- ``make test``: the ``derl`` profile, derandomized (the same examples on every machine and every run) and a
  few examples per test, so the whole package costs seconds of CPU;
- ``make fuzz``: ``DERL_FUZZ_EXAMPLES`` examples per cheap (in-process) test, a share of them for a test that
  starts processes (``examples``); the seed is random unless ``DERL_FUZZ_SEED`` (or ``--hypothesis-seed``)
  names one, and a failure prints its example and the ``@reproduce_failure`` blob that replays it.

No example database is kept (``database=None``): a checkout stays clean, and a failure reproduces by its seed.
"""

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("DERL_FUZZ_EXAMPLES") or 0)
_COMMON = {"deadline": None, "database": None, "print_blob": True,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("derl", derandomize=True, max_examples=5, **_COMMON)
settings.register_profile("fuzz", max_examples=max(FUZZ_EXAMPLES, 1), **_COMMON)
settings.load_profile("fuzz" if FUZZ_EXAMPLES else "derl")


def pytest_configure(config):
    seed = os.environ.get("DERL_FUZZ_SEED")
    if seed and FUZZ_EXAMPLES and getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = int(seed)
