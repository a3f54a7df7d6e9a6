"""The one place an agent is assembled from a run spec (configs/spec.py): network, initial
variables, optimiser, learner mesh and state, jitted update, and the seeds of actors and their envs.
Training, evaluation and every tool build through it, so they cannot drift apart."""

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax
from jax.sharding import Mesh
import optax

from agents import learner as learner_lib
from agents.rollout import example_observation
from networks import agent as agent_net
from rl import optimizers, popart
from rl import value_classification as vc


@dataclasses.dataclass(frozen=True)
class Agent:
  """What `build_agent` assembles; `update` and `task_gradients` may be None."""
  network: agent_net.AgentNetwork
  variables: Dict[str, Any]                 # initial {'params', 'popart', ...}
  optimizer: optax.GradientTransformation
  schedule: Callable                        # learning rate by learner update
  mesh: Mesh                                # the learner devices
  state: learner_lib.LearnerState           # initial, replicated over the mesh
  update: Optional[Callable]                # jitted (state, batch) -> (state, metrics)
  # jitted (params, stats, batch) -> each task's gradient norms on the shared
  # torso (rl/task_gradients.task_gradient_norms); None unless a multi-task V-trace
  # run asks for them (log.task_gradients_seconds).
  task_gradients: Optional[Callable] = None


def build_agent(spec, num_actions: int, observation_spec: Dict[str, tuple],
                with_update: bool = True) -> Agent:
  """The agent of a run spec, for an env, its state replicated over plan.learner_devices.

  Args:
    observation_spec: {key: (shape per env step, dtype)}, without prev_action / prev_reward.
    with_update: False skips the update (tools that only act or restore).
  """
  plan, run = spec.plan, spec.run
  network = agent_net.make_network(spec.network, num_actions, plan.num_values, plan.num_tasks,
                                   platform=plan.learner_devices[0].platform, value=spec.value)
  variables = agent_net.init_variables(network, jax.random.key(run.seed),
                                       example_observation(observation_spec),
                                       init=spec.network.init)
  if spec.popart.enabled:   # the debiased start keeps a weight per task beside mu and nu
    stats = popart.with_start(variables['popart'][agent_net.VALUE_HEAD], spec.popart.start)
    variables = {**variables, 'popart': {**variables['popart'], agent_net.VALUE_HEAD: stats}}
  elif spec.value.categorical:   # each task's return range for its advantage scale
    stats = {**variables['popart'][agent_net.VALUE_HEAD], **vc.init_range(plan.num_tasks)}
    variables = {**variables, 'popart': {**variables['popart'], agent_net.VALUE_HEAD: stats}}
  optimizer, schedule = optimizers.optimizer_from_settings(
      spec.optimizer, run.learning_rate, run.entropy_cost, plan.total_learner_steps,
      spec.optimizer_steps_per_update)
  mesh = learner_lib.make_mesh(plan.learner_devices)
  learner = spec.learner
  algorithm = () if learner.init_state is None else learner.init_state(variables['params'])
  state = learner_lib.init_state(variables, optimizer, mesh, algorithm)
  update = task_gradients = None
  loss_cfg = spec.loss
  if with_update:
    update = learner_lib.build_update(
        agent_net.apply_fn(network, with_health=True), optimizer, schedule,
        loss_cfg, agent_net.VALUE_HEAD, mesh, spec.optimizer.max_grad_norm, seed=run.seed)
    if plan.num_tasks > 1 and spec.learner.by_term and spec.log.task_gradients_seconds:
      task_gradients = learner_lib.build_task_gradients(
          spec.learner, agent_net.apply_fn(network), loss_cfg, agent_net.VALUE_HEAD)
  return Agent(network, variables, optimizer, schedule, mesh, state, update, task_gradients)


def env_seed(seed: int, actor_id: int, env_steps: int = 0) -> int:
  """The seed of a global actor's envs, in [0, 2**31); a resumed run passes its
  `env_steps`, for fresh games rather than a replay of the start."""
  return (seed * 100_003 + 1_009 * actor_id + env_steps) % 2**31


def actor_seed(rng: jax.Array, env_steps: int, actor_id: int) -> int:
  """The seed of an actor's action sampling, in [0, 2**31 - 1), from the
  learner's `rng` folded with `env_steps` and `actor_id`."""
  key = jax.random.fold_in(jax.random.fold_in(rng, env_steps), actor_id)
  return int(jax.random.randint(key, (), 0, 2**31 - 1))
