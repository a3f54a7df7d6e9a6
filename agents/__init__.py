"""IMPALA learner, V-trace losses, PopArt statistics and Sebulba actors."""
