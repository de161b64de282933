"""torch only: devices, the target, autocast state, eligibility and casts, comparison, probes."""
