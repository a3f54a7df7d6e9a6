"""An environment family: one object that knows a set of env ids.

Everything the rest of the code asks of an env goes through its family (registry.family_of). A new
family is a subclass of `EnvFamily` passed to `registry.register`; nothing else changes
(tests/system/test_plugins.py). The built-in ones are in envs/families.py.
"""

import abc
import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Spec = Dict[str, Tuple[tuple, Any]]   # observation key -> (shape without batch, dtype)
Settings = Mapping[str, Any]          # config group name -> its settings (a frozen dataclass)
Resources = Mapping[str, int]         # a family's counts per actor, e.g. {'threads': 2}


class EnvKwargsError(ValueError):
  """A task's env_kwargs that its env does not take."""


@dataclasses.dataclass(frozen=True)
class BatchContext:
  """What make_batches gets beside the groups: the family's counts per actor (`size`), its settings
  groups, the keys the network reads, and the run folder (None outside a run)."""
  resources: Resources
  settings: Settings
  observation_keys: Tuple[str, ...]
  workdir: Optional[str] = None


class EnvFamily(abc.ABC):
  """The env ids a family knows and how to make, size and describe their
  envs; subclasses set `name` (and `settings_groups`, `batches_together`
  where they need them) and implement the abstract methods."""

  name: str = ''
  # The config groups it owns: name -> settings dataclass (infra/settings.py).
  settings_groups: Mapping[str, type] = {}
  # Whether make_batches takes all of an actor's groups of this family at once (NLE's tasks share
  # one set of worker processes per env id); else it gets one group at a time, in task order.
  batches_together: bool = False

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

    Raises:
      EnvKwargsError: naming the kwargs the env does not take.
    """

  def task_env_kwargs(self, task: Dict[str, Any], num_tasks: int, settings: Settings,
                      training: bool) -> Dict[str, Any]:
    """A task's env kwargs for training or evaluation: its own by default.

    Args:
      task: a task of the config ('env_id', 'name', optional 'env_kwargs').
      settings: every family's settings groups, read (RunSpec.envs).
    """
    return dict(task.get('env_kwargs', {}))

  def check_tasks(self, tasks: Sequence[Tuple[int, Dict[str, Any]]], num_tasks: int,
                  settings: Settings) -> None:
    """Checks its tasks (index, task) together, at start-up: nothing by default.

    Raises:
      infra.settings.SettingsError: naming the field.
    """

  def role_task_ids(self, tasks: Sequence[Tuple[int, Dict[str, Any], Dict[str, Any]]]
                    ) -> Dict[int, Tuple[int, ...]]:
    """For families whose envs deal each episode a role that is a task of the run: task index -> the
    task id of each role, for the tasks (index, task, env kwargs) that deal them; none by default.

    Raises:
      infra.settings.SettingsError: naming the field.
    """
    return {}

  def actor_threads(self, cores: int) -> int:
    """The actor threads it would have on `cores`; a run takes the most any of
    its families asks (configs/actor_sizing.py). 1: stepped in the actor thread."""
    return 1

  def size(self, cores: int, num_actors: int, envs_per_actor: int, num_tasks: int,
           settings: Settings) -> Tuple[Dict[str, int], Tuple[str, ...]]:
    """Its counts per actor (threads, worker processes) for `num_tasks` of its
    tasks in each of `num_actors` actors with `envs_per_actor` envs (all
    tasks) on `cores`: (name -> count, the dotted settings the rule chose, a
    setting at 0 being chosen and any other kept). None by default."""
    return {}, ()

  def describe(self, resources: Resources, num_actors: int, num_tasks: int) -> str:
    """Its clause of the start-up line on how the actors are sized ('' for none)."""
    return ''

  def normalised_score(self, env_id: str, episode_return: float) -> Optional[float]:
    """The return on a scale shared across its tasks (Atari's human-normalised
    score), or None where it has none."""
    return None

  def frames_per_step(self, env_id: str, env_kwargs: Dict[str, Any]) -> int:
    """Emulator frames per agent step: 1 by default; 4 for Atari's action repeat."""
    return 1

  @abc.abstractmethod
  def make_batches(self, groups: Sequence[Tuple[int, Any]], seed: int,
                   context: BatchContext) -> List[Any]:
    """The batched envs of an actor's groups of this family, whose env axes, in
    order, hold the groups' envs.

    Args:
      groups: (index in the actor's groups, registry.EnvGroup) pairs: one at a
        time, or all of this family's when `batches_together` is set.
    """

  def action_names(self, env_id: str, env_kwargs: Dict[str, Any]) -> Optional[Sequence[str]]:
    """A task's action names in action-id order, or None (the registry then
    uses 'a0', 'a1', ...)."""
    return None

  @abc.abstractmethod
  def evaluation_env(self, env_id: str, task_id: int, env_kwargs: Dict[str, Any],
                     num_envs: int, seed: int, video: bool, context: BatchContext
                     ) -> Tuple[Any, Optional[Callable], float]:
    """An env for evaluating a task.

    Args:
      env_kwargs: registry.task_env_kwargs with training=False.
      context: as for make_batches (the run's resources for this family).

    Returns:
      (batched env with rewards unscaled, frame_fn or None, video fps): `frame_fn(result)` draws env
      0's screen (an RGB image or a render.TtyFrame) when `video`.
    """
