"""The checks: cases and ids, the registry of checks, the op-list checks, reproductions."""
