"""Infrastructure: several processes, the JAX distributed runtime, stop signals, watchdogs."""
