"""airlock."""
