"""Fixtures shared by the tests of this folder: the bundled GPU catalog, loaded once a module."""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.hardware import GpuSpec


@pytest.fixture(scope="module")
def gpus() -> dict[str, GpuSpec]:
    return catalog.load_gpus()
