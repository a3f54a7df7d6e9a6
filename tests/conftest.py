"""Test set-up: 4 fake CPU devices (the project is installed: `pip install -e .`).

XLA_FLAGS must be set before JAX is imported anywhere, so it happens here.
Tests that train pin `num_learner_devices` themselves.
"""

import os
import warnings

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                           + ' --xla_force_host_platform_device_count=4').strip()
os.environ.setdefault('WANDB_MODE', 'disabled')
warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
