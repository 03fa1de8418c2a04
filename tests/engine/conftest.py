"""Fixtures of the engine and pool suites."""

from __future__ import annotations

import pytest
from support import test_model_dir

from mnn_engine import ModelStore


@pytest.fixture
def store(tmp_path):
    """A store holding two generated models: ``scripted`` (tiny-scripted) and ``tiny``."""
    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny-scripted"), model_id="scripted")
    store.import_model(test_model_dir("tiny"), model_id="tiny")
    return store
