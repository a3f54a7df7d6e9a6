"""The frames and step bookkeeping the learner receives, checked with numbers.

The `check_*` functions turn what analysis/frame_collect.py collects from actor 0 into named
PASS/FAIL `Check`s against IMPALA's Atari protocol (Espeholt et al. 2018, arXiv 1802.01561; sticky
actions: Machado et al. 2018, arXiv 1709.06009). launch/inspect_frames.py prints them.
"""

from typing import Dict, NamedTuple

import envpool
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from analysis.frame_collect import Collected, stitch
from configs import atari_popart
from configs.validation import validate
from networks import centring
from rl import rewards


class Check(NamedTuple):
  """One named verdict: whether it passed, what was checked, and the numbers."""
  passed: bool
  what: str       # the property checked
  detail: str     # the numbers behind the verdict


def _frac(mask) -> str:
  mask = np.asarray(mask)
  return f'{int(mask.sum())}/{mask.size} = {mask.mean():.4f}' if mask.size else '0/0'


def games_in(seq):
  """(env, first step, step of the terminating action) of each episode that terminated (discount 0)
  in `stitch`'s sequences, sorted by that step, then env (the actor's logging order)."""
  out = []
  for b in range(seq['first'].shape[1]):
    for end in np.flatnonzero(seq['discount'][:, b] == 0):
      out.append((b, int(np.flatnonzero(seq['first'][:end + 1, b])[-1]), int(end)))
  return sorted(out, key=lambda g: (g[2], g[0]))  # the actor's logging order


def check_unrolls(unrolls) -> Dict[str, Check]:
  """The checks that need only one actor's consecutive unrolls.

  Returns:
    Checks 'overlap', 'reset_step', 'prev_keys', 'rewards' and, with 'frames' observations,
    'frame_shape', 'newest_last', 'not_newest_first', 'not_frozen' and 'reset_stack'.
  """
  seq = stitch(unrolls)
  first, reward, discount = seq['first'], seq['reward'], seq['discount']
  checks = {}
  fields = ('first', 'action', 'behaviour_logits', 'reward', 'discount', 'task_id')
  same = [all(np.array_equal(u.obs[k][-1], v.obs[k][0]) for k in u.obs)
          and all(np.array_equal(getattr(u, f)[-1], getattr(v, f)[0]) for f in fields)
          for u, v in zip(unrolls[:-1], unrolls[1:])]
  checks['overlap'] = Check(
      bool(same) and all(same), 'unroll overlap: step T of unroll k == step 0 of k+1 (all fields)',
      f'{sum(same)}/{len(same)} consecutive pairs identical')
  # After a terminated action comes the reset step (from the terminal obs, no
  # reward), and the observation after it starts the next episode.
  ok = [(not first[t + 1, b] and reward[t + 1, b] == 0 and discount[t + 1, b] == 1
         and first[t + 2, b]) for t, b in np.argwhere(discount[:-2] == 0)]
  checks['reset_step'] = Check(
      all(ok), 'discount 0 at a_t -> reset step t+1 (first=F, r=0, d=1) -> first=T at t+2',
      f'{sum(ok)}/{len(ok)} terminations; discount values {sorted(set(discount.ravel().tolist()))}')
  pa, pr = seq['prev_action'], seq['prev_reward']
  zero_at_first = bool((pa[first] == 0).all() and (pr[first] == 0).all())
  cont = ~first[1:]  # x_{t+1} continues x_t's episode
  shifted = bool((pa[1:][cont] == seq['action'][:-1][cont]).all()
                 and (pr[1:][cont] == reward[:-1][cont]).all())
  checks['prev_keys'] = Check(
      zero_at_first and shifted and pa.dtype == np.int32 and pr.dtype == np.float32,
      'obs prev_action/prev_reward = a_{t-1}, r_{t-1} (unclipped); 0 at first',
      f'keys {sorted(unrolls[0].obs)}; {pa.dtype}/{pr.dtype}; 0 at {int(first.sum())} firsts '
      f'{zero_at_first}; == a/r of the step before at {int(cont.sum())} steps {shifted}')
  checks['rewards'] = Check(
      True, 'rewards stored as the env gives them (reward_clip=False)',
      f'values {sorted(set(reward.ravel().tolist()))}; non-zero {int((reward != 0).sum())} '
      f'of {reward.size} steps')
  if 'frames' in seq:
    checks.update(_check_frames(seq, unrolls[0].obs['frames']))
  return checks


