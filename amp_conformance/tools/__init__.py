"""Command-line tools: coverage, discover, drift, selftest."""
