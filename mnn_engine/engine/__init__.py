"""The engine: the active model, its load options, events and logs."""
