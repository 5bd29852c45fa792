"""`explain` with an operations option but no --tokens: its help says the option shows cost and
energy, and without a token budget there is no total, so the table gives the rates the options set
(the JSON has them already: `usd_per_million_tokens`, `facility_power_mw`)."""

from __future__ import annotations

import json

import pytest
from cli_run import run
from paths import REPO

PLAN = str(REPO / "examples" / "llama3.1-8b-h100.toml")


def _operations_rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│") if c.strip()]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_price_alone_shows_the_cost_per_million_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["explain", PLAN, "--price", "2"], capsys)
    assert code == 0
    rows = _operations_rows(out)
    code, js, _ = run(["explain", PLAN, "--price", "2", "--json"], capsys)
    per_m = json.loads(js)["operations"]["usd_per_million_tokens"]
    # 8 GPUs x $2/GPU-hour = $16/hour; at tokens/s effective E that is 16 / 3600 / E x 1e6
    tokens_s = json.loads(js)["operations"]["effective_tokens_per_s"]
    assert per_m == pytest.approx(16 / 3600 / tokens_s * 1e6, rel=1e-5)  # 6 digits in JSON
    assert rows["cost"].startswith(f"${per_m:.3g} per million tokens (--price)")


def test_power_options_show_the_facility_power(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["explain", PLAN, "--pue", "1.5", "--gpu-power-w", "500"], capsys)
    assert code == 0
    rows = _operations_rows(out)
    # one node of 8 GPUs: (8 x 500 W + 4,600 W node overhead) x PUE 1.5 = 12,900 W = 0.0129 MW
    assert rows["power"].startswith("0.013 MW (500 W/GPU + 4600 W/node x 1 node, PUE 1.5)")
