"""Property-based checks (Hypothesis): strategies, profiles, state machine, properties."""
