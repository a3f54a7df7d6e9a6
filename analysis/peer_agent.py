"""NLE's own agent (`nle.agent.agent`, PyTorch) as a policy for analysis/evaluation.py.

NLE 1.3.0 ships a TorchBeast IMPALA agent (the baseline of Kuttler et al.
2020, arXiv 2006.13760; IMPALA: Espeholt et al. 2018, arXiv 1802.01561) that
saves `model.tar` (a
`torch.save` dict: model_state_dict, optimizer_state_dict, flags). To compare
it with this project's agent on the same games, its network is loaded here
and wrapped in the evaluator's policy signature,

  policy(variables, obs, first, core_state, rng) -> (action [B], core_state, rng),

so that `evaluation.play_episodes` plays it on the same envs, the same seeds
and with the same episode bookkeeping as `launch/evaluate.py` plays ours.

The wrapper feeds the network what NLE's actor feeds it: `glyphs` [1, B, 21,
79], `blstats` [1, B, 27] and `done` [1, B], where `done` is True on the first
step of an episode (NLE's actor passes the previous step's `done`, and its
LSTM zeroes the core state where it is set). Actions are sampled from the
policy logits (as the agent acts in training and as our evaluator acts by
default) or, greedy, their argmax (as NLE's `--mode test` does). Sampling uses
a numpy Generator carried as `rng`.

`evaluate` plays a loaded peer on one task of one of our runs: the run names
the env id, character and env settings, and the env seeds are those
`launch/evaluate.py --seed=S` uses for that task, so both agents play the
same games. Its record is `evaluation.summary`'s, with the peer's path,
flags and logged agent steps.

torch is not a dependency of this project: it is imported when a peer is
loaded, with a one-line error naming the package to install.
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
  """One action per row of logits, drawn from their softmax by inverse CDF.

  Args:
    logits: [B, A].
    rng: a numpy Generator; B uniforms are drawn from it.

  Returns:
    int actions [B], each in 0..A-1.
  """
  z = logits - logits.max(axis=-1, keepdims=True)
  p = np.exp(z)
  p /= p.sum(axis=-1, keepdims=True)
  u = rng.random((logits.shape[0], 1))
  # Inverse CDF; the clip guards against a cumulative sum a hair below 1.
  return np.minimum((np.cumsum(p, axis=-1) < u).sum(axis=-1), logits.shape[-1] - 1)


def make_policy(forward: Forward, greedy: bool = False) -> Callable:
  """The evaluator's policy signature around a peer's `forward`.

  Args:
    forward: forward(obs, first, core_state) -> (logits [B, A], core_state).
    greedy: act with the argmax of the logits instead of a sample.

  Returns:
    policy(variables, obs, first, core_state, rng) -> (action int32 [B],
    core_state, rng): `variables` is ignored (the peer holds its own
    weights); `rng` is a numpy Generator, returned as it is after drawing.
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

  Args:
    model: an `nle.agent.agent.NetHackNet` (or anything with its call
      signature).

  Returns:
    forward(obs, first, core_state) -> (logits [B, A] numpy, core_state):
    feeds 'glyphs', 'blstats' and 'done' (= first), each with a leading time
    axis of 1.

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
  """A loaded NLE agent: its network (eval mode), its training flags, its
  env id, and `initial_state(batch)` / `policy(greedy)` for the evaluator.

  Args:
    model: the torch network.
    flags: its training flags; `env_id` is flags['env'], 'NetHackScore-v0'
      without one.
  """

  def __init__(self, model, flags: Dict[str, Any]):
    self.model = model
    self.flags = dict(flags)
    self.env_id = self.flags.get('env', 'NetHackScore-v0')

  def initial_state(self, batch_size: int):
    """The network's core state for `batch_size` envs (its own initial_state)."""
    return self.model.initial_state(batch_size)

  def policy(self, greedy: bool = False) -> Callable:
    """The evaluator's policy for this agent (make_policy of torch_forward); needs torch."""
    return make_policy(torch_forward(self.model), greedy)


def load_nle_agent(model_tar: str) -> PeerAgent:
  """Builds NLE's `NetHackNet` from a `model.tar` that `nle.agent.agent` wrote.

  The network's shape is read from the checkpoint: the number of actions
  from its policy layer, the LSTM from its flags (`use_lstm`). It is loaded
  on the CPU with weights_only=True.

  Args:
    model_tar: the path of model.tar.

  Returns:
    A PeerAgent, its network in eval mode.

  Raises:
    FileNotFoundError: when there is no file at the path.
    ImportError: without torch (TORCH_HINT).
    ValueError: naming the path, when the file is not a torch checkpoint or
      not a dict with model_state_dict and flags.
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
  """The agent steps an NLE agent logged last.

  Args:
    model_tar: the path of model.tar; `logs.tsv` beside it is read
      (TorchBeast's log, tab-separated, `# Step` column).

  Returns:
    The `# Step` value of its last row with one, or None without the file,
    the column or rows.
  """
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
  """A task's id in a run.

  Args:
    run: the loaded run.
    task: a task name; None: the run's only task.

  Returns:
    The task's index in the run's tasks.

  Raises:
    ValueError: one line naming the tasks, when `task` is not one of them,
      or is None and the run has several.
  """
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
  """Plays a peer agent on one task of our run, on the env seeds our evaluator uses for it.

  The env is the task's evaluation env (evaluation.make_task_env) seeded
  evaluation.env_seed(seed, task id), so both agents play the same games;
  the actions are sampled from numpy's default_rng([seed, task id]).

  Args:
    run: our loaded run (analysis/run_loading.LoadedRun).
    peer: the loaded PeerAgent.
    model_tar: the path of the peer's model.tar.
    task: the task name; None: the run's only task.
    episodes: the whole episodes to play.
    greedy: act with the argmax of the logits.
    max_steps: the most batched steps; None: no cap.
    num_envs: the most envs played in parallel.
    seed: the evaluation seed.

  Returns:
    evaluation.summary's JSON-ready record, with 'workdir' the peer's
    model.tar, 'env_steps' and 'env_frames' its last logged agent step (or
    None), and 'agent', 'games_of' (our run folder) and 'peer_flags' (its
    scalar flags).

  Raises:
    ValueError: when the task is not one of the run's, or the peer trained
      on another env id than the task plays.
  """
  task_id = task_id_of(run, task)
  env_id = run.config.tasks[task_id]['env_id']
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
