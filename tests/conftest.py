"""Test set-up: the repo root on sys.path, and 4 fake CPU devices.

XLA_FLAGS must be set before JAX is imported anywhere, so it happens here.
Tests that train pin `num_learner_devices` themselves.
"""

import os
import sys
import warnings

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                           + ' --xla_force_host_platform_device_count=4').strip()
os.environ.setdefault('WANDB_MODE', 'disabled')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
