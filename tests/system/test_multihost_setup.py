"""Where a process stands in a run (flags, JAX_* variables, SLURM), and the
start-up checks of a multi-process config; no second process needed."""

import subprocess
import sys
import os

import jax
import pytest

from infra import multihost
from configs import cartpole, validation
from configs.validation import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLURM = {'SLURM_JOB_ID': '4242', 'SLURM_STEP_NODELIST': 'node[007-008]', 'SLURM_NTASKS': '2',
         'SLURM_PROCID': '1', 'SLURM_LOCALID': '0', 'SLURM_STEP_ID': '0'}


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
  for name in list(SLURM) + list(multihost.ENV_VARS.values()):
    monkeypatch.delenv(name, raising=False)


def test_nothing_set_is_a_single_process():
  assert multihost.resolve(environ={}) is None
  assert multihost.resolve(None, 1, 0, environ={'JAX_COORDINATOR_ADDRESS': 'h:1'}) is None


def test_flags_win_over_environment_variables():
  environ = {'JAX_COORDINATOR_ADDRESS': 'envhost:1', 'JAX_NUM_PROCESSES': '4',
             'JAX_PROCESS_ID': '3'}
  assert multihost.resolve(environ=environ) == multihost.ProcessSpec(
      'envhost:1', 4, 3, 'flags/environment')
  assert multihost.resolve('flaghost:2', None, 1, environ=environ) == multihost.ProcessSpec(
      'flaghost:2', 4, 1, 'flags/environment')


@pytest.mark.parametrize('args, message', [
    (('h:1', 2, None), r'missing --process_id \(or JAX_PROCESS_ID\)'),
    ((None, 2, 0), r'missing --coordinator_address'),
    (('h:1', 2, 2), r'--process_id must be in 0..1 for 2 processes, got 2'),
    (('h:1', 0, 0), r'--num_processes must be >= 1'),
    (('nohost', 2, 0), r'--coordinator_address must be host:port'),
])
def test_incomplete_or_wrong_settings_name_the_flag(args, message):
  with pytest.raises(multihost.DistributedError, match=message):
    multihost.resolve(*args, environ={})


def test_a_non_integer_environment_variable_names_it():
  with pytest.raises(multihost.DistributedError, match='JAX_NUM_PROCESSES'):
    multihost.resolve(environ={'JAX_COORDINATOR_ADDRESS': 'h:1', 'JAX_NUM_PROCESSES': 'two',
                               'JAX_PROCESS_ID': '0'})


def test_an_srun_step_is_detected_by_jax(monkeypatch):
  for k, v in SLURM.items():
    monkeypatch.setenv(k, v)
  environ = dict(os.environ)
  assert multihost.resolve(environ=environ) == multihost.ProcessSpec(None, None, None, 'slurm')
  # A plain sbatch script (no srun step) and a one-task step are single runs.
  assert multihost.resolve(environ={k: v for k, v in environ.items()
                                    if k != 'SLURM_STEP_ID'}) is None
  monkeypatch.setenv('SLURM_NTASKS', '1')
  assert multihost.resolve(environ=dict(os.environ)) is None


def test_single_process_helpers():
  assert not multihost.is_multiprocess() and multihost.is_primary()
  assert multihost.allgather_json({'a': [1, 2.5]}) == [{'a': [1, 2.5]}]
  assert multihost.learner_devices(2) == tuple(jax.devices()[:2])
  tree = jax.device_put({'w': jax.numpy.arange(3.0)},
                        jax.sharding.NamedSharding(jax.sharding.Mesh(jax.devices()[:4], ('x',)),
                                                   jax.sharding.PartitionSpec()))
  assert multihost.replica_digest(tree) != 'differ'


def test_global_batch_must_split_over_every_process(monkeypatch):
  config = cartpole.get_config('smoke')
  config.num_learner_devices = 2
  config.batch_size = 6
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  with pytest.raises(ConfigError, match=r'batch_size: 6 is not divisible by the 4 learner '
                                        r'devices \(2 on each of 2 processes\)'):
    validation.validate(config)
  config.batch_size = 4
  config.actors.envs_per_actor = 4
  with pytest.raises(ConfigError, match=r'4 unrolls \(2 per process of 2\) is not a whole number'):
    validation.validate(config)


@pytest.mark.parametrize('field, value', [('distributed.timeout_seconds', 1.0),
                                          ('distributed.connect_timeout_seconds', 0.5)])
def test_distributed_fields_are_checked(field, value):
  config = cartpole.get_config('smoke')
  group, name = field.split('.')
  config[group][name] = value
  with pytest.raises(ConfigError, match=field.replace('.', r'\.')):
    validation.validate(config)


def test_wrong_process_flags_stop_train_py_with_one_line():
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  proc = subprocess.run(
      [sys.executable, 'launch/train.py', '--config=configs/cartpole.py:smoke',
       '--num_processes=2', '--process_id=0'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      'error: a multi-process run needs --coordinator_address, --num_processes and '
      '--process_id; missing --coordinator_address (or JAX_COORDINATOR_ADDRESS)')
