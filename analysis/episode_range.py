"""The steps of an episode a tool draws: the --frames flag of
launch/saliency.py and launch/attention_maps.py."""

from typing import Tuple


class FramesError(ValueError):
  """A malformed --frames flag: one line, exit status 2."""


def parse_frames(text: str) -> Tuple[int, int]:
  """'A:B' -> (A, B), steps A..B-1 of the episode; FramesError unless 0 <= A < B."""
  a, sep, b = text.partition(':')
  if not sep or not a.isdigit() or not b.isdigit() or int(b) <= int(a):
    raise FramesError(f'--frames must be A:B with 0 <= A < B, got {text!r}')
  return int(a), int(b)
