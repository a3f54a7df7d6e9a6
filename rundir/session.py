"""A one-process run opened for training in parts (a population member,
launch/pbt.py): validated, its folder prepared and adopted, the trainer
restored, the logger open. `train_until(env_steps)` trains and saves a
checkpoint there; `close()` stops the actors and releases the folder.
What launch/train.py does around the same steps (signals, several
processes, the final save on a stop) is left to the caller."""

from agents.trainer import Trainer
from configs import validation
from rundir import run_folder
from rundir.run_logger import RunLogger


class Session:

  def __init__(self, config):
    self.plan = validation.validate(config)
    folder = run_folder.prepare(config)
    self.config, self.workdir, self.lock = config, folder.workdir, folder.lock
    self.notes = list(folder.notes)
    self.trainer = self.logger = None
    try:
      self.trainer = Trainer(config, self.plan)
      self.notes += run_folder.adopt(self.workdir, folder.resume_step, folder.allowed)
      self.logger = RunLogger(self.workdir, config, self.plan.task_names,
                              resume_step=folder.resume_step)
    except BaseException:
      self.close()
      raise

  @property
  def env_steps(self) -> int:
    return self.trainer.env_steps

  def train_until(self, env_steps: int, on_log=None) -> None:
    """Trains to `env_steps` (or the run's total), logging every log step
    (and handing it to `on_log`), then saves a checkpoint there."""
    def log(metrics):
      self.logger.write(metrics)
      if on_log is not None:
        on_log(metrics)
    self.trainer.run(log, until=env_steps)
    if self.trainer.env_steps > self.trainer.start_env_steps:
      self.trainer.save_checkpoint()

  def close(self) -> None:
    for part in (self.trainer, self.logger, self.lock):
      if part is not None:
        (part.release if part is self.lock else part.close)()
    self.lock = None
