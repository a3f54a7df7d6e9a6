"""The composition roots of a population (launch/pbt.py) and its members:
the ml_collections config becomes frozen RunSpecs here and is not seen
after (a single run's root is launch/train.py: validation.validate_everywhere).
A member's config travels to its process as the population's `source`
(plain JSON) and is composed there, with its own folder, seed and
hyperparameters."""

import math
from typing import Any, Dict, Mapping, Tuple

from configs import common
from configs import pbt
from configs import resume
from configs import validation
from configs.spec import RunSpec

# A population's folder when workdir is empty: the default run folder's name + this.
POPULATION_SUFFIX = '-pbt'


def population(config, size=None) -> Tuple[RunSpec, pbt.Settings]:
  """A population's spec and PBT settings, checked.

  Its workdir defaults to runs/<config_name>-<timestamp>-pbt; actors.cores
  left at 0 becomes the CPUs Ray gives each member (members train side by
  side, each sizing its actors for its own share). Changes `config` so.

  Args:
    size: the number of members; None: pbt.population.

  Raises:
    ConfigError: a bad setting, named.
  """
  settings = pbt.check(config, validation.validate(config), size)
  with config.unlocked():
    if not config.workdir:
      config.workdir = common.default_workdir(config.config_name) + POPULATION_SUFFIX
    if not config.actors.cores:
      config.actors.cores = max(1, math.ceil(settings.cpus_per_member))
  return validation.validate_spec(config), settings


def member_spec(source: Mapping[str, Any], values: Dict[str, float], settings: pbt.Settings,
                workdir: str, seed: int, group: str) -> RunSpec:
  """A member's spec: the population's `source` with its own workdir, seed and
  wandb group (when the source sets none), no progress lines, and `values`
  applied (configs/pbt.apply).

  Raises:
    ConfigError: a value the checks refuse.
  """
  config = resume.from_source(source)
  with config.unlocked():
    config.workdir = workdir
    config.seed = seed
    config.log.progress = False
    config.wandb.group = config.wandb.group or group
    pbt.apply(config, values)
  return validation.validate_spec(config)
