"""Saliency maps (analysis/saliency.py) over one episode of a trained agent."""

import numpy as np

from analysis import evaluation
from analysis import saliency as sal
from envs import render


class SaliencyError(ValueError):
  """A wrong flag or a run that cannot be explained: one line, exit status 2."""

def explain(run, task_id: int, start: int, stop: int, stride: int, greedy: bool, seed: int):
  """Plays one episode of a task to `stop` (or its end) and computes saliency
  maps at each step from `start` on: Atari perturbs the 84x84 frames on a grid
  of `stride` pixels (0: 5), NetHack blanks blocks of `stride` map cells (0: 3).

  Returns:
    Per explained step (image, policy map, value map, info): the image a video shows; the maps cover
    it at 84x84 (Atari) or 24x80 terminal cells (NetHack), to be resized onto it (saliency.overlay);
    info holds 'step', 'policy_max' and 'value_max'.

  Raises:
    SaliencyError: for a run without image observations.
  """
  nethack = 'glyphs' in run.observation_spec
  if not nethack and 'frames' not in run.observation_spec:
    raise SaliencyError('saliency needs image observations (Atari frames or NetHack glyphs)')
  scorer = sal.make_scorer(run.network, task_id)
  stride = stride or (3 if nethack else 5)
  if not nethack:
    masks = sal.frame_masks(84, 84, stride)
    centres = sal.grid(84, 84, stride)
  out = []

  def observe(t, obs, first, state, frame):
    if t < start:
      return
    single = {k: v[0] for k, v in obs.items()}
    if nethack:
      perturbed, corners = sal.perturb_glyphs(single['glyphs'], stride)
      s_pi, s_v = sal.saliency_scores(scorer, run.variables, single, bool(first[0]), state,
                                      'glyphs', perturbed)
      shape = single['glyphs'].shape
      pmap, vmap = (sal.upsample(s, corners, shape, stride) for s in (s_pi, s_v))
      # The map is rows 1..21 of the 24x80 terminal.
      pmap, vmap = (np.pad(m, ((1, 24 - 1 - shape[0]), (0, 80 - shape[1]))) for m in (pmap, vmap))
      image = render.render_tty(*frame)
    else:
      perturbed = sal.perturb_frames(single['frames'], masks)
      s_pi, s_v = sal.saliency_scores(scorer, run.variables, single, bool(first[0]), state,
                                      'frames', perturbed)
      pmap, vmap = (sal.upsample(s, centres, (84, 84), stride) for s in (s_pi, s_v))
      image = np.asarray(frame)
    out.append((image, pmap, vmap, {'step': t, 'policy_max': float(s_pi.max()),
                                    'value_max': float(s_v.max())}))

  evaluation.play_one_episode(run, task_id, observe, max_steps=stop, seed=seed, greedy=greedy)
  return out
