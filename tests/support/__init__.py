"""Helpers the test tiers share: synthetic unrolls (synthetic_unroll), example
networks (network_examples), injected faults (faults, train_with_faults),
training runs read back (training_runs), which tiers a session runs (tiers), a tool run on a full disk
(full_disk) and one process of a multi-process test (multihost_worker).
Imported as `from tests.support import full_disk`; the two scripts run as
`python -m tests.support.<name>` from the repository root."""
