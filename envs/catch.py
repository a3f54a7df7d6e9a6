"""Catch from pixels: a control task for the Atari pipeline, in pure numpy.

bsuite's Catch (Osband et al. 2020, arXiv 1908.03568): a ball falls one row per step from a random
top column; a paddle on the bottom row moves left, stays or moves right; when the ball reaches the
bottom the episode terminates with reward +1 if the paddle is under it, else -1.

Drawn as the Atari path's observations, {'frames': uint8 [4, H, W]} (newest last, the stack filled
with the first frame at an episode start, as EnvPool does), so the Nature CNN and the whole actor /
learner path run unchanged. Follows envs/base.py's auto-reset convention.
"""

from typing import Any, Dict, Tuple

import numpy as np

from envs.base import StepResult

ENV_ID = 'Catch-pixels'
ACTION_NAMES = ('left', 'stay', 'right')
FRAME_STACK = 4
VIDEO_FPS = 4.0  # an episode is 9 steps: slow enough to follow the ball
DEFAULT_KWARGS = {
    'rows': 10,         # grid rows: the ball falls rows - 1 steps
    'columns': 5,       # grid columns: the ball's start and the paddle's range
    'img_height': 84,   # frame height in pixels (EnvPool Atari's name); >= rows
    'img_width': 84,    # frame width in pixels; >= columns
    'background': 0,    # grey level (0-255) of the empty screen
    'foreground': 255,  # grey level (0-255) of the ball and the paddle
}


def pong_like(size: int = 84) -> Dict[str, int]:
  """Catch's kwargs with Pong's difficulties at `size` pixels: a background of Pong's mean grey
  (106), small blocks of Pong's white (236) on a 10 x 10 grid, a reward only every 9 steps."""
  return {'rows': 10, 'columns': 10, 'img_height': size, 'img_width': size,
          'background': 106, 'foreground': 236}


def check_kwargs(env_kwargs: Dict[str, Any]) -> Dict[str, int]:
  """Catch's env kwargs checked, every key of DEFAULT_KWARGS filled in, as ints.

  Raises:
    ValueError: for unknown keys or non-integer values, rows < 2 or columns < 1, grey levels outside
      0..255, equal background and foreground, or a frame smaller than the grid.
  """
  allowed = ', '.join(DEFAULT_KWARGS)
  unknown = sorted(set(env_kwargs) - set(DEFAULT_KWARGS))
  if unknown:
    raise ValueError(f'unknown key(s) {", ".join(unknown)}; allowed keys: {allowed}')
  settings = {**DEFAULT_KWARGS, **env_kwargs}
  for key, value in settings.items():
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      raise ValueError(f'{key} must be an integer, got {value!r} (allowed keys: {allowed})')
  if settings['rows'] < 2 or settings['columns'] < 1:
    raise ValueError(f'needs rows >= 2 and columns >= 1, got {settings["rows"]} x '
                     f'{settings["columns"]}')
  for key in ('background', 'foreground'):
    if not 0 <= settings[key] <= 255:
      raise ValueError(f'{key} must be a grey level in 0..255, got {settings[key]}')
  if settings['background'] == settings['foreground']:
    raise ValueError(f'background and foreground are both {settings["background"]}: '
                     f'nothing would be seen')
  if settings['img_height'] < settings['rows'] or settings['img_width'] < settings['columns']:
    raise ValueError(f'a {settings["img_height"]}x{settings["img_width"]} frame cannot draw '
                     f'{settings["rows"]} rows x {settings["columns"]} columns (one pixel per '
                     f'cell at least)')
  return {k: int(v) for k, v in settings.items()}


def observation_spec(env_kwargs: Dict[str, Any]) -> Dict[str, Tuple[tuple, np.dtype]]:
  s = check_kwargs(env_kwargs)
  return {'frames': ((FRAME_STACK, s['img_height'], s['img_width']), np.dtype(np.uint8))}


def _cell_masks(cells: int, pixels: int) -> np.ndarray:
  """bool [cells, pixels]: which pixels draw each cell (cells tile the frame)."""
  edges = (np.arange(cells + 1) * pixels) // cells
  p = np.arange(pixels)
  return (p >= edges[:-1, None]) & (p < edges[1:, None])


