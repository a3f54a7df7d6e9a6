#!/bin/bash
# Builds .gpusite/: the packages a lent GPU machine's image lacks (it has JAX, flax, optax, chex, orbax,
# numpy, absl, PyYAML, matplotlib, tensorboard, six; Python 3.12), unpacked from cp312 wheels and trimmed
# to fit the device tool's 64 MiB with the working tree. Run here, in the repository root:
#   bash docs/data/gpu/make_gpusite.sh
# then on the machine (the device tool, carry [".gpusite"]):
#   export PYTHONPATH=$PWD/.gpusite:$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false; python3 launch/train.py ...
# Used for the H200 runs of docs/popart_atari.md (docs/data/popart_atari/h200_runs.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -qx '/.gpusite/' .git/info/exclude || echo '/.gpusite/' >> .git/info/exclude
mkdir -p .whl && rm -rf .gpusite && mkdir .gpusite
for p in envpool==1.2.5 envpool-assets==0.3.0 ml_collections==1.1.0 rlax==0.1.9 distrax==0.1.9 \
         tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 dm-env==1.6 gymnasium==1.2.0 \
         Farama-Notifications==0.0.6 tensorboardX==2.6.5 gast==0.7.0 decorator==5.3.1 optree==0.20.0 \
         nle==1.3.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$p" 2>&1 | grep -v WARNING || true
done
for w in .whl/*.whl; do unzip -q -o "$w" -d .gpusite; done
cd .gpusite
# Only the Atari and classic-control envs and the Atari ROMs; tfp's numpy substrate and tests go.
rm -rf envpool_assets/{gfootball,mujoco,procgen,vizdoom} envpool/vizdoom/bin tensorflow_probability/substrates/numpy
find envpool -name '*.so' ! -path '*atari*' ! -path '*classic_control*' ! -path 'envpool/python/*' -size +1M -delete
find . -name '*_test.py' -delete
find . -name __pycache__ -prune -exec rm -rf {} +
# envpool/entry.py imports every env family's extension: keep the ones that are left.
python3 - <<'PY'
p = 'envpool/entry.py'
lines = []
for line in open(p).read().splitlines():
  if line.startswith('import envpool.') and 'atari' not in line and 'classic_control' not in line:
    line = f'try:\n  {line}\nexcept ImportError:\n  pass'
  lines.append(line)
open(p, 'w').write('\n'.join(lines) + '\n')
PY
du -sh .
