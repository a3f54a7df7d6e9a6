"""Flax Linen networks: torsos, recurrent core, policy and PopArt value heads."""
