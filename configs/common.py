"""Defaults shared by every experiment, and variant-argument parsing.

Defaults follow IMPALA's Atari table (Espeholt et al. 2018, Table G.1).
Experiment files start from `base_config()` and override what differs.
"""

import ml_collections

from networks import torsos


def task(name: str, env_id: str, **env_kwargs) -> dict:
  """One task: a unique `name` (used in metric keys), its env id (EnvPool or
  NLE) and the kwargs its env is made with. Task ids follow list order."""
  return {'name': name, 'env_id': env_id, 'env_kwargs': dict(env_kwargs)}


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.config_name = ''            # experiment name: default workdir prefix and wandb tag
  c.workdir = ''                # run folder; '' = runs/<config_name>-<timestamp>
  c.seed = 0                    # seeds params, actors' sampling and envs
  c.total_env_steps = 50_000_000  # agent steps summed over all envs (Atari: 4 frames each)
  c.checkpoint_every_steps = 5_000_000  # env steps between checkpoints; 0 = only at the end
  c.pause_at_env_steps = 0      # 0 = train to total_env_steps; else stop at this env step with a checkpoint (the learning rate still anneals over total_env_steps); the same command with a larger value, or 0, goes on
  c.keep_intermediate = False   # keep every checkpoint (for analyses); False = only the last 2

  # Learner.
  c.batch_size = 32             # unrolls per learner step (global, split over learner devices)
  c.unroll_length = 20          # T: steps per unroll (each unroll holds T + 1 observations)
  c.learning_rate = 6e-4        # annealed linearly to 0 over total_env_steps
  c.discount = 0.99             # gamma; 0 at termination, bootstrapped at truncation
  c.baseline_cost = 0.5         # weight of the value loss 0.5 * sum (target - value)^2
  c.entropy_cost = 0.01         # weight of the entropy bonus
  c.loss_reduction = 'sum'      # 'sum' over the batch's steps (IMPALA's code) or 'mean' (A2C's code)
  c.reward_mode = 'clip'        # 'clip' to [-1, 1], 'none', or 'h': values learnt in h(x) space
  c.reward_scales = ()          # per-task reward multipliers (applied in the env); () = all 1
  c.num_learner_devices = 0     # learner devices (data parallel); 0 = all local devices
  c.actor_device_id = 0         # index of the local device that runs the actors' policy

  c.loss = ml_collections.ConfigDict()
  c.loss.name = 'impala'        # 'impala' (V-trace actor-critic; the `vtrace` group) or 'ppo' (the `ppo` group)

  # How the V-trace learner uses a batch; read only when loss.name = 'impala'.
  # 1 x 1 is IMPALA's one optimiser step per batch.
  c.vtrace = ml_collections.ConfigDict()
  c.vtrace.epochs = 1           # passes over each batch
  c.vtrace.minibatches = 1      # optimiser steps per pass: the batch's unrolls shuffled and cut in this many parts, V-trace taken with each step's params
  c.vtrace.normalize_advantages = False  # the policy gradient's advantages mean 0, std 1 per minibatch (after PopArt's per-task scaling)
  c.vtrace.normalize_advantages_per = 'minibatch'  # with normalize_advantages: over the whole 'minibatch', or each 'task''s steps in it apart

  # PPO (Schulman et al. 2017) on the same actors, PopArt head and sharded
  # update; read only when loss.name = 'ppo'. Defaults are cleanrl's Atari PPO.
  c.ppo = ml_collections.ConfigDict()
  c.ppo.epochs = 4              # passes over each batch
  c.ppo.minibatches = 4         # gradient steps per pass (the batch split in this many parts)
  c.ppo.clip_epsilon = 0.1      # the surrogate's ratio clip: [1 - eps, 1 + eps]
  c.ppo.value_clip_epsilon = 0.1  # clip the value's move from its start-of-update value (normalised units); 0 = off
  c.ppo.gae_lambda = 0.95       # GAE's lambda; also V-trace's lambda with value_targets='vtrace'
  c.ppo.value_targets = 'gae'   # 'gae' (on-policy GAE, as PPO) or 'vtrace' (off-policy corrected with lambda)
  c.ppo.normalize_advantages = True  # per-minibatch advantage mean 0, std 1 (cleanrl), after PopArt's per-task scaling
  c.ppo.split = 'steps'         # minibatches of shuffled single steps ('steps'; feed-forward nets) or whole unrolls ('unrolls')

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'rmsprop'       # 'rmsprop' (the rmsprop_* fields) or 'adam' (the adam_* fields)
  c.optimizer.adam_b1 = 0.9          # Adam's first-moment decay
  c.optimizer.adam_b2 = 0.999        # Adam's second-moment decay
  c.optimizer.adam_eps = 1e-5        # Adam's epsilon, outside the square root (cleanrl's PPO: 1e-5)
  c.optimizer.rmsprop_decay = 0.99   # RMSProp second-moment decay (public IMPALA ports)
  c.optimizer.rmsprop_eps = 0.01     # IMPALA's epsilon; it assumes losses summed over the batch
  c.optimizer.eps_in_sqrt = True     # sqrt(nu + eps) as TF/IMPALA; False: sqrt(nu) + eps as PyTorch/TorchBeast
  c.optimizer.rmsprop_initial_scale = 0.0  # where RMSProp's nu starts: 0 as optax/PyTorch, 1 as TF (recipe a2c)
  c.optimizer.momentum = 0.0         # RMSProp momentum
  c.optimizer.max_grad_norm = 40.0   # gradient-norm clip
  c.optimizer.clip_by = 'global'     # 'global': the whole gradient's norm; 'term' (V-trace only): the policy's (policy gradient + entropy) and the value's gradients each clipped to max_grad_norm, then added

  c.popart = ml_collections.ConfigDict()
  c.popart.enabled = False      # one value output per task with PopArt; off = plain IMPALA
  c.popart.beta = 3e-4          # step size of the per-task moment updates
  c.popart.start = 'identity'   # 'identity' (mu 0, sigma 1, then beta: the paper's) or 'debiased' (each task's first batch sets its statistics, step beta / (1 - (1 - beta)^t) after: rl/popart.py)

  c.network = ml_collections.ConfigDict()
  c.network.init = 'lecun'      # 'lecun' (Flax's defaults) or 'orthogonal' (hidden sqrt 2, policy 0.01, value 1; cleanrl, baselines)
  c.network.name = 'mlp'        # 'mlp', 'shallow' (Nature CNN), 'resnet', 'attention', 'nle_simple', 'nle_baseline', 'nle_attention'
  c.network.centre_frames = False  # 'shallow', 'resnet', 'attention': each task's frames minus its running mean frame (networks/centring.py)
  c.network.lstm_size = 0       # LSTM core size; 0 = feed-forward
  c.network.dtype = 'auto'      # the torso's compute dtype: 'auto' (float32 on CPU, bfloat16 on GPU/TPU), 'float32', 'bfloat16'; parameters, optimiser, PopArt and losses stay float32
  c.network.kernels = 'auto'    # conv layers: 'auto' (CPU-tuned ops when lowered for CPU, XLA convolutions on GPU/TPU), 'cpu', 'xla' (networks/kernels.py)
  c.network.core_extra_inputs = True  # the core also sees the one-hot last action and clipped last reward (IMPALA)
  c.network.torso_kwargs = ml_collections.ConfigDict()  # extra torso arguments
  c.network.extra_inputs = ()   # nle_baseline / nle_fast also read: 'message' (the message line), 'under_hero' (the glyph under the hero)

  c.tasks = ()                  # tuple of task(...) dicts; their order gives the task ids

  c.actors = ml_collections.ConfigDict()
  c.actors.num_actors = 0       # actor threads; 0 = sized to the machine (configs/actor_sizing.py)
  c.actors.envs_per_actor = 16  # envs per actor thread, split evenly over the tasks
  c.actors.envpool_threads = 0  # EnvPool threads per pool (a pool per task per actor); 0 = sized to the machine
  c.actors.nle_workers = 0      # NLE worker processes per actor; 0 = sized to the machine
  c.actors.cores = 0            # the cores the 0s above are sized for; 0 = those this process may use
  c.actors.queue_size = 4       # unroll blocks the actors may have waiting for the learner
  c.actors.wait_for_learner = False  # after queueing, wait for queue room before acting on: params at most ~1 update old (PPO)
  c.actors.nle_ttyrecs = False  # write NLE ttyrecs into <workdir>/nle

  c.log = ml_collections.ConfigDict()
  c.log.every_seconds = 10.0    # metrics.jsonl / wandb / progress-line cadence
  c.log.progress = True         # print a progress line at each log step
  c.log.tensorboard = True      # TensorBoard event files in the run folder (tensorboard --logdir runs/)
  c.log.task_gradients_seconds = 120.0  # multi-task runs: every this many seconds, each task's policy and value gradient norms on the shared torso and their shares (grad_policy/<task>, grad_share_baseline/<task>, ...; V-trace); 0 = off

  c.wandb = ml_collections.ConfigDict()
  c.wandb.mode = 'offline'      # 'offline' (no account needed), 'online' or 'disabled'
  c.wandb.project = 'popart-impala'  # wandb project
  c.wandb.entity = ''           # wandb entity (team); '' = your default
  c.wandb.group = ''            # wandb group; '' = config_name
  c.wandb.tags = ()             # extra wandb tags

  # Population-based training (launch/pbt.py, configs/pbt.py; Jaderberg et
  # al. 2017): members train side by side; every interval the worst
  # quantile copies a better member's checkpoint and perturbs its
  # hyperparameters. Unused by launch/train.py.
  c.pbt = ml_collections.ConfigDict()
  c.pbt.population = 4          # members (launch/pbt.py --population overrides)
  c.pbt.adapt = ('learning_rate', 'entropy_cost')  # hyperparameters to adapt: learning_rate, entropy_cost, max_grad_norm, eps (the optimizer's epsilon)
  c.pbt.ranges = ml_collections.ConfigDict()  # (low, high) of each adapted one: members start spread over it, perturbations stay in it
  c.pbt.ranges.learning_rate = (1e-5, 1e-2)  # the base rate (annealed linearly as ever)
  c.pbt.ranges.entropy_cost = (1e-4, 1e-1)   # the entropy bonus's weight
  c.pbt.ranges.max_grad_norm = (0.1, 100.0)  # the global gradient-norm clip
  c.pbt.ranges.eps = (1e-8, 1e-1)            # the optimizer's epsilon (rmsprop_eps or adam_eps)
  c.pbt.start = 'spread'        # 'spread': each member's start log-evenly over the range (shuffled per hyperparameter); 'random': log-uniform draws
  c.pbt.interval_env_steps = 0  # env steps (per member) between exploit/explore steps; 0 = total_env_steps / 10
  c.pbt.metric = 'auto'         # what members are ranked by: 'auto' (configs/pbt.py: mean return of the last episodes, per task averaged) or a metric the run logs, e.g. 'episode_return/Pong'
  c.pbt.last_episodes = 100     # 'auto': the last this many episodes of each task in the interval
  c.pbt.quantile = 0.25         # the bottom quantile copies the top one
  c.pbt.resample_probability = 0.25  # explore: draw a new value from the range with this probability, else multiply by a perturb factor
  c.pbt.perturb_factors = (0.8, 1.2)  # explore's multipliers (PBT paper)
  c.pbt.cpus_per_member = 1.0   # CPUs Ray reserves per member: members at once = CPUs / this

  # Several processes (one per host; launch/train.py's --coordinator_address,
  # --num_processes, --process_id). Unused by a single-process run.
  c.distributed = ml_collections.ConfigDict()
  c.distributed.timeout_seconds = 60.0   # a peer silent this long stops the run, naming it
  c.distributed.connect_timeout_seconds = 300.0  # wait this long for every process at start

  return c


