"""Population-based training (Jaderberg et al. 2017, arXiv 1711.09846) of any
config, on Ray Tune (`launch/pbt.py` is the command line and says how it works).
Each member is a run folder, `<workdir>/members/member_NNNNN/`.
"""

import datetime
import json
import math
import os
import shutil
import signal
import threading

from configs import pbt as pbt_lib
from configs import compose
from infra import stop_signals
from rundir import lifecycle
from rundir import population_record as record
from rundir import ray_cluster
from rundir import ray_state
from rundir import run_folder

MEMBERS, EVENTS, SUMMARY = record.MEMBERS, record.EVENTS, record.SUMMARY
MEMBER_INFO = 'member.json'
STATE = 'state'
REPLACED = 'checkpoints.replaced'


class PopulationFinished(Exception):
  """The population is already at total_env_steps; the message says so."""


class PopulationStopped(RuntimeError):
  """Ray Tune ended the population early (a full disk, a lost cluster); the
  message says so in one line, population.json written from the members' folders."""


class MemberStopped(RuntimeError):
  """A member asked to stop (SIGTERM to its process) that saved and closed."""


member_name = record.member_name


def member_index(trial_id: str) -> int:
  """A member's index from its Ray trial id: the digits after the last '_', else 0."""
  suffix = trial_id.rsplit('_', 1)[-1]
  return int(suffix) if suffix.isdigit() else 0


def install_checkpoint(state_dir: str, workdir: str, step: int, own: bool) -> None:
  """Makes the checkpoint in `state_dir` the newest of a member's run folder at `step`.

  For the member's own (`own`, a restore), an intact checkpoint at `step` or
  later is kept instead: Ray restores from its last checkpoint, which can be
  older than what the member saved since. Otherwise the copy is staged whole
  as `<step>.copying` before the member's checkpoints at `step` or later move
  to `checkpoints.replaced/`, so a failed copy (OSError) leaves the folder as it was.
  """
  from agents import checkpoint  # pylint: disable=import-outside-toplevel
  root = checkpoint.directory(workdir)
  os.makedirs(root, exist_ok=True)
  target = os.path.join(root, str(step))
  later = [s for s in checkpoint.steps_on_disk(workdir) if s >= step]
  if own and any(checkpoint.damage(os.path.join(root, str(s))) is None for s in later):
    return
  staged = target + '.copying'
  shutil.rmtree(staged, ignore_errors=True)   # a copy an earlier failure left
  try:
    shutil.copytree(state_dir, staged)
  except BaseException:
    shutil.rmtree(staged, ignore_errors=True)
    raise
  for existing in later:
    dest_dir = os.path.join(os.path.abspath(workdir), REPLACED)
    os.makedirs(dest_dir, exist_ok=True)
    dest = os.path.join(dest_dir, f'{existing}.{datetime.datetime.now():%Y%m%d-%H%M%S-%f}')
    os.replace(os.path.join(root, str(existing)), dest)   # a rename: needs no space
  os.replace(staged, target)


