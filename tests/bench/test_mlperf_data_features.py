"""MLPerf Training results as measured runs: the features their configs set (TP overlap configs,
the GEMM SM margin, NVFP4, FP8 attention, attention sinks) and the GPUs and ceilings they run on.

Oracles: the data file itself (its own settings and measured blocks); hand arithmetic on named
entries (in the comments), from numbers read in the MLPerf result logs and config scripts the
entries cite.
"""

from __future__ import annotations

import copy
import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from mlperf_rows import BY_ID, CASES, ROWS

from benchmarks import fidelity, mlperf
from planner.inputs import catalog
from planner.search.rules.context import attention_sinks, context_exchange

TP_OVERLAP_SLOTS = {
    f"{gemm}_{kind}"
    for gemm in ("qkv", "proj", "fc1", "fc2")
    for kind in ("fprop", "dgrad", "wgrad")
}
TP_OVERLAP_KEYS = {
    "method",
    "num_sm",
    "cga_size",
    "set_sm_margin",
    "num_splits",
    "atomic_gemm",
    "aggregate",
    "fp8_buf",
}


def test_tp_overlap_cfg_recorded_where_tp_overlap_runs() -> None:
    # oracle: the README's rule: every entry with tp_comm_overlap and tp > 1 names the userbuffers
    # YAML it ran (or null for both file and slots), with only Transformer Engine's slot names and
    # the keys the YAML gives
    n = 0
    for row in ROWS:
        s = row["settings"]
        if not (s["tp_comm_overlap"] and s["tp"] > 1):
            continue
        n += 1
        cfg = s["tp_overlap_cfg"]
        assert set(cfg) == {"file", "slots"}, row["id"]
        if cfg["file"] is None:
            assert cfg["slots"] is None, row["id"]
            continue
        assert cfg["file"].startswith(f"{row['submitter']}/benchmarks/"), row["id"]
        assert cfg["slots"] and set(cfg["slots"]) <= TP_OVERLAP_SLOTS, row["id"]
        for slot in cfg["slots"].values():
            assert set(slot) <= TP_OVERLAP_KEYS and "method" in slot, row["id"]
            assert slot["method"] in ("bulk", "pipeline", "ring_exchange"), row["id"]
            for key in ("set_sm_margin", "atomic_gemm", "aggregate", "fp8_buf"):
                assert isinstance(slot.get(key, False), bool), row["id"]
    assert n == 41