RECIPES = {}  # name -> recipe(config): the optimisation recipes of the Atari and control configs


def recipe(table: dict, name: str):
  """Registers the decorated function as recipe `name` of `table`. A recipe
  sets a config's optimisation fields; every config family keeps its
  recipes in a table of its own and applies them with `apply_recipe`."""
  def register(fn):
    table[name] = fn
    return fn
  return register


def apply_recipe(c: ml_collections.ConfigDict, name: str, recipes: dict = RECIPES) -> None:
  """Applies recipe `name` of `recipes` (call after the actors' env counts
  and the network are set); ValueError naming the choices for an unknown one."""
  if name not in recipes:
    raise ValueError(f'unknown recipe {name!r}; choose one of {", ".join(recipes)}')
  recipes[name](c)


@recipe(RECIPES, 'impala')
def _impala(c) -> None:
  """IMPALA's Atari table (base_config's values): unroll 20, batch 32,
  RMSProp lr 6e-4 with epsilon 0.01 inside the square root, clip 40 on the
  summed loss. Paper-faithful, but it moves the policy slowly: each update
  uses 640 steps, and with the loss summed over them the clip at 40 binds
  on almost every update (docs/pong.md, point 3)."""


@recipe(RECIPES, 'vtrace')
def _vtrace(c) -> None:
  """IMPALA's V-trace learner made to learn Pong in 1M agent steps on a
  CPU (docs/pong.md): each batch (about 32 unrolls of 20 steps) is cut into
  minibatches of about 4 shuffled unrolls, one Adam step each (lr 2.5e-4,
  epsilon 1e-5), V-trace taken with each step's params; the policy
  gradient's advantages normalised per minibatch; frames centred on each
  task's running mean frame; orthogonal initialisation, the loss averaged,
  clip 0.5, entropy 0.01, and a queue of one block (policy lag about 1.5
  updates). One pass over the data: about 12 optimiser steps per 1,000
  agent steps at the learner cost of IMPALA's one."""
  c.loss.name = 'impala'
  b = c.batch_size
  c.vtrace.epochs = 1
  c.vtrace.minibatches = min((m for m in range(1, b + 1) if b % m == 0),
                             key=lambda m: (abs(b / m - 4), m))   # about 4 unrolls each
  c.vtrace.normalize_advantages = True
  c.network.centre_frames = c.network.name in torsos.CENTRING_NETWORKS
  c.network.init = 'orthogonal'
  c.optimizer.name = 'adam'
  c.learning_rate = 2.5e-4
  c.optimizer.adam_eps = 1e-5
  c.optimizer.max_grad_norm = 0.5
  c.loss_reduction = 'mean'
  c.entropy_cost = 0.01
  c.baseline_cost = 0.5
  c.actors.queue_size = 1


