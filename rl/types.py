"""The data that crosses between actors and the learner."""

from typing import Any, Dict, NamedTuple

import jax


class Unroll(NamedTuple):
  """T+1 consecutive steps of B envs, time-major [T+1, B, ...].

  Step t holds x_t, the action taken there and its outcome. The last step is
  the next unroll's first: its value is the bootstrap. The step from a
  terminal observation is a reset step: its next step has `first` set.
  """
  obs: Dict[str, jax.Array]      # [T+1, B, ...]
  first: jax.Array               # bool [T+1, B]: x_t starts an episode
  action: jax.Array              # int32 [T+1, B]: a_t
  behaviour_logits: jax.Array    # float32 [T+1, B, A]: actor's logits at x_t
  reward: jax.Array              # float32 [T+1, B]: r_t for a_t (scaled, unclipped)
  discount: jax.Array            # float32 [T+1, B]: 0 if a_t terminated the episode
  task_id: jax.Array             # int32 [T+1, B]
  core_state: Any                # recurrent state before x_0, leaves [B, ...]


# Which axis of each Unroll field is the batch axis (for sharding).
BATCH_AXES = Unroll(obs=1, first=1, action=1, behaviour_logits=1, reward=1,
                    discount=1, task_id=1, core_state=0)
