"""An environment family: one object that knows a set of env ids.

Everything the rest of the code asks of an env goes through its family
(envs/registry.family_of): validation asks for the spaces and checks the
kwargs, the actors ask for batches, the action metrics for names,
evaluation for an env that can draw its screen. A new family is a subclass
of `EnvFamily` passed to `registry.register`; nothing else changes
(tests/system/test_plugins.py registers one from the test file alone).

The built-in families (envs/families.py): 'envpool' (Atari and classic
control through EnvPool), 'nle' (NetHack in worker processes) and
'synthetic' (small numpy envs stepped in the actor thread, such as Catch).
"""

import abc
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# How the actor sizing treats a family's envs (configs/actor_sizing.py):
# EnvPool pools with their own threads, NLE worker processes, or envs
# stepped in the actor thread itself.
ACTOR_KINDS = ('envpool', 'nle', 'synthetic')

Spec = Dict[str, Tuple[tuple, Any]]   # observation key -> (shape without batch, dtype)


class EnvKwargsError(ValueError):
  """A task's env_kwargs that its env does not take."""


class EnvFamily(abc.ABC):
  """The env ids a family knows and how to make and describe their envs.

  Subclasses set `name` and `actor_kind` and implement the abstract
  methods; the others have defaults.
  """

  name: str = ''
  actor_kind: str = 'synthetic'   # one of ACTOR_KINDS
  # Whether make_batches takes all of an actor's groups of this family at
  # once (NLE's tasks share one set of worker processes per env id); else
  # it gets one group at a time, in task order.
  batches_together: bool = False
  # Whether its envs deal random characters and take EnvGroup.role_task_ids.
  deals_roles: bool = False

  @abc.abstractmethod
  def matches(self, env_id: str) -> bool:
    """Whether this family knows `env_id` (an env id, e.g. 'Pong-v5')."""

  @abc.abstractmethod
  def ids_hint(self) -> str:
    """A few words naming the ids it knows, for the unknown-id error (a str)."""

  @abc.abstractmethod
  def spaces(self, env_id: str, env_kwargs: Dict[str, Any],
             observation_keys: Optional[Sequence[str]] = None,
             with_num_actions: bool = True) -> Tuple[Optional[int], Spec]:
    """The spaces of a task's env, without starting one.

    Args:
      env_id: an id this family matches.
      env_kwargs: the task's env kwargs.
      observation_keys: the keys the run reads, for families that give only
        what is asked (None: all it can give).
      with_num_actions: False may skip counting the actions where that is
        costly.

    Returns:
      (number of actions, observation spec): the spec maps each observation
      key to (shape without batch, dtype), as the batched env reports it; the
      number of actions may be None when `with_num_actions` is False.

    Raises:
      EnvKwargsError: naming the kwargs the env does not take.
    """

  def frames_per_step(self, env_id: str, env_kwargs: Dict[str, Any]) -> int:
    """Emulator frames per agent step of a task's env (an int).

    Args:
      env_id: an id this family matches.
      env_kwargs: the task's env kwargs.

    Returns:
      1 by default; 4 for Atari's action repeat.
    """
    return 1

  @abc.abstractmethod
  def make_batches(self, groups: Sequence[Tuple[int, Any]], seed: int,
                   settings: Dict[str, Any]) -> List[Any]:
    """Makes the batched envs of an actor's groups of this family.

    Args:
      groups: (index in the actor's groups, registry.EnvGroup) pairs: one
        pair at a time, or all of the actor's groups of this family when
        `batches_together` is set.
      seed: the actor's env seed.
      settings: 'envpool_threads', 'nle_workers', 'observation_keys' and
        'nle_savedir'.

    Returns:
      A list of batched envs (envs/base.BatchedEnv) whose env axes, in order,
      hold the groups' envs.
    """

  def action_names(self, env_id: str, env_kwargs: Dict[str, Any]) -> Optional[Sequence[str]]:
    """Readable action names of a task's env.

    Args:
      env_id: an id this family matches.
      env_kwargs: the task's env kwargs.

    Returns:
      The names in action-id order, or None (the default; then the registry
      uses 'a0', 'a1', ...).
    """
    return None

  @abc.abstractmethod
  def evaluation_env(self, env_id: str, task_id: int, env_kwargs: Dict[str, Any],
                     num_envs: int, seed: int, video: bool,
                     observation_keys: Sequence[str], workers: int
                     ) -> Tuple[Any, Optional[Callable], float]:
    """An env for evaluating a task.

    Args:
      env_id: an id this family matches.
      task_id: the task index its envs report.
      env_kwargs: the task's env kwargs (registry.task_env_kwargs with
        training=False).
      num_envs: the envs to play in parallel.
      seed: the env seed.
      video: whether a video is recorded.
      observation_keys: the keys the network reads.
      workers: worker processes, for families that step in processes.

    Returns:
      (batched env with rewards unscaled, frame_fn or None, video fps):
      `frame_fn(result)` draws env 0's screen (an RGB image or a
      render.TtyFrame) when `video`, else None.
    """
