"""GradScaler tier."""
