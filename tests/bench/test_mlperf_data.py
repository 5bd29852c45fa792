"""MLPerf Training results as measured runs (benchmarks/data/mlperf/runs.yaml, mlperf.py).

Oracles: the data file itself (its own settings and measured blocks); hand arithmetic on named
entries (in the comments), from numbers read in the MLPerf result logs and config scripts the
entries cite; Megatron's world size (tp x pp x cp x dp).
"""

from __future__ import annotations

import re
import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import mlperf

ROWS = mlperf.load_rows()
CASES = mlperf.load_mlperf()
BY_ID = {c.id: c for c in CASES}


def test_every_entry_maps_to_a_case_with_its_gpu_count() -> None:
    # oracle: Megatron's world size tp x pp x cp x dp, and the entry's hardware block
    assert len(CASES) == len(ROWS) == len(BY_ID)
    for row, c in zip(ROWS, CASES, strict=True):
        lay, s = c.layout, row["settings"]
        n = row["hardware"]["nodes"] * row["hardware"]["gpus_per_node"]
        assert n == row["hardware"]["num_gpus"] == c.job.cluster.num_gpus, c.id
        assert lay.tp * lay.pp * lay.cp * lay.dp == n, c.id
        # global batch = dp x micro batch x gradient accumulation (the logs' own three numbers)
        gbs = s["dp"] * s["micro_batch_size"] * s["gradient_accumulation_steps"]
        assert gbs == s["global_batch_size"] == c.job.global_batch_size, c.id
        assert c.group == f"mlperf-{row['model']}"


def test_tokens_per_gpu_by_hand_on_named_entries() -> None:
    # oracle: NVIDIA/results/eos_n64_ngc23.09_nemo/gpt3/result_{0,1,2}.txt (training_results_v3.1):
    # global_batch_size 2048, max_sequence_length 2048, per-file median train_step_timing
    # 11.0539 s (the median of the three): 2048 * 2048 / 11.0539 / 512 = 741.1 tokens/s/GPU
    c = BY_ID["v3.1-nvidia-gpt3-h100-512"]
    assert c.raw["measured"]["step_time_s"]["median"] == pytest.approx(11.0539)
    assert c.tokens_per_s_per_gpu == pytest.approx(2048 * 2048 / 11.0539 / 512)
    assert c.tokens_per_s_per_gpu == pytest.approx(741.1, abs=0.05)
    # v5.0 eos-dfw_n64 (Llama 3.1 405B, 64 x 8 H100): 1152 sequences of 8192 in 55.1433 s:
    # 1152 * 8192 / 55.1433 / 512 = 334.3
    c = BY_ID["v5.0-nvidia-405b-h100-512"]
    assert c.tokens_per_s_per_gpu == pytest.approx(1152 * 8192 / 55.1433 / 512)
    assert (c.layout.tp, c.layout.pp, c.layout.cp, c.layout.dp, c.layout.vpp) == (8, 8, 2, 4, 8)
    assert c.job.arch.vocab_size == 32768  # Mixtral 8x22B's tokenizer (implementation README)


def test_stored_rate_matches_the_definition() -> None:
    # oracle: the file's own measured block: tokens_per_s_per_gpu = gbs x seq / step / GPUs
    for row, c in zip(ROWS, CASES, strict=True):
        stored = row["measured"]["tokens_per_s_per_gpu"]
        assert c.tokens_per_s_per_gpu == pytest.approx(stored, abs=0.06), c.id
        st = row["measured"]["step_time_s"]
        assert st["min"] <= st["median"] <= st["max"] and st["n_logs"] >= 3, c.id


def test_each_entry_names_its_sources() -> None:
    # oracle: the MLPerf results repositories' layout (<submitter>/benchmarks/<bench>/...,
    # <submitter>/results/<system>/<bench>/result_*.txt, <submitter>/systems/<system>.json)
    for row in ROWS:
        src = row["source"]
        assert re.fullmatch(
            r"https://github.com/mlcommons/training_results_v\d\.\d", src["repository"]
        )
        assert src["repository"].endswith(row["round"]) and re.fullmatch(
            r"[0-9a-f]{40}", src["commit"]
        )
        assert "/benchmarks/" in src["config"] and src["config"].endswith(".sh")
        assert src["system_json"].endswith(".json")
        prefix = f"{row['submitter']}/results/{row['system']}/{row['benchmark']}/result_"
        assert src["logs"] and all(p.startswith(prefix) for p in src["logs"])
        assert len(src["logs"]) == row["measured"]["step_time_s"]["n_logs"]


def test_breadth() -> None:
    # oracle: the task's coverage goals: 64 .. 11,616 GPUs; H100, H200, B200 and GB200
    sizes = {c.job.cluster.num_gpus for c in CASES}
    assert min(sizes) <= 64 and max(sizes) == 11616
    assert {r["hardware"]["catalog"] for r in ROWS} == {
        "h100-sxm-80gb",
        "h200-sxm-141gb",
        "b200-sxm-180gb",
        "gb200-nvl72",
    }
    groups = {c.group for c in CASES}
    assert groups == {"mlperf-gpt3-175b", "mlperf-llama3.1-405b", "mlperf-llama3.1-8b"}
