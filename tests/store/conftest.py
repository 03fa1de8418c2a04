"""What the pull tests share: the repository the fake hub serves."""

from __future__ import annotations

import pytest
from fake_hub import repo_from_dir
from support import test_model_dir


@pytest.fixture(scope="module")
def model_repo():
    """The tiny scripted model as a hub repository."""
    return repo_from_dir(test_model_dir("tiny-scripted"))
