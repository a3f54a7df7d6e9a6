"""NLE's own agent (`nle.agent.agent`, PyTorch) as a policy for analysis/evaluation.py.

NLE's TorchBeast IMPALA baseline (Kuttler et al. 2020, arXiv 2006.13760) is loaded from its
`model.tar` and wrapped in the evaluator's policy signature, so `evaluation.play_episodes` plays it
on the same envs, seeds and episode bookkeeping as ours. torch is imported only when a peer is
loaded (TORCH_HINT names the package).
"""

import os
from types import SimpleNamespace
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from analysis import evaluation

PEER_OBSERVATION_KEYS = ('glyphs', 'blstats')
TORCH_HINT = ('torch is needed to load NLE\'s agent: pip install "torch==2.13.0+cpu" '
              '(requirements-peer.txt)')

# forward(obs, first, core_state) -> (logits [B, A] numpy, core_state)
Forward = Callable[[Dict[str, np.ndarray], np.ndarray, Any], Tuple[np.ndarray, Any]]


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """int [B] actions: the inverse CDF of softmax(logits [B, A]) at B uniforms of numpy `rng`."""
  z = logits - logits.max(axis=-1, keepdims=True)
  p = np.exp(z)
  p /= p.sum(axis=-1, keepdims=True)
  u = rng.random((logits.shape[0], 1))
  # Inverse CDF; the clip guards against a cumulative sum a hair below 1.
  return np.minimum((np.cumsum(p, axis=-1) < u).sum(axis=-1), logits.shape[-1] - 1)


def make_policy(forward: Forward, greedy: bool = False) -> Callable:
  """The evaluator's policy around a peer's `forward`: a sample from the logits
  (as the agent trains), or their argmax when `greedy` (NLE's `--mode test`).

  Returns:
    policy(variables, obs, first, core_state, rng) -> (action int32 [B], core_state, rng):
    `variables` is ignored (the peer holds its weights); `rng` is a numpy Generator.
  """

  def policy(variables, obs, first, core_state, rng):
    del variables
    logits, core_state = forward(obs, np.asarray(first, bool), core_state)
    logits = np.asarray(logits, np.float64)
    action = logits.argmax(axis=-1) if greedy else sample_actions(logits, rng)
    return action.astype(np.int32), core_state, rng

  return policy


def _import_torch():
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(TORCH_HINT) from e
  return torch


def torch_forward(model) -> Forward:
  """A `Forward` around an NLE agent's torch network: one time step of B envs, no gradients.

  Feeds what NLE's actor feeds: 'glyphs', 'blstats' and 'done' (= first: its
  LSTM zeroes the core state where set), each with a leading time axis of 1.

  Raises:
    ImportError: without torch (TORCH_HINT).
  """
  torch = _import_torch()

  def forward(obs, first, core_state):
    inputs = {k: torch.from_numpy(np.ascontiguousarray(obs[k]))[None] for k in PEER_OBSERVATION_KEYS}
    inputs['done'] = torch.from_numpy(first)[None]
    with torch.no_grad():
      out, core_state = model(inputs, core_state)
    return out['policy_logits'][0].numpy(), core_state

  return forward


class PeerAgent:
  """A loaded NLE agent for the evaluator (`initial_state(batch)`, `policy(greedy)`): its network
  (eval mode), training flags and env id (flags['env'], else 'NetHackScore-v0')."""

  def __init__(self, model, flags: Dict[str, Any]):
    self.model = model
    self.flags = dict(flags)
    self.env_id = self.flags.get('env', 'NetHackScore-v0')

  def initial_state(self, batch_size: int):
    return self.model.initial_state(batch_size)

  def policy(self, greedy: bool = False) -> Callable:
    return make_policy(torch_forward(self.model), greedy)


