"""Shared fixtures: W&B kept offline and out of the tree, small models and data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / ".wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / ".wandb-cache"))
    yield
