"""Test set-up for every tier: 4 fake CPU devices, wandb off, and the shared
helpers of tests/support/ importable by name (the project is installed:
`pip install -e .`).

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

import os
import sys
import warnings

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                           + ' --xla_force_host_platform_device_count=4').strip()
os.environ.setdefault('WANDB_MODE', 'disabled')
warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'support')
if SUPPORT not in sys.path:
  sys.path.insert(0, SUPPORT)
