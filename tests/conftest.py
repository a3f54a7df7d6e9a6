"""Test set-up for every tier: 4 fake CPU devices and wandb off (the project
is installed: `pip install -e .`; the helpers the tiers share are the
package tests.support, imported as `from tests.support import full_disk`).

The tiers (docs/testing.md):
- tests/unit/: the math, sharding, kernels, configs, tools on small inputs;
  `python -m pytest tests/unit` is the fast line.
- tests/system/: real runs end to end: smoke runs of every config, faults
  injected into runs, multi-process and multi-host runs, PBT, the tools on
  finished runs.
- tests/learning/: agents trained until they reach a score.

XLA_FLAGS must be set before JAX is imported anywhere, so it happens here.
Tests that train pin `num_learner_devices` themselves.
"""

import atexit
import os
import shutil
import tempfile
import warnings

from tests.support import tiers

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                           + ' --xla_force_host_platform_device_count=4').strip()
os.environ.setdefault('WANDB_MODE', 'disabled')

# One compilation cache for the session, its pytest-xdist workers and every
# run a test starts (they inherit the environment): a program compiled once (a
# network's update, a config's learner step, an eager op) is read back by
# every later test and process instead of compiled again. JAX keys an entry by
# the program, the XLA flags, the devices and its own version, so an entry
# never stands for another program. The folder is new for each session and
# removed at its end by the process that made it (the workers inherit it): no
# entry outlives the code that wrote it, and it needs no size bound (about
# 100 MB for the unit tier). Without a bound JAX takes no file lock and scans
# no folder per entry (with one, a cold unit test with 400 programs took 5 s
# longer); two workers writing one entry at once can tear it, and a torn entry
# fails zlib's checksum when read: a warning, and the program is compiled
# again. A JAX_COMPILATION_CACHE_DIR of your own is used and kept;
# JAX_ENABLE_COMPILATION_CACHE=false turns the cache off.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='jax-tests-')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')


def pytest_configure(config):
  """A session of unit tests alone (the fast line) compiles without LLVM's optimisation: the tier
  is compile-bound, while a session that trains agents runs slower at level 0 (docs/testing.md).
  It runs before any test module is collected, so before JAX reads XLA_FLAGS; xdist's workers
  run it too."""
  if tiers.unit_only(config):
    os.environ['XLA_FLAGS'] += ' ' + tiers.UNIT_ONLY_XLA_FLAG


def pytest_xdist_auto_num_workers(config):
  """`-n auto` (the README's test lines): one worker per core, at most 4. Each worker
  holds JAX and its compiled programs (about 1-2 GiB), and the system tier's
  runs start threads and processes of their own."""
  del config
  return max(1, min(len(os.sched_getaffinity(0)), 4))
