"""NetHack characters: 'role-race-alignment-gender' strings and the game's rules.

NLE (Kuttler et al. 2020, arXiv 2006.13760) takes a character as e.g. 'val-dwa-law-fem', or '@' for
a random one dealt by the game. For an impossible combination NLE silently starts another character,
so configs check theirs here against NetHack 3.6's rules (src/role.c). Pure Python: configs import
it without loading NLE or JAX.
"""

import itertools
from typing import Mapping, NamedTuple, Optional, Tuple

# Task ids follow this order where one task per role is trained on random
# characters (chars=@ in configs/nethack_popart.py).
ROLES = ('arc', 'bar', 'cav', 'hea', 'kni', 'mon', 'pri', 'ran', 'rog', 'sam', 'tou', 'val',
         'wiz')
RACES = ('hum', 'elf', 'dwa', 'gno', 'orc')
ALIGNMENTS = ('law', 'neu', 'cha')
GENDERS = ('mal', 'fem')
RANDOM = '@'

# Title of each role, male and female (None: the same word). Lower-cased, these
# are also the names of the monsters the hero is drawn as (NLE's permonst names).
ROLE_TITLES = {
    'arc': ('Archeologist', None), 'bar': ('Barbarian', None), 'cav': ('Caveman', 'Cavewoman'),
    'hea': ('Healer', None), 'kni': ('Knight', None), 'mon': ('Monk', None),
    'pri': ('Priest', 'Priestess'), 'ran': ('Ranger', None), 'rog': ('Rogue', None),
    'sam': ('Samurai', None), 'tou': ('Tourist', None), 'val': ('Valkyrie', None),
    'wiz': ('Wizard', None),
}
RACE_NAMES = {'hum': 'human', 'elf': 'elf', 'dwa': 'dwarf', 'gno': 'gnome', 'orc': 'orc'}
ALIGNMENT_NAMES = {'law': 'lawful', 'neu': 'neutral', 'cha': 'chaotic'}
GENDER_NAMES = {'mal': 'male', 'fem': 'female'}

# role.c, roles[].allow: races, alignments, genders each role may have.
_ROLE_ALLOWS = {
    'arc': ('hum dwa gno', 'law neu', 'mal fem'),
    'bar': ('hum orc', 'neu cha', 'mal fem'),
    'cav': ('hum dwa gno', 'law neu', 'mal fem'),
    'hea': ('hum gno', 'neu', 'mal fem'),
    'kni': ('hum', 'law', 'mal fem'),
    'mon': ('hum', 'law neu cha', 'mal fem'),
    'pri': ('hum elf', 'law neu cha', 'mal fem'),
    'ran': ('hum elf gno orc', 'neu cha', 'mal fem'),
    'rog': ('hum orc', 'cha', 'mal fem'),
    'sam': ('hum', 'law', 'mal fem'),
    'tou': ('hum', 'neu', 'mal fem'),
    'val': ('hum dwa', 'law neu', 'fem'),
    'wiz': ('hum elf gno orc', 'neu cha', 'mal fem'),
}
# role.c, races[].allow: every race allows both genders.
_RACE_ALIGNMENTS = {'hum': 'law neu cha', 'elf': 'cha', 'dwa': 'law', 'gno': 'neu', 'orc': 'cha'}


class Character(NamedTuple):
  """A NetHack character by its three-letter codes; str() gives 'val-dwa-law-fem'."""
  role: str
  race: str
  alignment: str
  gender: str

  def __str__(self) -> str:
    return '-'.join(self)


def _a(word: str) -> str:
  return ('an ' if word[0].lower() in 'aeiou' else 'a ') + word


def _one_of(codes: str, names: Mapping[str, str]) -> str:
  words = [names[c] for c in codes.split()]
  return words[0] if len(words) == 1 else ', '.join(words[:-1]) + ' or ' + words[-1]


def _why_impossible(c: Character) -> Optional[str]:
  races, alignments, genders = _ROLE_ALLOWS[c.role]
  role = _a(ROLE_TITLES[c.role][0])
  if c.race not in races.split():
    return f'{role} must be {_one_of(races, RACE_NAMES)}'
  if c.gender not in genders.split():
    return f'{role} must be {_one_of(genders, GENDER_NAMES)}'
  if c.alignment not in alignments.split():
    return f'{role} must be {_one_of(alignments, ALIGNMENT_NAMES)}'
  if c.alignment not in _RACE_ALIGNMENTS[c.race].split():
    return f'{_a(RACE_NAMES[c.race])} must be {_one_of(_RACE_ALIGNMENTS[c.race], ALIGNMENT_NAMES)}'
  return None


# Every character NetHack 3.6 can start, in ROLES x RACES x ALIGNMENTS x GENDERS order.
CHARACTERS = tuple(c for c in itertools.starmap(
    Character, itertools.product(ROLES, RACES, ALIGNMENTS, GENDERS)) if _why_impossible(c) is None)


def parse_character(spec: str) -> Optional[Character]:
  """The Character a 'role-race-alignment-gender' string names (any case), or None for '@' (RANDOM).

  Raises:
    ValueError: for a spec not of four known parts, or an impossible
      combination, naming the rule it breaks and its role's characters.
  """
  spec = str(spec).strip()
  if spec == RANDOM:
    return None
  parts = spec.lower().split('-')
  if len(parts) != 4:
    raise ValueError(f"character {spec!r} must be 'role-race-alignment-gender' "
                     f"(e.g. 'val-dwa-law-fem') or {RANDOM!r} for a random one")
  for part, kind, choices in zip(parts, ('role', 'race', 'alignment', 'gender'),
                                 (ROLES, RACES, ALIGNMENTS, GENDERS)):
    if part not in choices:
      plural = 'alignments' if kind == 'alignment' else kind + 's'
      raise ValueError(f'unknown {kind} {part!r} in {spec!r}; {plural}: {", ".join(choices)}')
  c = Character(*parts)
  why = _why_impossible(c)
  if why is not None:
    same_role = ', '.join(str(x) for x in CHARACTERS if x.role == c.role)
    raise ValueError(f'impossible character {spec!r}: {why} (possible '
                     f'{ROLE_TITLES[c.role][0]}s: {same_role})')
  return c


def role_of_monster(name: str) -> Optional[str]:
  """The role whose hero is drawn as monster `name` ('cav' for 'cavewoman'), or None."""
  for role, titles in ROLE_TITLES.items():
    if name in (t.lower() for t in titles if t):
      return role
  return None


def role_task_ids(random_tasks: Mapping[str, int]) -> Optional[Tuple[int, ...]]:
  """Task ids, in ROLES order, of the episodes of envs dealt random characters.

  Tasks named by role (one per role) give each episode the id of the role
  dealt; a single task under another name pools all roles (None).

  Args:
    random_tasks: the names of the tasks that play '@' -> their task ids.

  Raises:
    ValueError: when the tasks are neither one per role nor a single one.
  """
  if len(random_tasks) == 1 and next(iter(random_tasks)) not in ROLES:
    return None
  unknown = sorted(set(random_tasks) - set(ROLES))
  missing = [r for r in ROLES if r not in random_tasks]
  if unknown or missing:
    raise ValueError(
        f"tasks playing random characters ('{RANDOM}') must be one per role, named "
        f'{", ".join(ROLES)} (or a single task for all roles); '
        + (f'unknown: {", ".join(unknown)}' if unknown else f'missing: {", ".join(missing)}'))
  return tuple(random_tasks[r] for r in ROLES)