def test_tp_overlap_cfg_by_hand_on_named_entries() -> None:
    # oracle: NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/conf/
    # tp_overlap/h100tp8mbs1.yaml (training_results_v5.0 @ 0fdc28f0), selected by conf/custom.yaml's
    # ${GPU_ARCH,h}100tp${TENSOR_MODEL_PARALLEL}mbs${MICRO_BATCH_SIZE} with tp 8, mbs 1
    cfg = BY_ID["v5.0-nvidia-405b-h100-512"].raw["settings"]["tp_overlap_cfg"]
    assert cfg["file"].endswith("eos-dfw_n64_ngc25.01_nemo/conf/tp_overlap/h100tp8mbs1.yaml")
    bulk = {"method": "bulk", "cga_size": 2, "set_sm_margin": False}
    assert cfg["slots"] == {
        "qkv_dgrad": {**bulk, "num_sm": 4},
        "qkv_wgrad": {**bulk, "num_sm": 8},
        "fc1_dgrad": {**bulk, "num_sm": 2},
        "fc1_wgrad": {**bulk, "num_sm": 4},
        "qkv_fprop": {"method": "ring_exchange", "aggregate": False},
        "proj_dgrad": {"method": "ring_exchange", "aggregate": False},
        "fc1_fprop": {"method": "ring_exchange", "aggregate": False},
        "fc2_dgrad": {"method": "ring_exchange", "aggregate": True},
        "proj_fprop": {"method": "ring_exchange", "aggregate": True},
        "fc2_fprop": {"method": "ring_exchange", "aggregate": True},
    }
    # NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.04_nemo/conf/tp_overlap/
    # h100tp4mbs1.yaml (v5.0, GB200): custom.yaml's ${GPU_ARCH,h100}tp4mbs1, GPU_ARCH unexported;
    # proj_fprop atomic_gemm ${TE_UB_ATOMIC_GEMM_RS_PROJ,1}, fp8_buf ${NVTE_UB_FP8_RS,False};
    # fc2_fprop method ${FC2_FPROP_METHOD,ring_exchange}, num_sm ${FC2_FPROP_SM,1}, atomic_gemm
    # ${TE_UB_ATOMIC_GEMM_RS_FC2,0}: none exported, the defaults
    cfg = BY_ID["v5.0-nvidia-405b-gb200-512"].raw["settings"]["tp_overlap_cfg"]
    assert cfg["file"].endswith("tyche_ngpu512_ngc25.04_nemo/conf/tp_overlap/h100tp4mbs1.yaml")
    bulk4 = {"method": "bulk", "num_sm": 4, "cga_size": 2, "set_sm_margin": False}
    ring = {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": False, "atomic_gemm": False}
    assert cfg["slots"] == {
        "qkv_dgrad": bulk4,
        "qkv_wgrad": bulk4,
        "fc1_dgrad": bulk4,
        "fc1_wgrad": bulk4,
        "qkv_fprop": ring,
        "proj_dgrad": ring,
        "fc1_fprop": ring,
        "fc2_dgrad": ring,
        "proj_fprop": {
            "method": "pipeline",
            "num_sm": 24,
            "cga_size": 2,
            "num_splits": 4,
            "set_sm_margin": True,
            "atomic_gemm": True,
            "fp8_buf": False,
        },
        "fc2_fprop": {**ring, "set_sm_margin": True, "fp8_buf": False},
    }
    # v4.1 Oracle GPT-3: no conf/ in the submission, the file cannot be determined
    assert BY_ID["v4.1-oracle-gpt3-h100-1536"].raw["settings"]["tp_overlap_cfg"] == {
        "file": None,
        "slots": None,
    }


def test_gemm_sm_margin_where_the_config_sets_it() -> None:
    """NVTE_EXT_MARGIN_SM=16 is exported by NVIDIA's four DeepSeek-V3 GB200 configs and two GB300
    ones, Google's GB200 one and CoreWeave's three GB300 ones (config_GB{2,3}00_*_mxfp8_full_cg.sh,
    training_results_v6.0 @eabf23a0): the case's job carries it; no other entry sets it."""
    by_id = {c.id: c for c in mlperf.load_mlperf()}
    margins = {r["id"]: r["settings"].get("gemm_sm_margin", 0) for r in ROWS}
    dsv3 = {i for i in margins if "-dsv3-" in i}
    assert len(dsv3) == 10
    assert all(margins[i] == 16 and by_id[i].job.gemm_sm_margin == 16 for i in dsv3)
    assert all(m == 0 for i, m in margins.items() if i not in dsv3)


FP4_ROWS = [r for r in ROWS if r["settings"]["precision"] == "fp4"]


def test_nvfp4_entries_map_to_fp4_jobs() -> None:
    # oracle: the README's NVFP4 rule: every entry with precision fp4 ran FP4=True, FP8=False
    # (config_common_fp4.sh) on a GPU with FP4 tensor cores, and its job carries exactly the
    # FP4 settings the entry records (FP8_PARAM_GATHER -> fp4_param_gather; the bf16 first / last
    # layers), never FP8 parameters; fidelity never fits them (their FP4 GEMM ceiling is a kernel
    # measurement, planner.model.gemm.fp4_ceiling)
    fp4_gpus = {"b200-sxm-180gb", "b300-sxm-270gb", "gb200-nvl72", "gb300-nvl72"}
    assert len(FP4_ROWS) >= 12
    for row in FP4_ROWS:
        s, c = row["settings"], BY_ID[row["id"]]
        assert row["hardware"]["catalog"] in fp4_gpus, c.id
        assert (s["fp4_format"], s["fp4_recipe"]) == ("e2m1", "nvfp4"), c.id
        assert c.job.precision == "fp4" and c.job.quant_recipe == "nvfp4", c.id
        assert c.job.fp4_param_gather == s["fp4_param_gather"] and not c.job.fp8_param_gather
        assert c.job.bf16_layers_at_start == s["bf16_layers_at_start"], c.id
        assert c.job.bf16_layers_at_end == s["bf16_layers_at_end"], c.id
        assert c.job.fp8_attention == s["fp8_attention"], c.id  # FP8_DPA, as recorded
        assert not c.layout.tp_comm_overlap, c.id  # config_common_fp4.sh: TP_COMM_OVERLAP=False
        assert not fidelity.is_fit(c), c.id
    # the FP8 / bf16 entries are untouched: no FP4 job among them
    assert all(c.job.precision != "fp4" for c in CASES if c.raw["settings"]["precision"] != "fp4")


def test_nvfp4_entries_by_hand() -> None:
    # oracle: NVIDIA/benchmarks/llama31_405b/implementations/tyche_ngpu512_ngc25.09_nemo/
    # config_GB200_128x4x144xtp4pp8cp2_cg_fp4.sh (training_results_v5.1 @441d65f4): MINIBS 144,
    # TP 4, PP 8, VPP 8, CP 2, 128 x 4 GPUs: global batch 144 x 512 / 64 = 1,152;
    # config_common_fp4.sh: FP8_PARAM_GATHER=False, NVTE_NVFP4_DISABLE_{RHT,STOCHASTIC_ROUNDING,
    # 2D_QUANTIZATION}=1; FP8_DPA unset; per-file medians 17.2374 / 17.3725 / 17.2608 s:
    # 1152 * 8192 / 17.2608 / 512 = 1067.9
    c = BY_ID["v5.1-nvidia-405b-gb200-512-fp4"]
    lay, s = c.layout, c.raw["settings"]
    assert (lay.tp, lay.pp, lay.vpp, lay.cp, lay.dp) == (4, 8, 8, 2, 8)
    assert c.job.global_batch_size == 144 * 512 // (4 * 8 * 2) == 1152
    assert not c.job.fp4_param_gather and (s["nvfp4_rht"], s["nvfp4_stochastic_rounding"]) == (
        False,
        False,
    )
    assert not s["fp8_attention"] and c.job.cuda_graphs
    assert c.tokens_per_s_per_gpu == pytest.approx(1152 * 8192 / 17.2608 / 512)
    assert c.tokens_per_s_per_gpu == pytest.approx(1067.9, abs=0.05)
    # NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_GB200_2x4x2xtp1pp1cp1_8b_fp4.sh:
    # config_common_8b.sh (sourced after config_common_fp4.sh) sets
    # NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=0 and _2D_QUANTIZATION=0; config_common_fp8attn.sh
    # FP8_DPA=True with NVTE_DPA_FP8_RECIPE=Float8CurrentScaling (config_common_fp4.sh)
    s = BY_ID["v5.1-nvidia-8b-gb200-8-fp4"].raw["settings"]
    assert (s["nvfp4_stochastic_rounding"], s["nvfp4_2d_quantization"], s["nvfp4_rht"]) == (
        True,
        True,
        False,
    )
    assert s["fp8_attention"] and s["fp8_attention_recipe"] == "Float8CurrentScaling"
    assert BY_ID["v5.1-nvidia-8b-gb200-8-fp4"].job.fp8_attention


def test_fp8_attention_only_where_a_config_set_fp8_dpa() -> None:
    # oracle: the recorded FP8_DPA of each entry (config_common_fp8attn.sh sourced, or the
    # DeepSeek-V3 configs' FP8_DPA=True); entries that record none ran bf16 attention
    for c in CASES:
        recorded = bool(c.raw["settings"].get("fp8_attention"))
        assert c.job.fp8_attention == (recorded and c.job.quantised), c.id
    assert sum(c.job.fp8_attention for c in CASES) >= 14  # 8 NVFP4 Llama 8B + 6 DeepSeek-V3


def test_fp4_mapping_carries_param_gather_and_bf16_layers() -> None:
    # oracle: the mapping's rule (mlperf.py docstring): fp4_param_gather and the bf16 first /
    # last layers go to the job as the entry records them; absent, they are off (Job's own
    # fp4_param_gather default, True, must not leak into an entry that records none)
    row = copy.deepcopy(BY_ID["v5.1-nvidia-405b-gb300-512-fp4"].raw)
    row["settings"].update(fp4_param_gather=True, bf16_layers_at_start=1, bf16_layers_at_end=2)
    job = mlperf.case_from_row(row).job
    assert (job.fp4_param_gather, job.bf16_layers_at_start, job.bf16_layers_at_end) == (True, 1, 2)
    for key in ("fp4_param_gather", "bf16_layers_at_start", "bf16_layers_at_end"):
        del row["settings"][key]
    job = mlperf.case_from_row(row).job
    assert (job.fp4_param_gather, job.bf16_layers_at_start, job.bf16_layers_at_end) == (False, 0, 0)


def test_gb300_over_gb200_on_the_same_gpt_oss_layout() -> None:
    # oracle: NVIDIA's v6.0 gpt-oss-20b logs on 72 GPUs, GB300 theia_ngpu72 and GB200
    # tyche-hsg_ngpu72, the same layout and precision (config_GB300_ / config_GB200_18x4x1xtp1pp1
    # cp2ep4_mxfp8.sh): train_step_time medians 0.1595 s and 0.1652 s after the first evaluation
    # (benchmarks/data/mlperf/README.md), GB300 1.036x faster; the GB200 row itself is not an
    # entry (its config is not stored), so this is a ratio check, within 3%
    row = next(r for r in ROWS if r["id"] == "v6.0-nvidia-gptoss20b-gb300-72")
    on_gb200 = copy.deepcopy(row)
    on_gb200["hardware"]["catalog"] = "gb200-nvl72"
    gb300 = mlperf.case_from_row(row).estimate().tokens_per_s_per_gpu
    gb200 = mlperf.case_from_row(on_gb200).estimate().tokens_per_s_per_gpu
    assert gb300 / gb200 == pytest.approx(0.1652 / 0.1595, rel=0.03)


def test_rows_on_a_derived_matmul_ceiling_are_never_fitted() -> None:
    # oracle: the catalog's GB300 entry, whose MAMF figures are B300's measured fractions at
    # GB300's peaks (1965.6 / 2500 = 1769.0 / 2250, 3725.9 / 5000 = 3353.3 / 4500); NVIDIA's and
    # Lambda's v5.1 FP8 8B runs on 72 GB300 are dense MLPerf rows that the hash fold alone would fit
    gb300 = catalog.get_gpu("gb300-nvl72")
    assert gb300.mamf_derived_from == "b300-sxm-270gb"
    b300 = catalog.get_gpu(gb300.mamf_derived_from)
    for p in ("bf16", "fp8"):
        assert gb300.matmul_ceiling(p) == pytest.approx(b300.matmul_ceiling(p), rel=1e-4)
    rows = [c for c in CASES if c.job.cluster.gpu.name == gb300.name]
    assert {"v5.1-nvidia-8b-gb300-72", "v5.1-lambda-8b-gb300-72"} <= {c.id for c in rows}
    assert not any(fidelity.is_fit(c) for c in rows)
    # every GPU of the fitted rows has a measured ceiling of its own in the catalog
    fitted = [catalog.get_gpu(c.job.cluster.gpu.name) for c in CASES if fidelity.is_fit(c)]
    assert fitted and all(g.matmul_ceiling("bf16") is not None for g in fitted)
    assert all(g.mamf_derived_from is None for g in fitted)


def test_the_runs_with_attention_sinks_take_an_attention_backend_te_has() -> None:
    # oracle: these runs ran, so Transformer Engine had a backend for each: every gpt-oss entry
    # (sinks: MLPerf's pretrain.py sets softmax_type "learnable") records bf16 attention and, at
    # cp > 1, the a2a exchange, and none breaks the sinks' or the exchange's rule
    oss = [c for c in CASES if c.job.arch.softmax_type != "vanilla"]
    assert len(oss) >= 19 and all(c.job.arch.name == "gpt-oss-20b" for c in oss)
    for c in oss:
        assert attention_sinks(c.job, c.layout) is None, c.id
        assert context_exchange(c.job, c.layout) is None, c.id
    assert sum(c.layout.cp > 1 for c in oss) >= 5
