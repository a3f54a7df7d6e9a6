"""Actor 0's unrolls and env flags, collected as training produces them: the real
`agents.actor.Actor` thread on envs and seeds built exactly as training builds them, with a freshly
initialised network. analysis/frame_checks.py checks what `collect` keeps.
"""

import dataclasses
import queue
import threading
from typing import Dict, List

import jax
import numpy as np

from agents import builder
from agents import actor as actor_lib
from agents.actor import ParamsStore
from agents.timing import StageTimer


@dataclasses.dataclass
class Collected:
  """What actor 0 produced, and what is needed to re-check it."""
  unrolls: List           # rl.types.Unroll, consecutive, [T + 1, B, ...]
  episodes: List          # agents.rollout.Episode, whole games, in the order they ended
  records: Dict           # env 'terminated', 'truncated', 'game_over', 'reward' per step [S, B]
  network: object
  variables: object       # what the actor acted with
  actor_seed: int
  env_kwargs: Dict        # task 0's EnvPool kwargs
  num_actions: int


class RecordingEnv:
  """A BatchedEnv passing everything through to `env` (closing this closes it),
  keeping in `records` per step copies of 'terminated', 'truncated',
  'game_over' (`terminated` where the env reports none) and 'reward', each [B]."""

  def __init__(self, env):
    self._env = env
    self.num_envs, self.num_actions = env.num_envs, env.num_actions
    self.observation_spec = env.observation_spec
    self.records = {'terminated': [], 'truncated': [], 'game_over': [], 'reward': []}

  def reset(self):
    return self._env.reset()

  def step(self, actions):
    result = self._env.step(actions)
    over = result.terminated if result.game_over is None else result.game_over
    for name, value in (('terminated', result.terminated), ('truncated', result.truncated),
                        ('game_over', over), ('reward', result.reward)):
      self.records[name].append(value.copy())
    return result

  def close(self):
    self._env.close()


def collect(spec, num_blocks: int, policy_scale: float = 1.0) -> Collected:
  """Runs actor 0 as a fresh run would (env step 0) and keeps what it produces.

  Args:
    policy_scale: multiplies the policy head's weights (tests: logits that
      differ between frames, so off-by-one errors show).

  Returns:
    A Collected; records are stacked [S, B], S the env steps taken.

  Raises:
    RuntimeError: when the actor fails.
  """
  plan = spec.plan
  env = RecordingEnv(actor_lib.make_envs(spec, count=1)[0])
  agent = builder.build_agent(spec, env.num_actions, env.observation_spec, with_update=False)
  network, variables = agent.network, agent.variables
  if policy_scale != 1.0:
    params = dict(variables['params'])
    params['policy_head'] = jax.tree.map(lambda w: w * policy_scale, params['policy_head'])
    variables = {**variables, 'params': params}
  store = ParamsStore()
  unrolls, episodes = queue.Queue(maxsize=spec.actors.queue_size), queue.SimpleQueue()
  store.publish(variables, 0)
  stop = threading.Event()
  rng = jax.random.key(spec.run.seed)   # a fresh run's: actor 0 at env step 0
  actor, = actor_lib.make_actors(spec, network, [env], store, unrolls, episodes,
                                 StageTimer(), stop, rng)
  actor_seed = builder.actor_seed(rng, 0, 0)
  actor.start()
  blocks = []
  try:
    while len(blocks) < num_blocks:
      try:
        blocks.append(unrolls.get(timeout=1.0))
      except queue.Empty:
        if actor.error is not None or not actor.is_alive():
          raise RuntimeError(f'actor failed: {actor.error!r}') from actor.error
  finally:
    stop.set()
    actor.join(timeout=30)
    env.close()
  eps = []
  while not episodes.empty():
    eps.append(episodes.get())
  return Collected(
      unrolls=[b.unroll for b in blocks], episodes=eps,
      records={k: np.stack(v) for k, v in env.records.items()},
      network=network, variables=variables, actor_seed=actor_seed,
      env_kwargs=dict(plan.actor_env_groups[0][0].env_kwargs), num_actions=env.num_actions)


def stitch(unrolls) -> Dict[str, np.ndarray]:
  """Consecutive [T + 1, B, ...] unrolls of one actor as one sequence per env,
  each overlap step once.

  Returns:
    Each observation key and 'first', 'action', 'behaviour_logits', 'reward', 'discount', 'task_id'
    -> [S, B, ...], S = 1 + T * len(unrolls): index s is the actor's s-th step.
  """
  def cat(get):
    return np.concatenate([get(unrolls[0])] + [get(u)[1:] for u in unrolls[1:]])
  seq = {k: cat(lambda u, k=k: u.obs[k]) for k in unrolls[0].obs}
  for name in ('first', 'action', 'behaviour_logits', 'reward', 'discount', 'task_id'):
    seq[name] = cat(lambda u, name=name: getattr(u, name))
  return seq