def _check_frames(seq, frames0) -> Dict[str, Check]:
  frames, first = seq['frames'], seq['first']
  checks = {}
  checks['frame_shape'] = Check(
      frames0.shape[2:] == (4, 84, 84) and frames0.dtype == np.uint8,
      'frames [T+1, B, 4, 84, 84] uint8: 4 stacked grey 84x84 frames',
      f'{frames0.shape} {frames0.dtype}, values {frames.min()}..{frames.max()}')
  cont = ~first[1:]
  newest_last = np.all(frames[1:, :, :3] == frames[:-1, :, 1:], axis=(2, 3, 4))[cont]
  newest_first = np.all(frames[1:, :, 1:] == frames[:-1, :, :3], axis=(2, 3, 4))[cont]
  checks['newest_last'] = Check(
      newest_last.mean() == 1.0, 'stack newest last: frames[t+1][:3] == frames[t][1:]',
      f'{_frac(newest_last)} of steps within episodes')
  checks['not_newest_first'] = Check(
      newest_first.mean() < 0.5, 'converse, newest first: frames[t+1][1:] == frames[t][:3]',
      f'{_frac(newest_first)} (only where the screen stood still)')
  changed = np.any(frames[1:, :, 3] != frames[:-1, :, 3], axis=(2, 3))[cont]
  # Pong's screen stands still for a while at each serve; a stuck pipeline
  # would repeat (nearly) every frame.
  checks['not_frozen'] = Check(
      changed.mean() > 0.5, 'not frozen: newest frame differs from the step before',
      _frac(changed))
  equal4 = np.all(frames == frames[:, :, :1], axis=(2, 3, 4))
  at_start, later = equal4[0], equal4[1:][first[1:]]
  checks['reset_stack'] = Check(
      bool(at_start.all() and later.all()), 'reset stack: the 4 channels equal at first=T',
      f'initial resets {_frac(at_start)}; auto-resets {_frac(later)}; '
      f'non-first obs with 4 equal channels {_frac(equal4[1:][cont])}')
  return checks


def check_env_record(collected: Collected) -> Dict[str, Check]:
  """Checks 'discount', 'first_after_end', 'no_life_loss_end' and 'logged_games': the unrolls
  against the env's own per-step flags and the actor's game log."""
  seq = stitch(collected.unrolls)
  rec = {k: v[:len(seq['reward'])] for k, v in collected.records.items()}
  checks = {}
  same_r = np.array_equal(seq['reward'], rec['reward'])
  exact = np.array_equal(seq['discount'], 1.0 - rec['terminated'])
  checks['discount'] = Check(
      bool(exact and same_r), 'discount == 1 - terminated exactly; reward == env reward',
      f'{int(rec["terminated"].sum())} terminated, {int(rec["truncated"].sum())} truncated '
      f'in {rec["terminated"].size} env steps; rewards identical {same_r}')
  ended = rec['terminated'] | rec['truncated']
  starts = seq['first'][2:]
  checks['first_after_end'] = Check(
      np.array_equal(starts, ended[:-2]), 'first=T exactly 2 steps after terminated|truncated',
      f'{int(starts.sum())} episode starts after the initial reset, {int(ended[:-2].sum())} ends')
  spurious = rec['terminated'] & ~rec['game_over']
  checks['no_life_loss_end'] = Check(
      not spurious.any(), 'every termination is a game over (no life-loss episodes)',
      f'{int(spurious.sum())} terminations without game over')
  games = games_in(seq)
  mine = [(e - f + 1, float(seq['reward'][f:e + 1, b].sum())) for b, f, e in games]
  logged = [(e.episode_length, e.episode_return) for e in collected.episodes][:len(mine)]
  checks['logged_games'] = Check(
      mine == logged, "actor's logged games == episodes in the unrolls (length, return)",
      f'{len(mine)} games ended in the unrolls, {len(collected.episodes)} logged; '
      f'lengths {sorted(m[0] for m in mine)}')
  return checks


def check_pong_games(collected: Collected) -> Dict[str, Check]:
  """{'pong_21'}: a Pong game ends when one side has 21 points, never before;
  fails when no game ended."""
  seq = stitch(collected.unrolls)
  points = [(int((seq['reward'][f:e + 1, b] > 0).sum()), int((seq['reward'][f:e + 1, b] < 0).sum()))
            for b, f, e in games_in(seq)]
  ok = [max(p) == 21 for p in points]
  return {'pong_21': Check(
      bool(ok) and all(ok), 'Pong episodes end only when a side reaches 21 points',
      f'{len(ok)} games; (agent, opponent) points {points}' if ok else
      'no game ended: raise --steps')}


