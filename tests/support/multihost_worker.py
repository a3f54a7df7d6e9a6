"""One process of a multi-process test (tests/system/test_multihost.py starts two).

  python -m tests.support.multihost_worker update OUT --coordinator_address=... \
      --num_processes=2 --process_id=I
  python -m tests.support.multihost_worker actor_fails OUT ...

`update`: two learner updates on a fixed global batch, this process feeding
its half; writes its copy of the learner state to OUT/update_<I>.npz.
`actor_fails [--failing_process=P]`: a CartPole run whose actor in process
P (default 1) raises after a few steps; exits as launch/train.py does.
`config_error`: a CartPole run whose validation fails on process 1 only.
`global_batch` and `learner_setup` are also what the test computes the
one-process reference with.
"""

import os
import sys
from tests.support.network_examples import network_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T, B, A, TASKS = 5, 8, 3, 2


def learner_setup(mesh):
  """(update, initial state, network) of an LSTM MLP agent with PopArt."""
  import jax
  import ml_collections
  import numpy as np
  from agents import learner
  from rl import actor_critic, optimizers
  from networks import agent as agent_net
  cfg = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': 16, 'torso_kwargs': {},
                                   'core_extra_inputs': False})
  network = agent_net.make_network(network_settings(cfg), num_actions=A, num_values=TASKS)
  variables = agent_net.init_variables(network, jax.random.key(0),
                                       {'state': np.zeros((4,), np.float32)})
  optimizer, schedule = optimizers.make_optimizer(6e-4, 100, 40.0, 0.99, 0.01, 0.0)
  loss_cfg = actor_critic.LossConfig(discount=0.99, baseline_cost=0.5, entropy_cost=0.01,
                               reward_mode='none', popart_enabled=True, popart_beta=0.1)
  update = learner.build_update(agent_net.apply_fn(network), optimizer, schedule, loss_cfg,
                                agent_net.VALUE_HEAD, mesh)
  return update, learner.init_state(variables, optimizer, mesh), network


def global_batch(network, seed):
  """A global batch of B unrolls. Columns 0..B/2-1 (process 0's half) are all
  task 0 and the rest task 1 with rewards 100x larger: each task is seen by
  one process only, so PopArt's statistics must be reduced across processes."""
  import numpy as np
  from tests.support.synthetic_unroll import random_unroll
  return random_unroll(network, np.arange(B) >= B // 2, seed, length=T, num_actions=A)


def process_half(batch, index, count):
  """Process `index`'s contiguous share of the batch columns (core state: rows)."""
  import jax
  from rl.types import BATCH_AXES, Unroll
  share = B // count
  sl = slice(index * share, (index + 1) * share)
  fields = [jax.tree.map(lambda x, axis=axis: x[(slice(None),) * axis + (sl,)], field)
            for field, axis in zip(batch, BATCH_AXES)]
  return Unroll(*fields)


def run_updates(mesh, feed):
  """Two updates; `feed(batch)` turns a global batch into the update's input."""
  update, state, network = learner_setup(mesh)
  for seed in range(2):
    state, metrics = update(state, feed(global_batch(network, seed)))
  return state, metrics


def _update(out):
  import jax
  import numpy as np
  from agents import learner
  mesh = learner.make_mesh(jax.devices())
  state, metrics = run_updates(mesh, lambda b: learner.shard_batch(
      process_half(b, jax.process_index(), jax.process_count()), mesh))
  leaves = jax.tree.leaves(learner.local_copy(state))
  np.savez(os.path.join(out, f'update_{jax.process_index()}.npz'),
           *[np.asarray(x) for x in leaves], loss=np.asarray(jax.device_get(metrics['loss/total'])))


def _smoke_config(out):
  """configs/cartpole.py:smoke split over 2 processes of 2 devices."""
  from configs import cartpole
  config = cartpole.get_config('smoke')
  config.workdir = os.path.join(out, 'run')
  config.num_learner_devices = 0
  config.batch_size = 4
  config.actors.envs_per_actor = 2
  return config


def _actor_fails(out, failing):
  import jax
  from tests.support.faults import make_env_step_fail
  from configs import validation
  from rundir import lifecycle
  make_env_step_fail(None, lambda _: jax.process_index() == failing, after_steps=30)
  config = _smoke_config(out)
  config.total_env_steps = 10_000_000
  config.distributed.timeout_seconds = 60
  try:
    lifecycle.train(validation.validate_everywhere(config))
  except Exception as e:  # noqa: BLE001 -- as launch/train.py's main
    lifecycle.exit_on_failure(e)


def _config_error(out):
  """launch/train.py's main on a CartPole run whose validation fails on
  process 1 only."""
  import jax
  from configs import validation
  from infra import peer_watch
  from rundir import lifecycle
  validate_spec = validation.validate_spec

  def validate_here(config):
    if jax.process_index() == 1:
      raise validation.ConfigError('network.name', 'not on this host')
    return validate_spec(config)

  validation.validate_spec = validate_here
  config = _smoke_config(out)
  try:
    lifecycle.train(validation.validate_everywhere(config))
  except validation.ConfigError as e:  # as launch/train.py's main
    print(f'error: {e}', file=sys.stderr)
    # Not JAX's exit-time shutdown: it aborts a process now and then
    # ("FATAL: exception not rethrown", status -6).
    peer_watch.leave(2)


def main(argv):
  from infra import multihost, peer_watch
  mode, out = argv[1], argv[2]
  options = dict(a[2:].split('=', 1) for a in argv[3:])  # launch/train.py's flag names
  failing = int(options.get('failing_process', 1))
  spec = multihost.resolve(options.get('coordinator_address'),
                           int(options['num_processes']) if 'num_processes' in options else None,
                           int(options['process_id']) if 'process_id' in options else None)
  multihost.initialize(spec, timeout_seconds=60, connect_timeout_seconds=120)
  if mode == 'update':
    _update(out)
    # As a finished run leaves: JAX's exit-time shutdown can abort process 0
    # (status -6, seen once in the suite under pytest-xdist).
    peer_watch.finish(0)
  elif mode == 'config_error':
    _config_error(out)
  else:
    _actor_fails(out, failing)


if __name__ == '__main__':
  main(sys.argv)