@recipe(RECIPES, 'impala_adam')
def _impala_adam(c) -> None:
  """IMPALA's V-trace learner, batching left as the config has it (one game:
  32 unrolls of 20), with moolib's published Atari optimisation
  (examples/vtrace): Adam lr 6e-4 with epsilon 1e-8, the loss averaged over
  the batch, entropy cost 6e-4, clip 40."""
  c.optimizer.name = 'adam'
  c.learning_rate = 6e-4
  c.optimizer.adam_eps = 1e-8
  c.loss_reduction = 'mean'
  c.entropy_cost = 6e-4


@recipe(RECIPES, 'a2c')
def _a2c(c) -> None:
  """The optimisation of A2C (Mnih et al. 2016) as OpenAI baselines'
  TensorFlow code runs it on Atari, on the same V-trace learner: updates on
  5-step unrolls of about 16 envs (80 steps), the loss averaged over them,
  clip 0.5, and TensorFlow's RMSProp: lr 7e-4, decay 0.99, epsilon 1e-5
  inside the square root, the second moment starting at 1. The last two keep
  the step of a parameter with a tiny gradient small; without them RMSProp
  moves every first-layer weight by about lr in the same direction and most
  first-layer ReLUs die (docs/pong.md)."""
  envs = c.actors.envs_per_actor
  c.unroll_length = 5
  c.batch_size = envs * max(1, round(16 / envs))  # about 16 envs, in whole actor blocks
  c.learning_rate = 7e-4
  c.loss_reduction = 'mean'
  c.optimizer.rmsprop_eps = 1e-5
  c.optimizer.eps_in_sqrt = True
  c.optimizer.rmsprop_initial_scale = 1.0
  c.optimizer.max_grad_norm = 0.5