@jax.jit
def replay_actions(seed, logits):
  """int32 [S, B]: the actions make_act_fn samples from logits [S, B, A], the
  key split each step as the actor does from `seed`."""
  def step(rng, step_logits):
    rng, key = jax.random.split(rng)
    return rng, jax.random.categorical(key, step_logits)
  return jax.lax.scan(step, jax.random.key(seed), logits)[1]


def check_behaviour_logits(collected: Collected, max_unrolls: int = 4) -> Dict[str, Check]:
  """Checks 'logits' (logits[t] == network(obs[t]), recomputed as the learner does on the first
  `max_unrolls` unrolls: max |diff| < 1e-4 and over 10 times smaller than against obs[t+1]) and
  'sampling' (action[t] ~ logits[t], the actor's RNG replayed)."""
  net, variables = collected.network, collected.variables
  apply = jax.jit(lambda obs, first, state: net.apply(variables, obs, first, state)[0])
  aligned, shifted = [], []
  for u in collected.unrolls[:max_unrolls]:
    logits = np.asarray(apply(u.obs, u.first, u.core_state))
    aligned.append(np.abs(logits - u.behaviour_logits).max())
    shifted.append(np.abs(logits[1:] - u.behaviour_logits[:-1]).max())
  aligned, shifted = max(aligned), min(shifted)
  checks = {'logits': Check(
      aligned < 1e-4 and shifted > 10 * aligned,
      'behaviour_logits[t] == network(obs[t]) recomputed as the learner does',
      f'max |diff| {aligned:.1e} ({min(max_unrolls, len(collected.unrolls))} unrolls); '
      f'against network(obs[t+1]) {shifted:.1e}')}
  seq = stitch(collected.unrolls)
  logits, action = seq['behaviour_logits'], seq['action']
  match = np.asarray(replay_actions(collected.actor_seed, logits)) == action
  # Near-uniform logits (a fresh policy) make the samples agree with logits[t-1] too.
  off = np.asarray(replay_actions(collected.actor_seed, np.roll(logits, 1, axis=0))) == action
  checks['sampling'] = Check(
      match.mean() == 1.0, "action[t] sampled from behaviour_logits[t] (actor's RNG replayed)",
      f'{_frac(match)}; with logits[t-1] instead {off.mean():.4f}')
  return checks


def torso_input(network, variables, obs) -> np.ndarray:
  """conv1's input, numpy [T * B, H, W, C], for observations [T, B, ...] with 'frames'."""
  seen = []

  def grab(next_fun, args, kwargs, context):
    if context.module.name == 'conv1' and context.method_name == '__call__':
      seen.append(args[0])
    return next_fun(*args, **kwargs)

  first = np.zeros(obs['frames'].shape[:2], bool)
  with nn.intercept_methods(grab):
    network.apply(variables, obs, first, network.initial_state(first.shape[1]))
  return np.asarray(seen[0])


def check_max_pool(env_id: str, kwargs: Dict, steps: int = 100) -> Check:
  """The 'max-pool' Check: a frame-skip-4 frame is the max of the last 2 of 4 single frames, from
  two EnvPool envs (skip 4 and 1, 210 x 160 grey) with one seed and random actions."""
  base = {**kwargs, 'img_height': 210, 'img_width': 160, 'stack_num': 1, 'noop_max': 1,
          'episodic_life': False}
  skip4, skip1 = (envpool.make(env_id, env_type='gymnasium', num_envs=1, seed=3,
                               **{**base, 'frame_skip': k}) for k in (4, 1))
  skip4.reset(), skip1.reset()
  rng = np.random.default_rng(0)
  pooled = last = 0
  for _ in range(steps):
    act = rng.integers(0, skip4.action_space.n, size=1).astype(np.int32)
    obs = skip4.step(act)[0][0, 0]
    singles = [skip1.step(act)[0][0, 0] for _ in range(4)]
    pooled += np.array_equal(obs, np.maximum(singles[2], singles[3]))
    last += np.array_equal(obs, singles[3])
  skip4.close(), skip1.close()
  return Check(pooled == steps, 'max-pool: frame == max(frames 3, 4 of the skip), grey',
               f'{pooled}/{steps} steps (last frame alone {last}/{steps}), 210x160 grey')


