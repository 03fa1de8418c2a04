from mnn_engine import _mnn  # noqa
