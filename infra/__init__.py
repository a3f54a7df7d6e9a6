"""Infrastructure: several processes (JAX distributed runtime, collectives on
host data, watchdog) and stop signals."""
