"""The training core: agent builder, actor threads, sharded learner, Sebulba
trainer (Hessel et al. 2021, arXiv 2104.06272), checkpoints."""
