"""IMPALA's Atari protocol on EnvPool, in one place, and human-normalised scores.

The protocol (Espeholt et al. 2018, arXiv 1802.01561): 84x84 grey, frame stack 4, action repeat 4
with a max over the last two frames, up to 30 no-op starts, episodes capped at 108k frames, end of
episode on life loss for training only, rewards unclipped here (the learner clips or not); sticky
actions optional (Machado et al. 2018, arXiv 1709.06009).

With end-of-life episodes EnvPool reports a life loss as `terminated` and a game over in
`info['terminated']`, passed on as `StepResult.game_over`, so logged returns are whole games.
"""

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple

import envpool
from envpool.registration import registry

from infra.settings import boolean, frozen_setting, integer, one_of, setting

ACTION_SETS = ('auto', 'full', 'minimal')
FRAMES_PER_EPISODE_CAP = 108_000  # 30 minutes of play at 60 Hz
FRAME_SKIP = 4


def _atari_games() -> Tuple[str, ...]:
  """Every '<game>-v5' whose spec class is AtariEnvSpec, read from the registry: making each spec
  would import MuJoCo and every other family at start (tests/unit/test_atari.py checks the list)."""
  return tuple(sorted(env_id[:-len('-v5')] for env_id in envpool.list_all_envs()
                      if env_id.endswith('-v5') and registry.specs[env_id][1] == 'AtariEnvSpec'))


ATARI_GAMES = _atari_games()  # every Atari game EnvPool ships, by name ("Pong")


def env_id(game: str) -> str:
  return f'{game}-v5'


@dataclasses.dataclass(frozen=True)
class AtariConfig:
  """IMPALA's Atari protocol switches (the config's `atari` group); each
  task's EnvPool options are built from them (`protocol_kwargs`)."""
  episodic_life: bool = frozen_setting(True, "end the learner's episode at each life lost (training "
                                'only)', boolean)
  sticky_actions: bool = frozen_setting(False, 'repeat the last action with p=0.25 (Machado et al. 2018)',
                                 boolean)
  action_set: str = frozen_setting('auto', "'auto' (full 18 for several games, minimal for one), "
                            "'full', 'minimal'", one_of(ACTION_SETS))
  noop_max: int = frozen_setting(30, 'up to this many no-op actions at the start of a game', integer(0))
  fire_reset: bool = frozen_setting(False, "press FIRE after reset (IMPALA's protocol does not)", boolean)


def game_of(env_id_: str) -> Optional[str]:
  """The Atari game of an env id ('Pong' for 'Pong-v5'); None if it is not an EnvPool Atari game."""
  if env_id_.endswith('-v5') and env_id_[:-3] in ATARI_GAMES:
    return env_id_[:-3]
  return None


def check_games(games: Sequence[str]) -> Tuple[str, ...]:
  """The games as a tuple, in order, after checking them.

  Raises:
    ValueError: for no games, unknown names (naming the valid games), or a game listed twice.
  """
  games = tuple(games)
  if not games:
    raise ValueError('no Atari games given; e.g. games=Pong+Breakout')
  unknown = [g for g in games if g not in ATARI_GAMES]
  if unknown:
    raise ValueError(f'unknown Atari game(s) {", ".join(unknown)}; '
                     f'valid games: {", ".join(ATARI_GAMES)}')
  if len(set(games)) != len(games):
    raise ValueError(f'games listed twice in {"+".join(games)}')
  return games


def protocol_kwargs(atari_config, num_tasks: int, training: bool = True) -> Dict:
  """envpool.make's kwargs for an Atari task: the module docstring's protocol per the `atari` group.

  Args:
    num_tasks: the run's number of tasks; action_set 'auto' is the full
      18-action set when it is > 1, the game's minimal set otherwise.
    training: False for evaluation: whole games, no end-of-life episodes.

  Raises:
    ValueError: for an action_set not in ACTION_SETS.
  """
  action_set = atari_config.action_set
  if action_set not in ACTION_SETS:
    raise ValueError(f'atari.action_set {action_set!r}; allowed: {", ".join(ACTION_SETS)}')
  full = action_set == 'full' or (action_set == 'auto' and num_tasks > 1)
  return dict(
      img_height=84, img_width=84, gray_scale=True, stack_num=4,
      frame_skip=FRAME_SKIP, noop_max=int(atari_config.noop_max),
      max_episode_steps=FRAMES_PER_EPISODE_CAP // FRAME_SKIP,
      episodic_life=bool(atari_config.episodic_life) and training,
      zero_discount_on_life_loss=False, reward_clip=False,
      use_fire_reset=bool(atari_config.fire_reset),
      repeat_action_probability=0.25 if atari_config.sticky_actions else 0.0,
      full_action_space=full)


