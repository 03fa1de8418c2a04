"""The command line: ``python -m mnn_engine``."""
