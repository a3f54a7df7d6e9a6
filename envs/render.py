"""Frames for videos: NetHack's terminal drawn as an image, GIFs and MP4s.

NLE's `tty_chars` / `tty_colors` [24, 80] are the text terminal a human player sees. `render_tty`
draws them with Pillow's built-in bitmap font (6 x 11 pixels a cell, monospace, nothing to download)
in the 16 standard curses colours, by pasting precomputed glyph masks with numpy (a few ms a frame,
where drawing 1,920 cells with ImageDraw would take far longer).
"""

import contextlib
import functools
from typing import NamedTuple, Sequence, Union

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# The 16 curses colours as xterm draws them; NetHack's colour codes are these
# indices (0 black, 1 red, ..., 7 grey, 8 "no colour"/dark grey, ..., 15 white).
CURSES_COLOURS = np.array([
    (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0),
    (0, 0, 238), (205, 0, 205), (0, 205, 205), (229, 229, 229),
    (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0),
    (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255)], np.uint8)
# Text in colour 0 would vanish on the black background; NetHack's tty shows
# it in dark grey (its use_darkgray option), and so do we.
_FOREGROUND = CURSES_COLOURS.copy()
_FOREGROUND[0] = CURSES_COLOURS[8]


class TtyFrame(NamedTuple):
  """One NetHack terminal screen, kept compact until it is drawn."""
  chars: np.ndarray   # uint8 [24, 80]
  colors: np.ndarray  # int8 [24, 80], curses colour codes 0..15


@functools.lru_cache(maxsize=1)
def _glyphs() -> np.ndarray:
  """bool [256, cell_h, cell_w]: the pixels each byte lights in its cell."""
  try:
    font = ImageFont.load_default_imagefont()  # Pillow >= 10.1: the bitmap font
  except AttributeError:
    font = ImageFont.load_default()  # older Pillow: this is the bitmap font
  width, height = font.getbbox('M')[2:]
  masks = np.zeros((256, height, width), bool)
  for code in range(33, 127):  # printable ASCII; NLE's tty holds nothing else visible
    image = Image.new('L', (width, height))
    ImageDraw.Draw(image).text((0, 0), chr(code), fill=255, font=font)
    masks[code] = np.asarray(image) > 127
  return masks


def cell_size() -> tuple:
  """(height, width) in pixels of one terminal cell (Pillow's bitmap font)."""
  return _glyphs().shape[1:]


def render_tty(chars: np.ndarray, colors: np.ndarray) -> np.ndarray:
  """Draws a terminal screen as an RGB image.

  Printable ASCII (33..126) in its curses colour on black (colour 0: dark grey); other bytes blank.

  Args:
    chars: uint8 [rows, cols] (NLE's tty_chars, [24, 80]).
    colors: int [rows, cols], curses colour codes (only the low 4 bits count).

  Returns:
    uint8 [rows * cell_h, cols * cell_w, 3] (cell_size()).
  """
  chars = np.asarray(chars, np.uint8)
  rows, cols = chars.shape
  masks = _glyphs()[chars]                                   # [rows, cols, h, w]
  fg = _FOREGROUND[np.asarray(colors).astype(np.int64) & 15]  # [rows, cols, 3]
  pixels = np.where(masks[..., None], fg[:, :, None, None], np.uint8(0))
  h, w = masks.shape[2:]
  return pixels.transpose(0, 2, 1, 3, 4).reshape(rows * h, cols * w, 3)


Frame = Union[np.ndarray, TtyFrame]  # an RGB image [H, W, 3], or a terminal screen


def to_rgb(frame: Frame) -> np.ndarray:
  return render_tty(*frame) if isinstance(frame, TtyFrame) else np.asarray(frame, np.uint8)


def write_gif(path: str, frames: Sequence[Frame], fps: float) -> None:
  """Writes frames as an animated GIF that loops.

  Args:
    path: the file to write (overwritten).
    frames: RGB images [H, W, 3] or TtyFrames, at least one.
  """
  images = [Image.fromarray(to_rgb(f)).convert('P', palette=Image.Palette.ADAPTIVE)
            for f in frames]
  images[0].save(path, save_all=True, append_images=images[1:], loop=0,
                 duration=max(20, round(1000 / fps)), optimize=False)


class VideoError(OSError):
  """An MP4 could not be written: no ffmpeg (imageio-ffmpeg not installed)
  or ffmpeg failed (a full disk); the message says which."""


def mp4_writer_available() -> bool:
  """Whether `write_mp4` can run: imageio-ffmpeg is installed and finds an ffmpeg binary."""
  try:
    import imageio_ffmpeg  # pylint: disable=import-outside-toplevel
    imageio_ffmpeg.get_ffmpeg_exe()   # RuntimeError without a binary (a wheel ships one)
  except (ImportError, RuntimeError):
    return False
  return True


def write_mp4(path: str, frames: Sequence[Frame], fps: float) -> None:
  """Writes frames as an H.264 MP4 (yuv420p, plays in browsers and players).

  ffmpeg is the binary the imageio-ffmpeg wheel ships (nothing downloads). Frames are padded with
  black to even sides (yuv420p halves the colour planes), never resized.

  Args:
    path: the file to write (overwritten); its extension may be anything, the container is MP4.
    frames: RGB images [H, W, 3] or TtyFrames of one size, at least one.

  Raises:
    VideoError: without imageio-ffmpeg, or when ffmpeg fails.
  """
  try:
    import imageio_ffmpeg  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise VideoError('cannot write an MP4: the imageio-ffmpeg package (its ffmpeg binary) is not '
                     'installed; pip install -r requirements.txt, or write a GIF') from None
  images = [to_rgb(f) for f in frames]
  h, w = images[0].shape[:2]
  ph, pw = h + h % 2, w + w % 2
  writer = imageio_ffmpeg.write_frames(path, (pw, ph), fps=fps, codec='libx264',
                                       pix_fmt_out='yuv420p', macro_block_size=1,
                                       output_params=['-f', 'mp4'], ffmpeg_log_level='error')
  try:
    writer.send(None)   # starts ffmpeg
    for image in images:
      padded = np.zeros((ph, pw, 3), np.uint8)
      padded[:h, :w] = image
      writer.send(np.ascontiguousarray(padded))
    writer.close()
  except (OSError, RuntimeError) as e:
    with contextlib.suppress(OSError, RuntimeError):
      writer.close()
    raise VideoError(f'ffmpeg could not write {path}: {e}') from None