# Random-policy and human scores per game, the standard Atari-57 reference table: Mnih et al. 2015
# (Nature DQN, Extended Data Table 2) for 49 games, completed for the rest of the 57 by Wang et al.
# 2016 (dueling networks) and Badia et al. 2020 (Agent57, Table H.1 uses these same values).
_REFERENCE = {  # game: (random, human)
    'Alien': (227.8, 7127.7), 'Amidar': (5.8, 1719.5), 'Assault': (222.4, 742.0),
    'Asterix': (210.0, 8503.3), 'Asteroids': (719.1, 47388.7),
    'Atlantis': (12850.0, 29028.1), 'BankHeist': (14.2, 753.1),
    'BattleZone': (2360.0, 37187.5), 'BeamRider': (363.9, 16926.5),
    'Berzerk': (123.7, 2630.4), 'Bowling': (23.1, 160.7), 'Boxing': (0.1, 12.1),
    'Breakout': (1.7, 30.5), 'Centipede': (2090.9, 12017.0),
    'ChopperCommand': (811.0, 7387.8), 'CrazyClimber': (10780.5, 35829.4),
    'Defender': (2874.5, 18688.9), 'DemonAttack': (152.1, 1971.0),
    'DoubleDunk': (-18.6, -16.4), 'Enduro': (0.0, 860.5),
    'FishingDerby': (-91.7, -38.7), 'Freeway': (0.0, 29.6),
    'Frostbite': (65.2, 4334.7), 'Gopher': (257.6, 2412.5),
    'Gravitar': (173.0, 3351.4), 'Hero': (1027.0, 30826.4),
    'IceHockey': (-11.2, 0.9), 'Jamesbond': (29.0, 302.8),
    'Kangaroo': (52.0, 3035.0), 'Krull': (1598.0, 2665.5),
    'KungFuMaster': (258.5, 22736.3), 'MontezumaRevenge': (0.0, 4753.3),
    'MsPacman': (307.3, 6951.6), 'NameThisGame': (2292.3, 8049.0),
    'Phoenix': (761.4, 7242.6), 'Pitfall': (-229.4, 6463.7), 'Pong': (-20.7, 14.6),
    'PrivateEye': (24.9, 69571.3), 'Qbert': (163.9, 13455.0),
    'Riverraid': (1338.5, 17118.0), 'RoadRunner': (11.5, 7845.0),
    'Robotank': (2.2, 11.9), 'Seaquest': (68.4, 42054.7),
    'Skiing': (-17098.1, -4336.9), 'Solaris': (1236.3, 12326.7),
    'SpaceInvaders': (148.0, 1668.7), 'StarGunner': (664.0, 10250.0),
    'Surround': (-10.0, 6.5), 'Tennis': (-23.8, -8.3), 'TimePilot': (3568.0, 5229.2),
    'Tutankham': (11.4, 167.6), 'UpNDown': (533.4, 11693.2), 'Venture': (0.0, 1187.5),
    'VideoPinball': (0.0, 17667.9), 'WizardOfWor': (563.5, 4756.5),
    'YarsRevenge': (3092.9, 54576.9), 'Zaxxon': (32.5, 9173.3),
}

# Every EnvPool game -> (random, human), None where no reference exists.
REFERENCE_SCORES: Dict[str, Optional[Tuple[float, float]]] = {
    g: _REFERENCE.get(g) for g in ATARI_GAMES}


def human_normalised(game: Optional[str], score: float) -> Optional[float]:
  """(score - random) / (human - random) with REFERENCE_SCORES; None for a
  game without references and for game None (not Atari)."""
  ref = REFERENCE_SCORES.get(game)
  if ref is None:
    return None
  random_score, human = ref
  return (score - random_score) / (human - random_score)


def hns_summary(per_game: Dict[str, float]) -> Dict[str, float]:
  """{'median': ..., 'mean': ...} of the finite per-game human-normalised scores; {} if none."""
  values = sorted(v for v in per_game.values() if v is not None and math.isfinite(v))
  if not values:
    return {}
  n = len(values)
  median = values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])
  return {'median': median, 'mean': sum(values) / n}
