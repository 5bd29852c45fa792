"""MLPerf Training results as measured runs (planner Cases): predicted vs measured step time.

    python benchmarks/mlperf.py

Data: benchmarks/data/mlperf/runs.yaml (one entry per round, submitter and system of
mlcommons/training_results_v3.0 ... v5.1: GPT-3 175B, Llama 3.1 405B and 8B pre-training, in
bf16 / FP8 and, from v5.1, NVFP4; v6.0, read from the fork Richardyu114/training_results_v6.0:
DeepSeek-V3 671B and gpt-oss-20b MoE pre-training (gpt-oss on H100, B200, B300, GB300), Llama 3.1 in
NVFP4; the settings read from each system's config scripts, the step time from its result
logs; sources, method and every ambiguity in benchmarks/data/mlperf/README.md and the entries'
`notes`).
MLPerf results are public and may be used for calibration.

Mapping (one place, used by the fidelity and fitting benchmarks through load_mlperf):
  model      the zoo model the benchmark names (gpt3-175b, llama3.1-405b, llama3.1-8b, deepseek-v3,
             gpt-oss-20b), with the entry's vocab_size where the benchmark's tokenizer differs from
             the model's (the 405B benchmark uses Mixtral 8x22B's 32,768-token tokenizer) and its
             mtp_layers where they differ from the zoo's
  gpu        hardware.catalog (h100-sxm-80gb, h200-sxm-141gb, b200-sxm-180gb, b300-sxm-270gb,
             gb200-nvl72, gb300-nvl72; mi355x-288gb and mi350x-288gb for AMD's two FP8
             entries), with hardware.num_gpus of them
  job        seq_length, global_batch_size as logged; precision fp8 with the entry's fp8_recipe
             (delayed, tensorwise, mxfp8); fp8_param_gather = fp8_params; precision fp4 for the
             NVFP4 entries (FP4=True, FP4_RECIPE=nvfp4) with fp4_param_gather (FP8_PARAM_GATHER, the
             one parameter-gather switch NeMo 2's pretrain.py passes) and bf16_layers_at_start /
             bf16_layers_at_end (FIRST_LAST_LAYERS_BF16 with NUM_LAYERS_AT_START_IN_BF16 /
             NUM_LAYERS_AT_END_IN_BF16), each as the entry records it; main_grad_dtype bf16
             (NeMo's distributed Adam grad_sync_dtype bf16 for GPT-3, grad_reduce_in_fp32=False for
             Llama, DeepSeek-V3 and gpt-oss); optimizer_state_dtype where recorded (DeepSeek-V3:
             the Megatron-Bridge recipe's bf16 moments under the precision-aware optimizer),
             else fp32; MoE routing: moe_router_num_groups / group_topk,
             moe_expert_capacity_factor / moe_pad_expert_input_to_capacity where the entry sets
             them; HybridEP's per-rank budget moe_expert_rank_capacity_factor
             (MOE_EXPERT_RANK_CAPACITY_FACTOR: the config's, else config_common_cg.sh's 2 where
             it is sourced), moe_paged_stash (MOE_PAGED_STASH, the DeepSeek-V3 rows) with
             its device buffer's factor moe_paged_stash_buffer_size_factor_cuda
             (MOE_PAGED_STASH_BUFFER_SIZE_FACTOR_CUDA; Megatron's 1.10 where unset);
             expandable_segments where the config's PYTORCH_CUDA_ALLOC_CONF sets it;
             fp8_attention where the entry records FP8_DPA (an FP8 or NVFP4 run's FP8
             dot-product attention: planner.model.attention_time); fp8_output_proj where it
             records FP8_OUTPUT_PROJ (DeepSeek-V3 on GB300: an MXFP8 LM head);
             moe_fused_grouped_mlp where it records USE_TE_OPS with
             NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (DeepSeek-V3, gpt-oss on GB300); hidden and
             attention dropout 0 (no masks) for the benchmarks in NO_DROPOUT (all but GPT-3)
  layout     tp, pp, dp, cp, vpp, micro batch as read; the distributed optimizer (zero_stage 1);
             ep, etp (EXPERT_PARALLEL, EXPERT_TENSOR_PARALLEL), moe_token_dispatcher_type and
             moe_flex_dispatcher_backend (flex with deepep / hybridep) and its SM count
             moe_flex_dispatcher_num_sms where recorded (the DeepSeek-V3 rows: 671b.yaml's
             MOE_HYBRIDEP_NUM_SMS default 32, which no config overrides), cp_comm_type (a2a where
             recorded, the gpt-oss CP runs; else Megatron's p2p), pipeline_layout (Megatron's
             --pipeline-model-parallel-layout string, expanded by planner.inputs.pipeline_layout)
             or pipeline_layers, ep_comm_overlap (OVERLAP_MOE_EXPERT_PARALLEL_COMM with
             DELAY_WGRAD_COMPUTE); recompute "selective" with the entry's recompute_modules
             (RECOMPUTE_MODULES), otherwise none; no offloading (none of the configs sets any);
             tp_comm_overlap where the config sets TP_COMM_OVERLAP and sequence parallelism is on
             with tp > 1;
             asym_pp_embed_loss -> the embedding and the loss each count as a layer in the
             pipeline split (NeMo ASYM_PP_EMBED / ASYM_PP_LOSS)
             cuda_graphs where settings.cuda_graphs records per-layer, partial per-layer or
             full-iteration graphs (LAYER_CUDA_GRAPH, MCORE_CUDA_GRAPH, FULL_CUDA_GRAPH,
             CUDA_GRAPH_SCOPE): the host's issue floor then does not apply (planner.model.host),
             but to the regions outside a partial scope (cuda_graph_modules)
  not modelled  the TP_PP_DP_MAPPING rank order, FP8 scaling format (hybrid / e4m3), FP8
             attention's own recipe and format (fp8_attention_recipe / _format: NVTE_DPA_FP8_*), the
             NVFP4 recipe's options (nvfp4_rht, nvfp4_stochastic_rounding, nvfp4_2d_quantization:
             NVTE_NVFP4_DISABLE_*), the paged stash's host buffer
             (MOE_PAGED_STASH_BUFFER_SIZE_FACTOR_CPU): kept in `raw` for the reader
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.runs import Case, cluster
from planner.cli import switch_notes
from planner.inputs import catalog, pipeline_layout, userbuffers
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_types import CUDA_GRAPH_MODULES

RUNS = Path(__file__).resolve().parent / "data" / "mlperf" / "runs.yaml"


def load_rows(path: Path = RUNS) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load(path.read_text())
    return rows


def step_time_s(row: dict[str, Any]) -> float:
    """The measured seconds per optimizer step (median over the system's result logs)."""
    return float(row["measured"]["step_time_s"]["median"])


def tokens_per_s_per_gpu(row: dict[str, Any]) -> float:
    """global batch x sequence / step time / GPUs."""
    s = row["settings"]
    return s["global_batch_size"] * s["seq_length"] / step_time_s(row) / row["hardware"]["num_gpus"]


def graphed(settings: dict[str, Any]) -> bool:
    """Whether the config captures the layers in CUDA graphs: `cuda_graphs` records the
    config's variable, "none ..." when unset or off (LAYER_CUDA_GRAPH=1, MCORE_CUDA_GRAPH=1:
    per-layer graphs, some with a partial CUDA_GRAPH_SCOPE; FULL_CUDA_GRAPH=True or
    CUDA_GRAPH_SCOPE=full_iteration: the whole iteration)."""
    return not str(settings.get("cuda_graphs") or "none").startswith("none")


def graph_modules(settings: dict[str, Any]) -> tuple[str, ...]:
    """The regions a partial per-layer capture names ("per-layer partial (..., scope attn
    moe_router moe_preprocess)"); () for the whole layer or iteration."""
    text = str(settings.get("cuda_graphs") or "")
    _, found, scope = text.partition("scope ")
    words = scope.rstrip(")").split() if found else []
    return tuple(w for w in words if w in CUDA_GRAPH_MODULES)


def none_or_float(value: Any) -> float | None:
    return None if value is None else float(value)


def none_or_int(value: Any) -> int | None:
    return None if value is None else int(value)


NO_DROPOUT = frozenset({"gpt_oss_20b", "llama31_8b", "llama31_405b", "deepseekv3_671b"})
"""Benchmarks whose model config sets hidden_dropout and attention_dropout to 0.0, so their runs
keep no dropout masks: gpt-oss-20b (NVIDIA/benchmarks/gpt_oss_20b/implementations/nemo/pretrain.py
`GPTModelProvider(..., hidden_dropout=0.0, attention_dropout=0.0)`, which every gpt-oss entry's
config_also names); Llama 3.1 8B and 405B (v6.0: NVIDIA's llama31_8b pretrain.py, whose
`Llama31ModelProvider` sets both to 0.0; v5.x: NeMo 2's `LlamaConfig`,
nemo/collections/llm/gpt/model/llama.py, likewise); DeepSeek-V3 (Megatron-Bridge's
`deepseek_v3_pretrain_config`: its DeepSeek provider has set hidden_dropout 0.0 since August 2025
and its bridge since February 2026, the HF config's attention_dropout 0.0). GPT-3's NeMo 1
configs were not read for it: Megatron's default 0.1, masks counted (the larger side)."""


def case_from_row(row: dict[str, Any]) -> Case:
    s, hw = row["settings"], row["hardware"]
    arch = catalog.get_model(row["model"])
    if s.get("vocab_size") and s["vocab_size"] != arch.vocab_size:
        arch = arch.model_copy(update={"vocab_size": int(s["vocab_size"])})
    if "mtp_layers" in s and int(s["mtp_layers"]) != arch.mtp_num_layers:
        arch = arch.model_copy(update={"mtp_num_layers": int(s["mtp_layers"])})
    fp8, fp4 = s["precision"] == "fp8", s["precision"] == "fp4"
    capacity = s.get("moe_expert_capacity_factor")
    job = Job(
        arch=arch,
        cluster=cluster(hw["catalog"], int(hw["num_gpus"])),
        seq_length=int(s["seq_length"]),
        global_batch_size=int(s["global_batch_size"]),
        precision="fp8" if fp8 else "fp4" if fp4 else "bf16",
        main_grad_dtype=s.get("main_grad_dtype", "bf16"),
        optimizer_state_dtype=s.get("optimizer_state_dtype", "fp32"),
        fp8_param_gather=bool(s.get("fp8_params")) and fp8,
        fp4_param_gather=bool(s.get("fp4_param_gather")) and fp4,
        fp8_recipe=s.get("fp8_recipe") or "delayed",
        bf16_layers_at_start=int(s.get("bf16_layers_at_start", 0)),
        bf16_layers_at_end=int(s.get("bf16_layers_at_end", 0)),
        fp8_attention=bool(s.get("fp8_attention")) and (fp8 or fp4),
        fp8_output_proj=bool(s.get("fp8_output_proj")) and fp8,
        moe_fused_grouped_mlp=bool(s.get("moe_fused_grouped_mlp")),
        cuda_graphs=graphed(s),
        cuda_graph_modules=graph_modules(s),
        expandable_segments=bool(s.get("expandable_segments", False)),
        moe_router_num_groups=s.get("moe_router_num_groups"),
        moe_router_group_topk=s.get("moe_router_group_topk"),
        moe_expert_capacity_factor=none_or_float(capacity),
        moe_pad_expert_input_to_capacity=bool(s.get("moe_pad_expert_input_to_capacity", False)),
        moe_expert_rank_capacity_factor=none_or_float(s.get("moe_expert_rank_capacity_factor")),
        moe_paged_stash=bool(s.get("moe_paged_stash", False)),
        moe_paged_stash_buffer_size_factor=float(
            s.get("moe_paged_stash_buffer_size_factor_cuda", 1.10)
        ),
        tp_overlap_cfg=userbuffers.resolve((s.get("tp_overlap_cfg") or {}).get("slots")),
        gemm_sm_margin=int(s.get("gemm_sm_margin", 0)),
        attention_dropout=row["benchmark"] not in NO_DROPOUT,
        hidden_dropout=row["benchmark"] not in NO_DROPOUT,
    )
    tp = int(s["tp"])
    sp = bool(s["sequence_parallel"]) and tp > 1
    asym = bool(s.get("asym_pp_embed_loss"))
    text = s.get("pipeline_layout")
    stages = pipeline_layout.parse(text) if text else None
    if text and stages is None:
        raise ValueError(f"{row['id']}: pipeline_layout {text!r} does not parse")
    layers = s.get("pipeline_layers")
    selective = s.get("recompute", "none") == "selective"
    layout = Layout(
        tp=tp,
        pp=int(s["pp"]),
        dp=int(s["dp"]),
        cp=int(s.get("cp", 1)),
        ep=int(s.get("ep", 1)),
        etp=int(s["etp"]) if s.get("etp") is not None else None,
        vpp=int(s.get("vpp", 1)),
        sequence_parallel=sp,
        micro_batch_size=int(s["micro_batch_size"]),
        zero_stage=1 if s.get("distributed_optimizer", True) else 0,
        recompute="selective" if selective else "none",
        recompute_modules=tuple(s.get("recompute_modules") or ("core_attn",)),
        moe_token_dispatcher_type=s.get("moe_token_dispatcher_type", "alltoall"),
        moe_flex_dispatcher_backend=s.get("moe_flex_dispatcher_backend", "deepep"),
        moe_flex_dispatcher_num_sms=none_or_int(s.get("moe_flex_dispatcher_num_sms")),
        cp_comm_type=s.get("cp_comm_type", "p2p"),
        pipeline_layers=tuple(int(n) for n in layers) if layers else None,
        pipeline_layout=stages,
        tp_comm_overlap=bool(s["tp_comm_overlap"]) and sp,
        ep_comm_overlap=bool(s.get("ep_comm_overlap", False)),
        account_for_embedding_in_pipeline_split=asym,
        account_for_loss_in_pipeline_split=asym,
        overlap_grad_reduce=bool(s.get("overlap_grad_reduce", True)),
        overlap_param_gather=bool(s.get("overlap_param_gather", True)),
        ddp_bucket_size=int(s["ddp_bucket_size"]) if s.get("ddp_bucket_size") else None,
    )
    group = f"mlperf-{row['model']}"
    return Case(str(row["id"]), job, layout, tokens_per_s_per_gpu(row), None, group, row)


def load_mlperf(path: Path = RUNS) -> list[Case]:
    """One Case per runs.yaml entry."""
    return [case_from_row(r) for r in load_rows(path)]


def _summary(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return (
        f"median error {statistics.median(errs):+.1%}, median |error| {statistics.median(a):.1%}, "
        f"worst {max(errs, key=abs):+.1%} (n={len(a)})"
    )


def main() -> None:
    cases = load_mlperf()
    print(
        f"{'id':36s} {'gpu':14s} {'n':>5s} {'layout':44s} {'step s':>7s} "
        f"{'measured':>9s} {'predicted':>9s} {'error':>7s}  bottleneck"
    )
    groups: dict[str, list[float]] = {}
    for c in cases:
        p = c.estimate()
        err = p.tokens_per_s_per_gpu / c.tokens_per_s_per_gpu - 1
        groups.setdefault(c.group, []).append(err)
        lay = c.layout.describe().replace(" zero", " z").replace("recompute=", "rc=")
        print(
            f"{c.id:36s} {c.raw['hardware']['catalog']:14s} {c.job.cluster.num_gpus:5d} "
            f"{lay[:44]:44s} {step_time_s(c.raw):7.3f} {c.tokens_per_s_per_gpu:9.1f} "
            f"{p.tokens_per_s_per_gpu:9.1f} {err:+7.1%}  "
            f"{p.bottleneck(switch_notes.host_seconds(c.job, c.layout))}"
        )
    print("\nerror = predicted / measured tokens/s/GPU - 1")
    for g, es in groups.items():
        print(f"  {g:22s} {_summary(es)}")
    print(f"  {'all':22s} {_summary([e for es in groups.values() for e in es])}")


if __name__ == "__main__":
    main()
