"""TOML -> typed objects: op lists, argument specs, categories, expected messages."""