def check_protocol(spec, collected: Collected) -> Dict[str, Check]:
  """Checks IMPALA's Atari protocol as a run (task 0 Atari) applies it.

  Returns:
    Checks 'kwargs', 'max_pool', 'sticky', 'lives', 'action_set', 'reward_clip' and 'scaling'.
  """
  kw, env_id = collected.env_kwargs, spec.run.tasks[0]['env_id']
  reward_mode = spec.run.reward_mode
  want = dict(img_height=84, img_width=84, gray_scale=True, stack_num=4, frame_skip=4,
              reward_clip=False, repeat_action_probability=0.0)
  bad = {k: kw.get(k) for k, v in want.items() if kw.get(k) != v}
  spec = envpool.make_spec(env_id, **kw).config
  checks = {'kwargs': Check(
      not bad, 'EnvPool kwargs (envs/atari.protocol_kwargs): grey 84x84, stack 4, skip 4',
      ', '.join(f'{k}={v}' for k, v in kw.items())
      + f', use_inter_area_resize={spec.use_inter_area_resize}'
      + (f'; WRONG {bad}' if bad else ''))}
  checks['max_pool'] = check_max_pool(env_id, kw)
  sticky = spec.repeat_action_probability
  checks['sticky'] = Check(sticky == 0.0, 'sticky actions off', f'repeat_action_probability={sticky}')
  pool = envpool.make(env_id, env_type='gymnasium', num_envs=1, **kw)
  info = pool.reset()[1]
  pool.close()
  checks['lives'] = Check(True, 'lives and episodic_life',
                          f"info['lives'] at reset {info['lives'].tolist()}; "
                          f"episodic_life={kw['episodic_life']}")
  multi = validate(atari_popart.get_config('games=Pong+Breakout,smoke'))
  multi_kw = multi.actor_env_groups[0][0].env_kwargs
  full = envpool.make_spec('Pong-v5', **multi_kw).action_space.n
  checks['action_set'] = Check(
      collected.num_actions == 6 and full == 18,
      'action sets: 6 minimal (one game), 18 full (several)',
      f'this run {collected.num_actions} (full_action_space={kw["full_action_space"]}); '
      f'Pong+Breakout config {full}')
  clipped = np.asarray(rewards.transform_rewards(jnp.array([-5.0, -1.0, 0.5, 3.0]),
                                                 reward_mode))
  checks['reward_clip'] = Check(
      reward_mode == 'clip' and clipped.tolist() == [-1.0, -1.0, 0.5, 1.0],
      'learner clips rewards to [-1, 1] (rl/rewards.py)',
      f'reward_mode={reward_mode!r}: [-5, -1, 0.5, 3] -> {clipped.tolist()}')
  u = collected.unrolls[0]
  x = torso_input(collected.network, collected.variables, u.obs)
  frames = u.obs['frames'].reshape((-1,) + u.obs['frames'].shape[2:]).astype(np.float32)
  centre = collected.variables['params'].get('torso', {}).get(centring.NAME)
  if centre is None:
    ref, what = frames, 'frames / 255 (NHWC), in [0, 1]'
  else:   # a centring torso: each frame minus its task's mean frame (a fresh network's are 0)
    task = u.obs['task_id'].reshape(-1)
    ref, what = frames - np.asarray(centre['mean'])[task][:, None], '(frames - mean[task]) / 255 (NHWC)'
  ref = np.transpose(ref, (0, 2, 3, 1)) / 255.0
  in_range = centre is not None or (x.min() >= 0 and x.max() <= 1)
  checks['scaling'] = Check(
      np.allclose(x, ref, atol=1e-6) and in_range, f"torso's conv1 input == {what}",
      f'{x.shape} {x.dtype} min {x.min():.4f} max {x.max():.4f}; max |x - reference| '
      f'{np.abs(x - ref).max():.1e}')
  return checks


def reward_summary(seq) -> str:
  """Three lines: the agent steps between non-zero rewards (mean, median, min,
  max), each terminated game's count of non-zero rewards, each game's return."""
  gaps = np.concatenate([np.diff(np.flatnonzero(seq['reward'][:, b]))
                         for b in range(seq['reward'].shape[1])])
  games = games_in(seq)
  counts = [int((seq['reward'][f:e + 1, b] != 0).sum()) for b, f, e in games]
  returns = [float(seq['reward'][f:e + 1, b].sum()) for b, f, e in games]
  text = (f'agent steps between non-zero rewards: mean {gaps.mean():.1f}, median '
          f'{np.median(gaps):.0f}, min {gaps.min()}, max {gaps.max()} ({gaps.size} gaps)'
          if gaps.size else 'fewer than two non-zero rewards per env')
  return (text + f'\nnon-zero rewards per game: {counts}'
          + (f' (mean {np.mean(counts):.1f})' if counts else '') + f'\ngame returns: {returns}')
