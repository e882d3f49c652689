"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def shared_data() -> Path:
    """The read-only reference data folder `<repo>/../shared/data` (skips the test when it is absent)."""
    path = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
    if not path.is_dir():
        pytest.skip(f"reference data not found at {path}")
    return path
