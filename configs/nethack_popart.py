"""The main job: one PopArt IMPALA agent across NetHack characters on NLE.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/nethack_popart.py:task=Staircase,chars=val-dwa-law-fem+wiz-elf-cha-mal
  python launch/train.py --config=configs/nethack_popart.py:smoke

Each character is a task with its own PopArt statistics and value output;
rewards (in-game score deltas) are not clipped.
"""

from configs import common

NLE_TASKS = {
    'Score': 'NetHackScore-v0', 'Staircase': 'NetHackStaircase-v0',
    'StaircasePet': 'NetHackStaircasePet-v0', 'Oracle': 'NetHackOracle-v0',
    'Gold': 'NetHackGold-v0', 'Eat': 'NetHackEat-v0', 'Scout': 'NetHackScout-v0',
    'Challenge': 'NetHackChallenge-v0',
}
DEFAULT_CHARS = ('mon-hum-neu-mal', 'val-dwa-law-fem', 'wiz-elf-cha-mal', 'tou-hum-neu-fem')


def get_config(arg=None):
  variant = common.parse_variant(arg, {'task': 'Score', 'chars': DEFAULT_CHARS,
                                       'smoke': False})
  if variant['task'] not in NLE_TASKS:
    raise ValueError(f'unknown NLE task {variant["task"]!r}; choose one of {", ".join(NLE_TASKS)}')
  env_id = NLE_TASKS[variant['task']]
  c = common.base_config()
  c.config_name = 'nethack_popart'
  c.total_env_steps = 1_000_000_000
  c.reward_mode = 'none'        # PopArt handles the scale of in-game score deltas
  c.popart.enabled = True
  c.network.name = 'nle_simple'
  c.tasks = tuple(common.task(ch, env_id, character=ch) for ch in variant['chars'])
  c.actors.num_actors = 1
  c.actors.envs_per_actor = 8 * len(variant['chars'])
  c.actors.nle_workers = 2
  c.batch_size = c.actors.envs_per_actor
  c.log.every_seconds = 10.0
  if variant['smoke']:
    common.apply_smoke(c)
  return c
