"""The training core: agent builder, actor threads, sharded learner, Sebulba trainer, checkpoints."""