@recipe(RECIPES, 'ppo')
def _ppo(c) -> None:
  """cleanrl's Atari PPO (ppo_atari_envpool.py) on the same actors: batches
  of about 1,024 steps (about 16 envs x 64 steps, in whole actor blocks; the
  unroll a multiple of 4), 4 epochs x 4 minibatches of shuffled single steps
  (whole unrolls for an LSTM), clip 0.1, GAE(0.95) advantages normalised per
  minibatch, a clipped value loss, entropy 0.01, the loss averaged, clip
  0.5, Adam lr 2.5e-4 with epsilon 1e-5, orthogonal initialisation. A queue
  of one block, and actors that wait for the learner to take their block,
  keep the behaviour policy 1-2 updates old: PPO's ratio is taken against
  it, and an older one is clipped more."""
  envs = c.actors.envs_per_actor
  # Recurrent networks keep whole unrolls (their state runs along them), so
  # their batch must split into the 4 minibatches: the number of unrolls
  # nearest 16, in whole actor blocks, that 4 divides. Feed-forward ones
  # take single steps: the unroll, a multiple of 4, splits any batch.
  recurrent = torsos.is_recurrent(c.network)
  blocks = [k for k in range(1, 17) if not recurrent or envs * k % 4 == 0]
  c.batch_size = envs * min(blocks, key=lambda k: (abs(envs * k - 16), k))
  c.unroll_length = max(4, 1024 // c.batch_size // 4 * 4)
  c.ppo.split = 'unrolls' if recurrent else 'steps'
  c.loss.name = 'ppo'
  c.learning_rate = 2.5e-4
  c.entropy_cost = 0.01
  c.baseline_cost = 0.5
  c.loss_reduction = 'mean'
  c.optimizer.name = 'adam'
  c.optimizer.adam_eps = 1e-5
  c.optimizer.max_grad_norm = 0.5
  c.network.init = 'orthogonal'
  c.actors.queue_size = 1
  c.actors.wait_for_learner = True
  # Two actor threads unless the config chose: not sized to the machine, so
  # that the behaviour policy stays 1-2 updates old on any machine.
  c.actors.num_actors = c.actors.num_actors or 2


# The words a boolean variant accepts (any case).
TRUE_WORDS, FALSE_WORDS = ('1', 'true', 'yes', 'on'), ('0', 'false', 'no', 'off')


def parse_variant(arg, defaults: dict) -> dict:
  """Parses 'key=value,flag,list=a+b' against `defaults` (name -> default value).

  A bare key sets a bool to True, key=value sets it from TRUE_WORDS / FALSE_WORDS (any
  other word, or none, is a ValueError); values are converted to the
  default's type; tuples are joined with '+'. Unknown keys raise ValueError
  naming the allowed ones.
  """
  values = dict(defaults)
  if not arg:
    return values
  for item in str(arg).split(','):
    item = item.strip()
    if not item:
      continue
    key, sep, raw = item.partition('=')
    if key not in defaults:
      raise ValueError(f'unknown config variant {key!r}; allowed: {", ".join(sorted(defaults))}')
    default = defaults[key]
    if not sep:
      if not isinstance(default, bool):
        raise ValueError(f'config variant {key!r} needs a value ({key}=...)')
      values[key] = True
    elif isinstance(default, bool):
      if raw.lower() not in TRUE_WORDS + FALSE_WORDS:
        raise ValueError(f'config variant {key!r} is a boolean: {key}={{{",".join(TRUE_WORDS)}}} '
                         f'or {{{",".join(FALSE_WORDS)}}} (or a bare {key}), not {raw!r}')
      values[key] = raw.lower() in TRUE_WORDS
    elif isinstance(default, tuple):
      values[key] = tuple(v for v in raw.split('+') if v)
    elif isinstance(default, int):
      values[key] = int(raw)
    elif isinstance(default, float):
      values[key] = float(raw)
    else:
      values[key] = raw
  return values


def apply_smoke(c: ml_collections.ConfigDict) -> None:
  """Shrinks a run to seconds: two learner steps on tiny batches (call after
  the tasks are set: every task gets two envs)."""
  envs = 2 * max(1, len(c.tasks))
  c.batch_size = envs
  c.unroll_length = 4
  c.total_env_steps = 2 * c.unroll_length * c.batch_size
  c.num_learner_devices = 1
  c.actors.num_actors = 1
  c.actors.envs_per_actor = envs
  c.actors.nle_workers = 1
  c.actors.queue_size = 2
  c.log.every_seconds = 0.0
  c.wandb.mode = 'disabled'
  c.ppo.minibatches = 1         # a batch of a few unrolls may not split further
  c.vtrace.minibatches = 1
