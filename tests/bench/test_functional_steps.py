"""Megatron-LM functional-test step times as measured runs (benchmarks/functional_steps.py).

Oracles: benchmarks/data/megatron_functional_tests/golden_values.json and command_lines.json
themselves (counts, one row's values read by hand, arithmetic in the comments); the digest rule of
that folder's README (SHA-256 of "<family>/<case>" starting 5-9 or a-f).
"""

from __future__ import annotations

import hashlib
import json
import sys

import pytest
from paths import BENCHMARKS, REPO

sys.path.insert(0, str(REPO))

from benchmarks import functional_steps as fs

DATA = BENCHMARKS / "data" / "megatron_functional_tests"
CASES, SKIPPED = fs.load_with_skips()
BY_ID = {c.id: c for c in CASES}


def test_every_first_run_golden_file_is_a_row_or_skipped_with_a_reason() -> None:
    # oracle: golden_values.json's first-run records, counted directly
    files = json.loads((DATA / "golden_values.json").read_text())["files"]
    first = [f for f in files if f["run"] == "first run"]
    assert len(CASES) + len(SKIPPED) == len(first)
    assert all(reason for _, reason in SKIPPED)
    assert len(BY_ID) == len(CASES)  # ids are unique
    assert len(CASES) > 200  # most files are read (318 at the time of writing)


def test_only_calibration_cases_are_used() -> None:
    # oracle: the digest rule (megatron_functional_tests/README.md)
    for c in CASES:
        name = c.raw["case"]
        assert hashlib.sha256(name.encode()).hexdigest()[0] in "56789abcdef", name


def test_one_row_by_hand() -> None:
    # oracle: golden_values_dev_dgx_a100.json of bert/bert_mcore_tp2_pp2, values at steps 1, 5,
    # 10, ..., 50; after step 10: 1.63494 1.8032 1.83901 1.67596 1.66247 1.67062 1.66391 1.67494,
    # median (1.67062 + 1.67494) / 2 = 1.67278 s; command line: --global-batch-size 128
    # --seq-length 512, 8 A100 (the h100 recipe's 1 node x 8; lts platform dgx_a100):
    # 128 * 512 / 1.67278 / 8 = 4897.24 tokens/s/GPU
    c = BY_ID["bert/bert_mcore_tp2_pp2@dev_dgx_a100"]
    assert c.raw["step_time_s"] == pytest.approx(1.67278)
    assert c.raw["intervals"] == 8
    assert c.job.cluster.num_gpus == 8 and c.raw["gpu"] == "a100-sxm-80gb"
    assert c.tokens_per_s_per_gpu == pytest.approx(4897.24, abs=0.01)
    assert c.group == "functional-dense"
    assert (c.layout.tp, c.layout.pp, c.layout.dp) == (2, 2, 2)


def test_rows_are_consistent() -> None:
    # oracle: tokens = global batch x sequence / step time / GPUs (the module's definition), and
    # GPUs = tp x pp x cp x dp (Megatron's world size)
    for c in CASES:
        lay, job = c.layout, c.job
        assert lay.tp * lay.pp * lay.cp * lay.dp == job.cluster.num_gpus, c.id
        want = job.global_batch_size * job.seq_length / c.raw["step_time_s"] / job.cluster.num_gpus
        assert c.tokens_per_s_per_gpu == pytest.approx(want)
        source = "release" if c.raw["gpus_from_memory"] else "functional"
        assert c.group == f"{source}-{'moe' if (job.arch.num_moe_experts or 0) > 1 else 'dense'}"


def test_deterministic_flag_follows_the_command_line() -> None:
    # oracle: command_lines.json's model_args (--deterministic-mode) and env_vars (NCCL_ALGO)
    lines = {c["name"]: c for c in json.loads((DATA / "command_lines.json").read_text())["cases"]}
    for c in CASES:
        line = lines[c.raw["case"]]
        assert c.raw["deterministic"] == ("--deterministic-mode" in line["model_args"])
        assert c.raw["nccl_algo"] == (line.get("env_vars") or {}).get("NCCL_ALGO", "Ring")
    assert sum(c.raw["deterministic"] for c in CASES) > len(CASES) / 2


def test_steps_of_each_rule() -> None:
    # oracle: golden_values.json's source block (step_rule)
    m = {
        "start_step": 1,
        "step_interval": 5,
        "step_rule": "start_then_multiples",
        "values": [0] * 4,
    }
    assert fs.steps_of(m) == [1, 5, 10, 15]
    m = {"start_step": 2, "step_interval": 1, "step_rule": "range", "values": [0] * 3}
    assert fs.steps_of(m) == [2, 3, 4]
    # warm-up: steps <= 10 dropped; steps 11-13 hold 1, 2, 30 -> median 2
    m = {"start_step": 9, "step_interval": 1, "step_rule": "range", "values": [9, 9, 1, 2, 30]}
    assert fs.step_time(m) == (2.0, 3)
    m = {"start_step": 9, "step_interval": 1, "step_rule": "range", "values": [9, 9, 1, None, 3]}
    assert fs.step_time(m) is None  # two timed intervals only
