"""Batched environments behind one interface: EnvPool (classic control, Atari) and NLE."""