def load_nle_agent(model_tar: str) -> PeerAgent:
  """Builds NLE's `NetHackNet` from a `model.tar` that `nle.agent.agent` wrote, on the CPU, shaped
  from the checkpoint (actions from its policy layer, `use_lstm` from its flags).

  Raises:
    FileNotFoundError: when there is no file at the path.
    ImportError: without torch (TORCH_HINT).
    ValueError: naming the path, when the file is not a checkpoint of nle.agent.agent.
  """
  if not os.path.isfile(model_tar):
    raise FileNotFoundError(f'no NLE agent checkpoint at {model_tar}')
  torch = _import_torch()
  from nle import nethack  # pylint: disable=import-outside-toplevel
  from nle.agent import agent as nle_agent  # pylint: disable=import-outside-toplevel
  try:
    checkpoint = torch.load(model_tar, map_location='cpu', weights_only=True)
  except Exception as e:  # torch raises several kinds for a file that is not its own
    raise ValueError(f'{model_tar} is not a torch checkpoint: {e}') from e
  if not isinstance(checkpoint, dict) or not {'model_state_dict', 'flags'} <= set(checkpoint):
    raise ValueError(f'{model_tar} is not a checkpoint of nle.agent.agent '
                     '(a dict with model_state_dict and flags)')
  state, flags = checkpoint['model_state_dict'], checkpoint['flags']
  shapes = {'glyphs': SimpleNamespace(shape=nethack.DUNGEON_SHAPE),
            'blstats': SimpleNamespace(shape=nethack.BLSTATS_SHAPE)}
  model = nle_agent.NetHackNet(shapes, int(state['policy.weight'].shape[0]),
                               bool(flags.get('use_lstm', False)))
  model.load_state_dict(state)
  model.eval()
  return PeerAgent(model, flags)


def last_logged_step(model_tar: str) -> Optional[int]:
  """The last `# Step` value of TorchBeast's logs.tsv beside model.tar, or None
  without the file, the column or rows."""
  path = os.path.join(os.path.dirname(model_tar), 'logs.tsv')
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    lines = [line.rstrip('\n').split('\t') for line in f if line.strip()]
  if not lines or '# Step' not in lines[0]:
    return None
  col = lines[0].index('# Step')
  steps = [int(float(row[col])) for row in lines[1:] if len(row) > col and row[col]]
  return steps[-1] if steps else None


def task_id_of(run, task: Optional[str]) -> int:
  """The index of task name `task` in the run's tasks (None: its only task); ValueError naming the
  tasks when `task` is not one, or is None and the run has several."""
  names = list(run.plan.task_names)
  if task is None:
    if len(names) != 1:
      raise ValueError(f'{run.workdir} has {len(names)} tasks ({", ".join(names)}); '
                        'say which with --task')
    return 0
  if task not in names:
    raise ValueError(f'--task={task!r} is not a task of {run.workdir}; choose one of '
                      f'{", ".join(names)}')
  return names.index(task)


def evaluate(run, peer: PeerAgent, model_tar: str, task: Optional[str] = None,
             episodes: int = 10, greedy: bool = False, max_steps: Optional[int] = None,
             num_envs: int = evaluation.DEFAULT_NUM_ENVS, seed: int = 0) -> Dict[str, Any]:
  """Plays a peer agent on one task of our run with our evaluator's env seeds (evaluation.env_seed),
  so both agents play the same games; sampling uses numpy's default_rng([seed, task id]).

  Returns:
    evaluation.summary's record, with 'workdir' the peer's model.tar,
    'env_steps' and 'env_frames' its last logged agent step (or None), and
    'agent', 'games_of' (our run folder) and 'peer_flags' (its scalar flags).

  Raises:
    ValueError: the task is not the run's, or the peer trained on another env id than it plays.
  """
  task_id = task_id_of(run, task)
  env_id = run.spec.run.tasks[task_id]['env_id']
  if peer.env_id != env_id:
    raise ValueError(f'{model_tar} trained on {peer.env_id}, task '
                      f'{run.plan.task_names[task_id]} of {run.workdir} plays {env_id}')
  n = min(episodes, num_envs)
  env, _, _ = evaluation.make_task_env(run, task_id, n, seed=evaluation.env_seed(seed, task_id),
                                       video=False)
  try:
    played, complete, steps, _ = evaluation.play_episodes(
        env, peer.policy(greedy), None, peer.initial_state(n), episodes,
        np.random.default_rng([seed, task_id]), obs_keys=PEER_OBSERVATION_KEYS,
        max_steps=max_steps)
  finally:
    env.close()
  result = evaluation.TaskEvaluation(run.plan.task_names[task_id], played, complete, steps)
  settings = {'episodes': episodes, 'greedy': greedy, 'uniform': False, 'step': None,
              'seed': seed, 'max_steps': max_steps, 'num_envs': num_envs}
  record = evaluation.summary(run, [result], settings)
  peer_steps = last_logged_step(model_tar)
  record.update(workdir=os.path.abspath(model_tar), env_steps=peer_steps, env_frames=peer_steps,
                agent='nle.agent.agent', games_of=os.path.abspath(run.workdir),
                peer_flags={k: v for k, v in peer.flags.items()
                            if isinstance(v, (str, int, float, bool, type(None)))})
  return record
