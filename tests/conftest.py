"""Shared by every test: this folder on sys.path, so that the helpers beside this file (paths,
cli_run, plan_text, shell_check) import from the test folders below it; and no test reads the
developer's calibration profile."""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_user_calibration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """An empty config directory and no PLANNER_CALIBRATION (tests that want a profile set
    their own)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("PLANNER_CALIBRATION", raising=False)
    yield
