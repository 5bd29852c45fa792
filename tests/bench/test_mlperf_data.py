"""MLPerf Training results as measured runs (benchmarks/data/mlperf/runs.yaml, mlperf.py): every
entry maps to a case, tokens and rates by hand, sources, breadth and the MoE entries.

Oracles: the data file itself (its own settings and measured blocks); hand arithmetic on named
entries (in the comments), from numbers read in the MLPerf result logs and config scripts the
entries cite; Megatron's world size (tp x pp x cp x dp).
"""

from __future__ import annotations

import re

import pytest
from mlperf_rows import BY_ID, CASES, ROWS


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
        # v6.0 is read from a fork of mlcommons/training_results_v6.0 (README: the official
        # repository could not be fetched); the entry names the upstream too
        repo_re = r"https://github.com/(mlcommons|Richardyu114)/training_results_v\d\.\d"
        assert re.fullmatch(repo_re, src["repository"])
        if "Richardyu114" in src["repository"]:
            assert row["round"] == "v6.0"
            assert src["upstream"] == "https://github.com/mlcommons/training_results_v6.0"
        assert src["repository"].endswith(row["round"]) and re.fullmatch(
            r"[0-9a-f]{40}", src["commit"]
        )
        if "/results/" in src["config"]:
            # the config file is not stored and the log prints the run's resolved configuration
            # (HPE's GB200 8-GPU and XD685 runs, Cisco's C880A runs): the log is the config, and
            # the notes say so
            assert src["config"] in src["logs"] and "configuration" in row["notes"], row["id"]
        else:
            assert "/benchmarks/" in src["config"] and src["config"].endswith(".sh")
        # a system whose JSON the fork does not store (Lambda gb300_n18) names none, and says so
        if src["system_json"] is None:
            assert "system JSON" in row["notes"], row["id"]
        else:
            assert src["system_json"].endswith(".json")
        prefix = f"{row['submitter']}/results/{row['system']}/{row['benchmark']}/result_"
        assert src["logs"] and all(p.startswith(prefix) for p in src["logs"])
        assert len(src["logs"]) == row["measured"]["step_time_s"]["n_logs"]


def test_breadth() -> None:
    # oracle: the task's coverage goals: 64 .. 11,616 GPUs; H100, H200, B200 and GB200 (and
    # GB300, whose DeepSeek-V3 rows came with its catalog entry; B300 with the NVFP4 rows; AMD's
    # MI355X and MI350X with their own)
    sizes = {c.job.cluster.num_gpus for c in CASES}
    assert min(sizes) <= 64 and max(sizes) == 11616
    assert {r["hardware"]["catalog"] for r in ROWS} == {
        "h100-sxm-80gb",
        "h200-sxm-141gb",
        "b200-sxm-180gb",
        "b300-sxm-270gb",
        "gb200-nvl72",
        "gb300-nvl72",
        "mi355x-288gb",
        "mi350x-288gb",
    }
    groups = {c.group for c in CASES}
    assert groups == {
        "mlperf-gpt3-175b",
        "mlperf-llama3.1-405b",
        "mlperf-llama3.1-8b",
        "mlperf-deepseek-v3",
        "mlperf-gpt-oss-20b",
    }
    # the MoE rows: every one maps to a mixture-of-experts model, with the expert parallelism its
    # config sets (the 1-4 node GB300 gpt-oss configs run every expert on every GPU: ep 1)
    moe = [c for c in CASES if c.group in ("mlperf-deepseek-v3", "mlperf-gpt-oss-20b")]
    assert len(moe) >= 6 and all(c.job.arch.is_moe for c in moe)
    assert all(c.layout.ep == int(c.raw["settings"]["ep"]) for c in moe)
    assert sum(c.layout.ep > 1 for c in moe) >= 8


