"""The RL math: V-trace and IMPALA losses, PPO, PopArt, reward transforms, optimisers, types."""
