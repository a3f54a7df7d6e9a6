"""Every result row of the README names an archived run that exists.

A row of a table under the README's "## Results" heading must name at least
one `docs/data/...` path, and each path it names must exist in the
repository: a number in the README traces to a finished, archived run.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
_PATH = re.compile(r'docs/data/[\w./+-]+')


def _results_rows(readme: str):
  """The table rows (header and separator rows left out) of the Results section."""
  section = re.search(r'^## Results\n(.*?)(?=^## )', readme, re.S | re.M)
  assert section, 'the README has no "## Results" section'
  lines = section.group(1).splitlines()
  rows = []
  for i, line in enumerate(lines):
    if not line.startswith('|') or re.fullmatch(r'[|\s:-]+', line):
      continue
    is_header = i + 1 < len(lines) and re.fullmatch(r'[|\s:-]+', lines[i + 1])
    if not is_header:
      rows.append(line)
  return rows


def test_results_section_has_rows():
  rows = _results_rows((ROOT / 'README.md').read_text())
  assert len(rows) >= 5


def test_every_result_row_names_an_archive_that_exists():
  problems = []
  for row in _results_rows((ROOT / 'README.md').read_text()):
    paths = [p.rstrip('.') for p in _PATH.findall(row)]
    if not paths:
      problems.append(f'no docs/data archive: {row[:80]}')
    problems += [f'{p} does not exist: {row[:60]}' for p in paths if not (ROOT / p).exists()]
  assert not problems, '\n'.join(problems)


def test_rows_are_found_in_a_made_up_readme():
  readme = ('# x\n## Results\n\n| a | b |\n| --- | --- |\n| one | `docs/data/x` |\n'
            '| two | none |\n\ntext | not a row\n## Links\n| c | d |\n')
  assert _results_rows(readme) == ['| one | `docs/data/x` |', '| two | none |']