def test_moe_entries_by_hand() -> None:
    # oracle: NVIDIA/benchmarks/deepseekv3_671b/implementations/tyche-hsg_ngpu512_ngc26.04_nemo/
    # config_GB200_128x4x240xtp2pp4ep32cp1_mxfp8_full_cg.sh (training_results_v6.0 fork):
    # MINIBS 240, TP 2, PP 4, VPP 4, EP 32, PIPELINE_LAYOUT "Et*4|(t*4|)*14tmL", 128 x 4 GPUs;
    # 671b.yaml: global batch = MINIBS x 512 / (2 x 4 x 1) = 15,360, sequence 4096, ETP 1;
    # per-file medians 30.7277 / 32.7597 / 32.9460 s: 15360 * 4096 / 32.7597 / 512 = 3751.0
    c = BY_ID["v6.0-nvidia-dsv3-gb200-512"]
    lay = c.layout
    assert (lay.tp, lay.pp, lay.vpp, lay.cp, lay.dp, lay.ep, lay.expert_tp) == (
        2,
        4,
        4,
        1,
        64,
        32,
        1,
    )
    assert c.job.global_batch_size == 240 * 512 // (2 * 4 * 1) == 15360
    assert lay.pipeline_layout is not None and len(lay.pipeline_layout) == 4 * 4
    assert lay.pipeline_layout[0] == "Etttt" and lay.pipeline_layout[-1] == "tmL"
    assert "".join(lay.pipeline_layout).count("t") == 61 == c.job.arch.num_layers
    assert (lay.moe_token_dispatcher_type, lay.moe_flex_dispatcher_backend) == ("flex", "hybridep")
    assert lay.recompute == "selective" and lay.recompute_modules == ("mlp",)
    assert c.job.fp8_recipe == "mxfp8" and c.job.cuda_graphs and lay.ep_comm_overlap
    assert c.tokens_per_s_per_gpu == pytest.approx(15360 * 4096 / 32.7597 / 512)
    assert c.tokens_per_s_per_gpu == pytest.approx(3751.0, abs=0.05)
    # Cisco/benchmarks/gpt_oss_20b/nemo/config_DGXH100_8x8x1xtp2pp1cp1ep4.sh (sources the 16-node
    # one): MINIBS 1, TP 2, EP 4, ETP 1, 8 x 8 H100: global batch 1 x 64 / 2 = 32, sequence 8192;
    # MOE_EXPERT_CAPACITY_FACTOR 1.25, flex dispatcher with DeepEP, FP8 delayed;
    # per-file medians 0.4255 / 0.4269 / 0.4257 s: 32 * 8192 / 0.4257 / 64 = 9621.8
    c = BY_ID["v6.0-cisco-gptoss20b-h100-64"]
    lay = c.layout
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.expert_tp) == (2, 1, 32, 4, 1)
    assert c.job.global_batch_size == 32 and c.job.seq_length == 8192
    assert c.job.moe_expert_capacity_factor == 1.25 and c.job.fp8_recipe == "delayed"
    assert (lay.moe_token_dispatcher_type, lay.moe_flex_dispatcher_backend) == ("flex", "deepep")
    assert c.tokens_per_s_per_gpu == pytest.approx(32 * 8192 / 0.4257 / 64)
    # NVIDIA theia_ngpu72 (GB300) gpt-oss-20b: config_GB300_18x4x1xtp1pp1cp2ep4_mxfp8.sh, MINIBS 1,
    # TP 1, CP 2, EP 4, 18 x 4 GPUs: global batch 1 x 72 / 2 = 36 (the log's samples_count
    # advances 1,152 per 32 steps); result_0's last train_step_time values 0.1618, 0.1608, 0.1614,
    # ... (per-file medians 0.1613 / ...): 36 * 8192 / 0.1613 / 72 = 25,393.7
    c = BY_ID["v6.0-nvidia-gptoss20b-gb300-72"]
    lay = c.layout
    assert (lay.tp, lay.cp, lay.dp, lay.ep) == (1, 2, 36, 4)
    assert c.job.global_batch_size == 36 and c.job.fp8_recipe == "mxfp8"
    assert c.job.moe_expert_capacity_factor is None  # NVIDIA's pretrain.py: dropless
    assert c.tokens_per_s_per_gpu == pytest.approx(36 * 8192 / 0.1613 / 72, rel=1e-4)
