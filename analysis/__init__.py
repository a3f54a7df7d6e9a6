"""Offline tools on trained runs: loading, evaluation, saliency, inspection,
update diagnostics, frame checks."""
