"""Which tiers a pytest session runs, read from its test paths (no JAX: conftest reads it before
JAX starts)."""

import os

UNIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'unit')
# The fast line's XLA flag (docs/testing.md): its tests are compile-bound.
UNIT_ONLY_XLA_FLAG = '--xla_backend_optimization_level=0'


def unit_only(config) -> bool:
  """Whether every test path of the session (pytest's config) lies under tests/unit."""
  paths = [os.path.abspath(os.path.join(config.invocation_params.dir, a.split('::')[0]))
           for a in config.args]
  return bool(paths) and all(os.path.commonpath([UNIT, p]) == UNIT for p in paths)
