"""launch/train.py with a fault injected into its envs, for tests that run
the command: `python -m tests.support.train_with_faults --nan_reward_step=K
<train.py's flags>` (from the repository root) makes every actor's rewards
NaN from its K-th env step on (faults.make_rewards_nan;
faults.nan_reward_call gives K for an update)."""

import os
import runpy
import sys

from tests.support import faults

TRAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'launch', 'train.py')

if __name__ == '__main__':
  flag = next(a for a in sys.argv[1:] if a.startswith('--nan_reward_step='))
  sys.argv.remove(flag)
  faults.make_rewards_nan(None, int(flag.split('=', 1)[1]))
  sys.argv[0] = TRAIN
  runpy.run_path(TRAIN, run_name='__main__')