class CatchEnv:
  """`num_envs` Catch games of one task, stepped together with numpy.

  A BatchedEnv (envs/base.py): rewards +1 / -1 / 0 times `reward_scale`, never truncated.

  Args:
    seed: seeds the balls' start columns.

  Raises:
    ValueError: for another env id, or kwargs `check_kwargs` rejects.
  """

  def __init__(self, env_id: str, num_envs: int, task_id: int,
               env_kwargs: Dict[str, Any], reward_scale: float = 1.0, seed: int = 0):
    if env_id != ENV_ID:
      raise ValueError(f'CatchEnv plays {ENV_ID}, not {env_id}')
    s = check_kwargs(env_kwargs)
    self._rows, self._columns = s['rows'], s['columns']
    self.num_envs = num_envs
    self.num_actions = len(ACTION_NAMES)
    self.observation_spec = observation_spec(env_kwargs)
    self._row_masks = _cell_masks(self._rows, s['img_height'])
    self._col_masks = _cell_masks(self._columns, s['img_width'])
    self._background, self._foreground = np.uint8(s['background']), np.uint8(s['foreground'])
    self._rng = np.random.default_rng(seed)
    self._reward_scale = np.float32(reward_scale)
    self._task_ids = np.full((num_envs,), task_id, np.int32)
    self._ball_x = np.zeros(num_envs, np.int64)
    self._ball_y = np.zeros(num_envs, np.int64)
    self._paddle_x = np.zeros(num_envs, np.int64)
    self._frames = np.zeros((num_envs,) + self.observation_spec['frames'][0], np.uint8)
    self._needs_reset = np.ones(num_envs, bool)

  def _draw(self) -> np.ndarray:
    """uint8 [B, H, W]: the current screens."""
    ball = self._row_masks[self._ball_y][:, :, None] & self._col_masks[self._ball_x][:, None, :]
    paddle = self._row_masks[-1][None, :, None] & self._col_masks[self._paddle_x][:, None, :]
    return np.where(ball | paddle, self._foreground, self._background)

  def _start(self, envs: np.ndarray) -> None:
    """New episodes in the envs where `envs` (bool [B]) is set."""
    n = int(envs.sum())
    self._ball_x[envs] = self._rng.integers(0, self._columns, n)
    self._ball_y[envs] = 0
    self._paddle_x[envs] = self._columns // 2

  def _result(self, reward, terminated) -> StepResult:
    return StepResult(obs={'frames': self._frames.copy()}, reward=reward * self._reward_scale,
                      terminated=terminated, truncated=np.zeros(self.num_envs, bool),
                      task_id=self._task_ids)

  def reset(self) -> StepResult:
    """Starts a new game in every env; the frame stack holds 4 copies of the first screen."""
    everyone = np.ones(self.num_envs, bool)
    self._start(everyone)
    self._frames[:] = self._draw()[:, None]
    self._needs_reset[:] = False
    return self._result(np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, bool))

  def step(self, actions: np.ndarray) -> StepResult:
    """Steps each game with int [B] actions (ACTION_NAMES), auto-resetting as envs/base.py says."""
    actions = np.asarray(actions)
    if actions.shape != (self.num_envs,):
      raise ValueError(f'expected {self.num_envs} actions, got shape {actions.shape}')
    resets = self._needs_reset
    live = ~resets
    # Live envs: the paddle moves (action 0 / 1 / 2 = -1 / 0 / +1), the ball falls.
    self._paddle_x = np.where(
        live, np.clip(self._paddle_x + actions.astype(np.int64) - 1, 0, self._columns - 1),
        self._paddle_x)
    self._ball_y = self._ball_y + live
    terminated = live & (self._ball_y == self._rows - 1)
    caught = self._ball_x == self._paddle_x
    reward = np.where(terminated, np.where(caught, 1.0, -1.0), 0.0).astype(np.float32)
    # Reset steps: the action is ignored, a new episode starts.
    self._start(resets)
    screens = self._draw()
    self._frames[live] = np.concatenate(
        [self._frames[live, 1:], screens[live, None]], axis=1)
    self._frames[resets] = screens[resets, None]
    self._needs_reset = terminated
    return self._result(reward, terminated)

  def render(self, env_ids=(0,)) -> np.ndarray:
    """uint8 [n, H, W, 3]: the newest screens of envs `env_ids`, grey as RGB."""
    newest = self._frames[np.asarray(env_ids), -1]
    return np.repeat(newest[..., None], 3, axis=-1)

  def close(self) -> None:
    """Does nothing: Catch holds no threads or processes."""
    pass
