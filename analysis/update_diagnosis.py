"""One update of a learner whose loss splits by term (rl/actor_critic.Learner.term_loss;
IMPALA's, Espeholt et al. 2018, arXiv 1802.01561) taken apart: what each loss
term contributes to the gradient, how much the clip and the optimiser change
it, how far the policy moves (`launch/diagnose_update.py`)."""

import jax
import numpy as np

from agents import learner as learner_lib
from agents.checkpoint import Checkpointer
from agents.trainer import Trainer
from analysis import advantage_groups
from analysis import update_stats
from networks import agent as agent_net
from networks import centring
from rl import minibatches


class Diagnoser:
  """A Trainer driven by hand, built but not started, plus the measurements of
  analysis/update_stats.py with the learner's term loss on one device.

  Args:
    workdir: a run folder whose checkpoint at env step `step` (None: the
      latest) the learner starts from (read-only); None: a fresh learner.

  Raises:
    agents.checkpoint.CheckpointError: for a checkpoint that cannot be read.
  """

  def __init__(self, spec, workdir=None, step=None):
    self.plan = spec.plan
    self.trainer = Trainer(spec)
    if workdir:
      checkpointer = Checkpointer(workdir, read_only=True)
      restored = checkpointer.restore(self.trainer.state, env_steps=step)
      checkpointer.close()
      self.trainer.load(restored['state'], restored['env_steps'])
    apply = agent_net.apply_fn(self.trainer.network)
    cfg = spec.loss
    head = agent_net.VALUE_HEAD
    o = spec.optimizer
    max_norm = o.max_grad_norm
    eps = o.adam_eps if o.name == 'adam' else o.rmsprop_eps
    term_loss = spec.learner.term_loss
    if term_loss is None:
      raise ValueError(f'loss.name={cfg.name!r} does not split its loss by term')
    loss_fn = term_loss(apply, cfg)

    @jax.jit
    def gradients(state, batch):
      stats = state.popart[head]
      grads = update_stats.term_gradients(term_loss, apply, cfg, state.params, stats, batch)
      _, out = loss_fn(state.params, stats, batch)
      return update_stats.gradient_report(grads, max_norm), out.extras, out.metrics

    @jax.jit
    def step(before, after, batch, learning_rate):
      return update_stats.step_report(apply, before, after, batch, learning_rate, eps,
                                      o.eps_in_sqrt, o.name, o.adam_b2)

    @jax.jit
    def raw_advantages(state, batch):
      params = state.params
      if 'frames' in batch.obs:   # the learner's own first move (agents/learner._centred)
        params = centring.update(params, batch.obs['frames'], batch.task_id)
      _, out = loss_fn(params, state.popart[head], batch)
      return out.extras['raw_advantage'], out.extras['mask']

    self._gradients, self._step = gradients, step
    self._raw_advantages, self._split, self._seed = raw_advantages, cfg.settings, spec.run.seed

  @property
  def env_steps(self) -> int:
    return self.trainer.env_steps

  def start(self):
    self.trainer.start()

  def next_batch(self):
    """The actors' next batch (needs `start`): (sharded on the learner devices,
    the host Unroll, its mean policy lag in updates)."""
    unroll, lags = self.trainer.next_batch()
    return learner_lib.shard_batch(unroll, self.trainer.mesh), unroll, float(np.mean(lags))

  def train(self):
    """One real training update on the actors' next batch: the state moves."""
    unroll, _ = self.trainer.next_batch()
    self.trainer.step(unroll)

  def measure(self, batches: int):
    """Each measurement's mean over `batches` batches, each one update from the
    current state, which does not move.

    Returns:
      Name -> float: update_stats' gradient_report ('grad/...', 'clip_scale'),
      step_report ('step/...', 'eps_dominated', 'kl_update', 'kl_update_max')
      and batch_report ('rho/...', 'valid_steps'), with 'policy_lag' and 'entropy'.
    """
    t = self.trainer
    rows = []
    for _ in range(batches):
      batch, unroll, lag = self.next_batch()
      report, extras, metrics = self._gradients(t.state, unroll)
      after, _ = t.update(t.state, batch)
      lr = float(t.schedule(t.state.step))
      report = {**report, **self._step(t.state, after, unroll, lr)}
      row = {k: float(v) for k, v in jax.device_get(report).items()}
      row.update(update_stats.batch_report(unroll, extras))
      row['policy_lag'] = lag
      row['entropy'] = float(metrics['entropy'])
      rows.append(row)
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}

  def advantage_batches(self, batches: int):
    """The next `batches` batches' advantages before normalisation, as host
    advantage_groups.AdvantageBatch, at the current state, which does not move;
    each batch's minibatches are the learner's own first epoch's for its step."""
    t = self.trainer
    step = int(np.asarray(learner_lib.local_copy(t.state.step)))
    out = []
    for i in range(batches):
      unroll, _ = t.next_batch()
      raw, mask = jax.device_get(self._raw_advantages(t.state, unroll))
      num_unrolls = unroll.action.shape[1]
      split = self._split   # the learner's epochs, minibatches and task balance
      key = minibatches.shuffle_keys(self._seed, step + i, split.epochs)[0]
      tasks = np.asarray(unroll.task_id)[0] if getattr(split, 'balance_tasks', False) else None
      order = np.asarray(minibatches.unroll_order(key, num_unrolls, split.minibatches, tasks))
      out.append(advantage_groups.AdvantageBatch(
          raw=np.asarray(raw), mask=np.asarray(mask), reward=np.asarray(unroll.reward[:-1]),
          unroll_task=np.asarray(unroll.task_id)[0], minibatches=order))
    return out

  def close(self):
    self.trainer.close()
