"""The run folder: preparing it for training (lock, resume checks, damaged
checkpoints), writing to it (config, metrics, wandb, TensorBoard), reading it back."""