def _trainable(tune):
  """The member class (Ray imported by the caller)."""

  class Member(tune.Trainable):
    """One member: a run folder trained interval by interval."""

    def setup(self, tune_config, base=None, settings=None, population_dir=None):
      """Makes the member's spec from `base` (the population's RunSpec source);
      the run folder opens at the first step."""
      self.settings, self.population_dir, self.ledger = settings, population_dir, None
      self.name = member_name(self.trial_id)
      self.values = {k: float(tune_config[k]) for k in settings.ranges}
      self.spec = compose.member_spec(
          base, self.values, settings, os.path.join(population_dir, MEMBERS, self.name),
          base['seed'] + member_index(self.trial_id), os.path.basename(population_dir))
      self.member_run = None
      self.copied_from = None
      self.last_score = -math.inf
      self.stop = threading.Event()   # SIGTERM: a clean stop after the update in progress
      if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())

    def load_checkpoint(self, checkpoint_dir):
      """Installs the Ray checkpoint's run checkpoint into this member's folder; a
      donor's is a copy, recorded now and logged at the next open."""
      with open(os.path.join(checkpoint_dir, MEMBER_INFO)) as f:
        info = json.load(f)
      own = info['member'] == self.name
      # After a copy, this trial's last Ray checkpoint is the donor's until the
      # next one: a resume restores it, but the copy is installed already.
      installed = not own and record.was_installed(self.population_dir, self.name, info)
      install_checkpoint(os.path.join(checkpoint_dir, STATE), self.spec.run.workdir,
                         int(info['env_steps']), own or installed)
      if installed:
        return
      if not own:   # recorded only now that it is in the member's folder
        self.copied_from = info
        event = record.installed(self.population_dir, self.name, info, self.values)
        print(record.describe(event), flush=True)
        ledger = self._ledger()
        if ledger is not None:
          ledger.add.remote(event['donor'], record.donor_row(event))
      else:
        self.last_score = info.get('score', self.last_score)

    def _open(self):
      self.member_run = lifecycle.Run(self.spec, self.stop)
      try:
        notes = self.member_run.notes + self.member_run.start()
      except BaseException:
        self.member_run.close()
        raise
      for note in notes:
        print(f'{self.name}: {note}', flush=True)
      record.write_values(self.spec.run.workdir, self.name, self.values)
      if self.copied_from is not None:
        donor = self.copied_from
        self.member_run.logger.write({
            'env_steps': int(donor['env_steps']), 'pbt/copied_from': donor['member'],
            'pbt/donor_score': donor.get('score'),
            **{f'pbt/{k}': v for k, v in self.values.items()}})

    def step(self):
      """Trains one interval (to the next multiple, at most total_env_steps) and
      writes 'pbt/score', the hyperparameters and the copies other members made
      of this one to its metrics; returns Ray's result."""
      if self.member_run is None:
        self._open()
      ray_state.prune(self._storage.trial_fs_path,
                      record.pending_steps(self.population_dir, self.name))
      total = self.spec.run.total_env_steps
      interval = self.settings.interval
      target = min(total, (self.member_run.env_steps // interval + 1) * interval)
      rows = []
      self.member_run.train(target, rows.append)
      if self.stop.is_set():
        steps = self.member_run.env_steps
        self.cleanup()
        raise MemberStopped(f'{self.name} {record.STOPPED} at env step {steps:,} (its '
                            'checkpoint saved); the same command resumes it')
      plan = self.member_run.plan
      score = pbt_lib.score(rows, plan, self.settings, self.spec.run.reward_scales)
      if score is None:  # no episode ended in the interval: the last score stands
        score = self.last_score
      self.last_score = score
      steps = self.member_run.env_steps
      self.member_run.logger.write({'env_steps': steps, 'pbt/score': score,
                                 **{f'pbt/{k}': v for k, v in self.values.items()}})
      for row in self._copies_of_mine():
        # At this member's own step: metrics.jsonl's env steps never go back
        # (a step back reads as a resume, run_metrics.stitch_resumed).
        self.member_run.logger.write({**row, 'env_steps': steps})
      return {'score': score, 'env_steps': steps, 'member': self.name,
              'done': steps >= total, **self.values}

    def _ledger(self):
      """The population's copy ledger (a named Ray actor), or None when it cannot
      be reached (the population's end writes what is missing)."""
      if self.ledger is None:
        import ray  # pylint: disable=import-outside-toplevel
        try:
          self.ledger = ray.get_actor(record.LEDGER_NAME)
        except Exception as e:  # noqa: BLE001 -- Ray raises several kinds; the member goes on
          self._ledger_lost(e)
      return self.ledger or None

    def _ledger_lost(self, error):
      print(f'{self.name}: warning: the copy ledger is unreachable ({type(error).__name__}); '
            'copies of this member are written when the population ends', flush=True)
      self.ledger = False

    def _copies_of_mine(self):
      """Rows for the copies other members made of this one since its last interval."""
      ledger = self._ledger()
      if ledger is None:
        return []
      import ray  # pylint: disable=import-outside-toplevel
      try:
        return ray.get(ledger.take.remote(self.name), timeout=60)
      except Exception as e:  # noqa: BLE001 -- Ray raises several kinds; the member goes on
        self._ledger_lost(e)
        return []

    def save_checkpoint(self, checkpoint_dir):
      """Copies the newest intact run checkpoint to `<checkpoint_dir>/state`, with
      `member.json` (member, env_steps, score, workdir, values)."""
      from agents import checkpoint  # pylint: disable=import-outside-toplevel
      step, _ = checkpoint.find_intact(self.spec.run.workdir)
      shutil.copytree(os.path.join(checkpoint.directory(self.spec.run.workdir), str(step)),
                      os.path.join(checkpoint_dir, STATE))
      with open(os.path.join(checkpoint_dir, MEMBER_INFO), 'w') as f:
        json.dump({'member': self.name, 'env_steps': step, 'score': self.last_score,
                   'workdir': self.spec.run.workdir, 'values': self.values}, f)

    def reset_config(self, new_config):
      return False  # a new member process for every change: its run folder reopens

    def cleanup(self):
      """Closes the member's run (actors, logger, lock)."""
      if self.member_run is not None:
        self.member_run.close()
        self.member_run = None

  return Member


def _scheduler(tune, settings, population_dir):
  from ray.tune.schedulers import PopulationBasedTraining  # pylint: disable=import-outside-toplevel

  class RecordedPBT(PopulationBasedTraining):
    """Ray's PBT, writing every copy it decides down as pending
    (rundir/population_record.py); the recipient records it once installed."""

    def _exploit(self, tune_controller, trial, trial_to_clone):
      donor_state = self._trial_state[trial_to_clone]
      super()._exploit(tune_controller, trial, trial_to_clone)
      result = donor_state.last_result or {}
      record.decide(population_dir, {
          'time': datetime.datetime.now().isoformat(timespec='seconds'),
          'donor': member_name(trial_to_clone.trial_id), 'recipient': member_name(trial.trial_id),
          'env_steps': result.get('env_steps'), 'donor_score': donor_state.last_score,
          'recipient_score': self._trial_state[trial].last_score,
          'new_values': {k: trial.config[k] for k in settings.ranges}})

  return RecordedPBT(
      time_attr='env_steps', metric='score', mode='max',
      # Members report at interval boundaries, give or take one update: every
      # report is a perturbation point, none is two.
      perturbation_interval=max(1, settings.interval // 2),
      hyperparam_mutations={k: tune.loguniform(lo, hi) for k, (lo, hi) in settings.ranges.items()},
      quantile_fraction=settings.quantile, resample_probability=settings.resample_probability,
      perturbation_factors=settings.perturb_factors,
      custom_explore_fn=lambda c: {**c, **pbt_lib.clip(
          {k: c[k] for k in settings.ranges}, settings)},
      log_config=True)


def _ledger_class(ray):

  @ray.remote(num_cpus=0)
  class Ledger:
    """Copies waiting to be written into their donors' metrics."""

    def __init__(self):
      self._pending = {}

    def add(self, donor, row):
      self._pending.setdefault(donor, []).append(row)

    def take(self, member):
      """The rows queued for `member` (a list, emptied)."""
      return self._pending.pop(member, [])

  return Ledger


def run_population(spec, settings, address=None):
  """Runs a population of members of a spec to total_env_steps on Ray Tune.

  `spec` and `settings` come from configs/compose.population. The population
  folder (spec.run.workdir) holds members/, events.jsonl (one line per copy),
  ray/tune/ (Ray Tune's state: a population found there is resumed) and
  population.json (the summary). Ray starts locally unless `address` names a cluster.

  Returns:
    (summary, exit status 1 when a member failed, else 0); the summary's
    'finished' is False after an interrupt (the same command resumes).

  Raises:
    PopulationFinished: every member is at total_env_steps.
    rundir.run_folder.RunFolderError: a resume with other fixed settings,
      paths too long, the folder cannot be made, or another driver holds it.
    rundir.ray_cluster.ClusterError: a bad --address, or too few CPUs.
  """
  total = spec.run.total_env_steps
  population_dir = os.path.abspath(spec.run.workdir)
  run_folder.check_path_length(os.path.join(population_dir, MEMBERS, 'member_00000'))

  import ray  # pylint: disable=import-outside-toplevel
  from ray import tune  # pylint: disable=import-outside-toplevel

  storage = os.path.join(population_dir, 'ray')
  name = 'tune'
  path = os.path.join(storage, name)
  fixed = record.fixed_settings(settings, total)
  members_dir = os.path.join(population_dir, MEMBERS)
  started = bool(os.path.isdir(members_dir) and os.listdir(members_dir))
  lost = (ray_state.unusable(path, settings.population) if started or os.path.exists(path)
          else 'it is missing')
  resuming = started or lost is None
  if resuming:
    record.check_unchanged(population_dir, fixed)
  done = record.finished_at(population_dir, total)
  if done is not None:
    raise PopulationFinished(
        f'{population_dir} already finished: every member at {total:,} env '
        f'steps ({SUMMARY}); nothing to do. A population keeps its total: to train longer, start '
        'a new one in another --config.workdir')
  # One driver per population: its folder's run.lock.
  lock = run_folder.RunLock(population_dir).acquire() if os.path.isdir(population_dir) else None
  try:
    at_once = ray_cluster.connect(ray, address, settings.cpus_per_member)
  except BaseException:
    if lock is not None:
      lock.release()
    raise
  try:  # the driver leaves the cluster whatever happens: a driver still connected
    # when a cluster it joined stops is ended by Ray itself (exit status 1)
    if lock is None:
      try:
        os.makedirs(population_dir, exist_ok=True)
      except OSError as e:
        raise run_folder.RunFolderError(
            f'cannot create the population folder {population_dir}: {e.strerror or e}') from None
      lock = run_folder.RunLock(population_dir).acquire()
    print(f'population of {settings.population} in {population_dir}: {at_once} member(s) at '
          f'once ({settings.cpus_per_member:g} CPU each), exploit/explore every '
          f'{settings.interval:,} env steps, ranked by '
          f'{settings.metric if settings.metric != "auto" else settings.score_kind}', flush=True)
    # Looked up by name (population_record.py): no handle in what Tune pickles.
    ledger = _ledger_class(ray).options(name=record.LEDGER_NAME, get_if_exists=True).remote()
    starts = pbt_lib.starts(settings, spec.run.seed)
    if lost is not None and os.path.exists(path):
      print(f'Ray Tune\'s state in {path} cannot be restored ({lost}); moved to '
            f'{ray_state.set_aside(path)}', flush=True)
    if started and lost is not None:
      starts, dropped = record.resume_values(population_dir, starts)
      print(f'resuming the population from its own record ({MEMBERS}/, {record.VALUES}): each '
            f'member from its newest checkpoint with its own hyperparameters; {dropped} copies '
            'decided but not installed dropped', flush=True)
    chosen = {}

    def start_value(name):
      def sample(_):
        i = chosen.setdefault(name, iter(range(settings.population)))
        return starts[next(i)][name]
      return tune.sample_from(sample)

    trainable = tune.with_resources(
        tune.with_parameters(_trainable(tune), base=dict(spec.source), settings=settings,
                             population_dir=population_dir),
        {'cpu': settings.cpus_per_member})
    if resuming and lost is None:
      print(f'resuming the population in {path}', flush=True)
      # resume_errored: a member stopped by SIGTERM (or one that crashed)
      # goes on from its checkpoint with its own hyperparameters.
      tuner = tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True,
                                 resume_errored=True)
    else:
      if not started:
        record.write_settings(population_dir, fixed)
      tuner = tune.Tuner(
          trainable,
          param_space={k: start_value(k) for k in settings.ranges},
          tune_config=tune.TuneConfig(
              scheduler=_scheduler(tune, settings, population_dir),
              num_samples=settings.population, reuse_actors=False),
          run_config=tune.RunConfig(
              name=name, storage_path=storage, verbose=1,
              # A copy may name any Ray checkpoint: members empty them (ray_state.prune).
              checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
              failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
              stop={'env_steps': total}))
    # SIGTERM stops like Ctrl-C: Ray Tune's clean stop (its SIGUSR1).
    try:
      with stop_signals.forwarded(signal.SIGTERM, signal.SIGUSR1):
        results = tuner.fit()
    except Exception as e:  # noqa: BLE001 -- Ray ends in many ways (EOFError at a full disk)
      raise PopulationStopped(record.stopped_line(population_dir, settings, total, e)) from None
    record.write_missing_donor_rows(population_dir)
    summary = record.summarise(results, population_dir, settings, total)
    if summary['finished']:
      record.clear_pending(population_dir)
  finally:
    ray.shutdown()
    if lock is not None:
      lock.release()
  return summary, (1 if summary['failed'] else 0)

