"""The house's weight budget ([27]): the library (every tracked .py and .sh
file outside tests/ and docs/) at most LIBRARY_LINES lines, no library file
over FILE_LINES, and docs/*.md at most DOCS_LINES in all. A change that
grows past them wants a better design or a deletion, not a raised number."""

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY_LINES = 18_000
FILE_LINES = 400
DOCS_LINES = 4_000


def _tracked(*patterns):
  try:
    out = subprocess.run(['git', 'ls-files', *patterns], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip('not a git checkout: the budget counts tracked files')
  return [ROOT / p for p in out.split()]


def _lines(path: pathlib.Path) -> int:
  return len(path.read_text().splitlines())


def test_the_library_holds_its_line_budget():
  files = [p for p in _tracked('*.py', '*.sh')
           if p.relative_to(ROOT).parts[0] not in ('tests', 'docs')]
  sizes = {str(p.relative_to(ROOT)): _lines(p) for p in files}
  too_long = {f: n for f, n in sizes.items() if n > FILE_LINES}
  assert not too_long, f'files over {FILE_LINES} lines: {too_long}'
  total = sum(sizes.values())
  assert total <= LIBRARY_LINES, f'the library has {total:,} lines, over {LIBRARY_LINES:,}'


def test_the_docs_hold_their_line_budget():
  pages = [p for p in _tracked('docs/*.md') if p.parent == ROOT / 'docs']   # not the archives'
  total = sum(_lines(p) for p in pages)
  assert total <= DOCS_LINES, f'docs/*.md have {total:,} lines, over {DOCS_LINES:,}'
