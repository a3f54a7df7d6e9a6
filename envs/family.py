"""An environment family: one object that knows a set of env ids.

Everything the rest of the code asks of an env goes through its family
(registry.family_of). A new family is a subclass of `EnvFamily` passed to
`registry.register`; nothing else changes (tests/system/test_plugins.py).
The built-in ones are in envs/families.py.
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
  """The env ids a family knows and how to make and describe their envs;
  subclasses set `name` and `actor_kind` and implement the abstract methods."""

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
    """A few words naming the ids it knows, for the unknown-id error."""

  @abc.abstractmethod
  def spaces(self, env_id: str, env_kwargs: Dict[str, Any],
             observation_keys: Optional[Sequence[str]] = None,
             with_num_actions: bool = True) -> Tuple[Optional[int], Spec]:
    """(number of actions, observation spec) of a task's env, without starting one.

    Args:
      observation_keys: the keys the run reads, for families that give only
        what is asked (None: all).
      with_num_actions: False may skip counting the actions where that is
        costly (the count is then None).

    Returns:
      The spec maps each observation key to (shape without batch, dtype), as
      the batched env reports it.

    Raises:
      EnvKwargsError: naming the kwargs the env does not take.
    """

  def frames_per_step(self, env_id: str, env_kwargs: Dict[str, Any]) -> int:
    """Emulator frames per agent step: 1 by default; 4 for Atari's action repeat."""
    return 1

  @abc.abstractmethod
  def make_batches(self, groups: Sequence[Tuple[int, Any]], seed: int,
                   settings: Dict[str, Any]) -> List[Any]:
    """The batched envs of an actor's groups of this family, whose env axes, in
    order, hold the groups' envs.

    Args:
      groups: (index in the actor's groups, registry.EnvGroup) pairs: one at a
        time, or all of this family's when `batches_together` is set.
      settings: 'envpool_threads', 'nle_workers', 'observation_keys' and
        'nle_savedir'.
    """

  def action_names(self, env_id: str, env_kwargs: Dict[str, Any]) -> Optional[Sequence[str]]:
    """A task's action names in action-id order, or None (the registry then
    uses 'a0', 'a1', ...)."""
    return None

  @abc.abstractmethod
  def evaluation_env(self, env_id: str, task_id: int, env_kwargs: Dict[str, Any],
                     num_envs: int, seed: int, video: bool,
                     observation_keys: Sequence[str], workers: int
                     ) -> Tuple[Any, Optional[Callable], float]:
    """An env for evaluating a task.

    Args:
      env_kwargs: registry.task_env_kwargs with training=False.
      workers: worker processes, for families that step in processes.

    Returns:
      (batched env with rewards unscaled, frame_fn or None, video fps):
      `frame_fn(result)` draws env 0's screen (an RGB image or a
      render.TtyFrame) when `video`.
    """
