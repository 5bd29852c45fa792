"""Published runs as planner inputs: each row of published_runs.yaml and hagemann_layouts.csv
mapped to a (Job, Layout) case with its measured tokens/s/GPU.

The reference data live in benchmarks/data (with their sources: benchmarks/data/README.md).
Benchmarks read them; tests read only hagemann_layouts.csv there (tests/data holds the few other
numbers they need).

Mapping rules (one place, shared by the fidelity, ranking, fitting and memory benchmarks):
  model      a zoo model with the same num_layers / hidden_size / num_attention_heads (and vocab
             when several match); rows that publish no shape map by name (MODEL_BY_NAME)
  gpu        from the hardware text: "A100" + 80GB -> a100-sxm-80gb, "H100" -> h100-sxm-80gb
  parallel   cp/ep/vpp null -> 1; micro_batch_size null -> 1 (assumed);
             sequence_parallel null -> on when tp > 1 (Megatron/NeMo recipes);
             recompute text "full..." / "selective..." / "none" / null -> none;
             zero text: "distributed optimizer" -> 1, FSDP -> 3, "none"/"not ZeRO" -> 0,
             null -> 1 (Megatron/NeMo recipes use the distributed optimizer);
             precision text containing fp8/Float8 -> fp8, anything else (fp16, bf16) -> bf16
  framework  flash_attention False for the 2021-2022 Megatron papers (SC21, Korthikanti: the
             fused-softmax path); tp_comm_overlap on where the source lists --tp-comm-overlap, and
             for the NeMo 24.07 H100 recipes (they enable TP overlap by default)
  seq        torchtitan's H100 benchmark omits it: 8192, its Llama 3 training default
  torchtitan selective recompute is its default "op" policy (selective_recompute = "per_op"); its
             loss is torch's cross entropy on each rank's logits (cross_entropy = "pytorch");
             the H100 benchmark rows without torch.compile run eager nn.RMSNorm,
             silu(x) * gate and the fp32 complex rotary embedding (fused_norm = fused_swiglu =
             fused_rope = false); the A100 doc does not say, so its rows keep the defaults;
             DTensor sequence parallelism saves the all-gathered input of the column-parallel
             linears (sp_keeps_gathered_input) and its collectives block, with no backward
             overlap (tp_backward_overlap = false); its attention is
             FlashAttention-2 (attention_kernel = "flash2"): the models then called plain
             F.scaled_dot_product_attention (pytorch/torchtitan's Llama model.py at the end of
             2024), whose flash backend PyTorch >= 2.5 picks on Hopper, cuDNN's being opt-in
             (pytorch/pytorch#138522; torchtitan#1042 saw it dispatch FLASH_ATTENTION on H100
             with a 2.7 nightly); A100 runs FA2 either way
  GPU        the torchtitan H100 rows ran on Meta's H100 with 96 GB of HBM2e at a 500 W cap
             ("non-standard ... peak between SXM and NVL", torchtitan paper arXiv:2410.06511):
             h100-sxm-80gb (the same GH100 die) with power_limit_w = 500 ("the default 500W
             power limit"), hbm_bandwidth_tb_per_s = 2.4 ("96GB HBM2e with 2.4 TB/sec", both
             benchmarks/llama3_h100_202412_torchtitan.md) and memory_gib = 95 (the label
             behaves like GiB on H100s; 95 leaves the driver's reserve, assumed)
  torchtitan the torchtitan rows are jobs of framework "torchtitan" (the path a torchtitan plan
             takes: FSDP2's states and per-block gathers, DTensor TP with loss_parallel, torch
             pipelining), [torchtitan] compile where the source lists torch.compile and async_tp
             where it lists AsyncTP (`planner.model.async_tp`; the same benchmark's Table 4
             measures AsyncTP at +5.7% over none, 829 -> 876 TPS/GPU); Float8 is torchao's
             tensorwise recipe without the FSDP float8 all-gather (torchtitan's defaults: no row
             enables it); the allocator's expandable segments on (torchtitan's run script sets
             them since pytorch/torchtitan a5e57e4a, 2024-10-22, before the Dec 2024 benchmark)
  DP sync    overlap_grad_reduce = false where the source says the gradient all-reduce does not
             overlap the backward (Korthikanti et al.'s 2240-GPU run); otherwise overlapped
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hagemann

from planner.inputs import catalog, userbuffers
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import TITAN_DROPOUT, Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import flops
from planner.model.performance import Performance

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "benchmarks" / "data"

MODEL_BY_NAME = {
    "LLAMA2-70B": "llama2-70b",
    "Nemotron-340B": "nemotron4-340b",
    "Llama 2 13B": "llama2-13b",
    "GPT3-175B": "gpt3-175b",
    "LLAMA3-8B": "llama3.1-8b",
    "LLAMA3-70B": "llama3.1-70b",
    "Llama 3.1 8B": "llama3.1-8b",
    "Llama 3.1 70B": "llama3.1-70b",
    "Llama 3 8B": "llama3.1-8b",
    "Llama 3 70B": "llama3.1-70b",
}
"""Rows whose model block is partly null, or whose shape several zoo entries share."""

NEMOTRON = "nemo2407-h100-fp8-nemotron-340b-128gpu"
"""No 24.07 file holds this layout; the DGX Cloud benchmark recipe with the same layout (NeMo
24.09) uses selective recompute, TP overlap, FP8 parameters and bf16 optimizer states
(benchmarks/data/nemo_recipes.md)."""

GPT3_512 = "nemo2407-h100-fp8-gpt3-175b-512gpu"
"""No 24.07 file holds this layout either (vpp 6 with mbs 2 and 2,048 sequences on 512 GPUs; the
24.07 script is the 128-GPU one); the NeMo 2 performance recipe with the same layout (v2.2.0
model_configs_h100.csv) keeps FP8 parameters (fp8_params=True -> --fp8-param-gather) and TP
overlap (benchmarks/data/nemo_recipes.md, Table B)."""

LATER_RECIPE = {NEMOTRON, GPT3_512}
"""Rows whose settings come from the later recipe with the same layout: FP8 parameters."""

NEMO_USERBUFFERS = REFERENCE / "nemo_userbuffers.yaml"
"""The Transformer Engine userbuffers slots of the NeMo recipes behind two nemo2407 rows (the
Llama 3 70B one is NeMo 2's config of the name its 24.07 NeMo 1 launcher names: assumed equal);
the other TP-overlap rows keep Transformer Engine's defaults (the file's header says why)."""


@cache
def _nemo_userbuffers_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(NEMO_USERBUFFERS.read_text())
    return doc


def nemo_userbuffers(rid: str) -> tuple[tuple[str, userbuffers.UbSlot], ...]:
    """A row's userbuffers slots (`userbuffers.resolve`): its recipe's, else TE's defaults."""
    doc = _nemo_userbuffers_doc()
    name = doc["rows"].get(rid)
    return userbuffers.resolve(doc["configs"][name] if name else None)


NEMO_TP_OVERLAP = {
    "nemo2407-h100-fp8-llama3-70b-64gpu",
    "nemo2407-h100-fp8-llama2-70b-64gpu",
    *LATER_RECIPE,
}
"""NeMo recipes with ub_tp_comm_overlap on (benchmarks/data/nemo_recipes.md)."""

CLUSTER_OVERRIDES: dict[str, dict[str, float]] = {
    "torchtitan-h100": {"power_limit_w": 500.0, "hbm_bandwidth_tb_per_s": 2.4, "memory_gib": 95.0}
}
"""`[cluster]` overrides for rows whose GPU differs from its catalog part (see above)."""

DEFAULT_SEQ = {"torchtitan-h100": 8192}
"""torchtitan's Llama 3 training config uses seq_len 8192 (the H100 benchmark omits it)."""


@dataclass(frozen=True)
class Case:
    """One measured run as planner inputs."""

    id: str
    job: Job
    layout: Layout
    tokens_per_s_per_gpu: float
    mfu_pct: float | None = None
    """Published MFU in %, where its convention is model FLOPs without causal halving."""
    group: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The source row as read (yaml mapping or csv row), e.g. for measured memory or outcome."""
    dp_sync: hagemann.DpSync = "megatron"
    """How the run's training code synchronised its data-parallel replicas (hagemann.DpSync)."""

    def estimate(self) -> Performance:
        """The model's prediction for this run (with the run's own DP sync)."""
        return hagemann.estimate(self.job, self.layout, self.dp_sync)


def cluster(gpu_name: str, num_gpus: int, **overrides: Any) -> ClusterSpec:
    """A catalog GPU, num_gpus of them, as a plan's `[cluster]` table (with overrides)."""
    return resolve_cluster(ClusterSection(gpu=gpu_name, num_gpus=num_gpus, **overrides), None)


def gpu_name(text: str) -> str:
    t = text.upper()
    if "A100" in t:
        return "a100-sxm-40gb" if "40GB" in t.replace(" ", "") else "a100-sxm-80gb"
    if "H100" in t:
        return "h100-sxm-80gb"
    if "H200" in t:
        return "h200-sxm-141gb"
    raise ValueError(f"unknown GPU text {text!r}")


def find_model(block: dict[str, Any]) -> ModelArch:
    name = str(block.get("name") or "")
    if name in MODEL_BY_NAME:
        return catalog.get_model(MODEL_BY_NAME[name])
    shape = (block.get("num_layers"), block.get("hidden_size"), block.get("num_attention_heads"))
    hits = [
        m
        for m in catalog.models().values()
        if (m.num_layers, m.hidden_size, m.num_attention_heads) == shape
    ]
    vocab = block.get("vocab_size")
    if len(hits) > 1 and vocab:
        hits = [m for m in hits if m.vocab_size == vocab] or hits
    if not hits:
        raise ValueError(f"no zoo model with shape {shape} ({name})")
    return sorted(hits, key=lambda m: m.name)[0]


def _recompute(text: Any) -> str:
    t = str(text or "none").lower()
    for r in ("full", "selective"):
        if t.startswith(r):
            return r
    return "none"


def _zero(text: Any) -> int:
    if text is None:
        return 1
    t = str(text).lower()
    if "fsdp" in t or "zero-3" in t:
        return 3
    if "distributed optimizer" in t:
        return 1
    return 0


def _int(v: Any, default: int = 1) -> int:
    return default if v is None else int(v)


MCORE_R08_BASIS = "Megatron-Core formula (r0.8)"
"""A TFLOP/s figure counted by Megatron-Core r0.8's num_floating_point_operations
(benchmarks/data/conventions.md item 3: attention not halved, MoE as top_k x expert FFN), which is
planner.model.flops.model_flops_per_token's convention: tokens/s/GPU = TFLOP/s / FLOPs per token."""


def _mcore_tflops(row: dict[str, Any]) -> float | None:
    """The row's TFLOP/s per GPU where Megatron-Core r0.8 counted it (MCORE_R08_BASIS)."""
    res = row.get("result") or {}
    v = res.get("tflops_per_gpu")
    return float(v) if v and res.get("tflops_basis") == MCORE_R08_BASIS else None


def published_tokens(row: dict[str, Any], arch: ModelArch | None = None) -> float | None:
    """Published (or derived) tokens/s/GPU; with the row's model, also from a TFLOP/s figure
    counted by Megatron-Core r0.8 (MCORE_R08_BASIS) where no token rate is published."""
    res = row.get("result") or {}
    der = row.get("derived") or {}
    v = res.get("tokens_per_s_per_gpu") or der.get("tokens_per_s_per_gpu")
    if v:
        return float(v)
    tflops = _mcore_tflops(row)
    if arch is not None and tflops:
        seq = int(row["model"]["seq_length"])
        return tflops * 1e12 / flops.model_flops_per_token(arch, seq)
    return None


def has_throughput(row: dict[str, Any]) -> bool:
    """A token rate, or a TFLOP/s figure published_tokens can convert."""
    return bool(published_tokens(row) or _mcore_tflops(row))


def published_mfu(row: dict[str, Any]) -> float | None:
    """Published (or derived) MFU in %, in the non-halved model-FLOPs convention."""
    res = row.get("result") or {}
    der = row.get("derived") or {}
    if der.get("mfu_pct_72_formula"):
        return float(der["mfu_pct_72_formula"])
    if res.get("mfu_pct") and not str(row["id"]).startswith("torchtitan"):
        return float(res["mfu_pct"])
    return None


def case_from_row(row: dict[str, Any]) -> Case:
    rid = str(row["id"])
    arch = find_model(row["model"])
    hw, par = row["hardware"], row["parallel"]
    seq = row["model"].get("seq_length")
    if seq is None:
        seq = next(v for k, v in DEFAULT_SEQ.items() if rid.startswith(k))
    tp, pp, dp = _int(par["tp"]), _int(par["pp"]), _int(par["dp"])
    sp = par.get("sequence_parallel")
    precision = str(par.get("precision") or "").lower()
    fp8 = "fp8" in precision or "float8" in precision
    other = str(par.get("other") or "") + str(row.get("notes") or "")
    nemo = rid.startswith("nemo2407")
    titan = rid.startswith("torchtitan")
    eager = rid.startswith("torchtitan-h100") and "torch.compile" not in other
    overrides = next((v for k, v in CLUSTER_OVERRIDES.items() if rid.startswith(k)), {})
    job = Job(
        arch=arch,
        cluster=cluster(gpu_name(str(hw["gpu"])), int(hw["num_gpus"]), **overrides),
        seq_length=int(seq),
        global_batch_size=int(par["global_batch_size"]),
        precision="fp8" if fp8 else "bf16",
        # NeMo 24.07 recipes: bf16 gradient buffers, no fp8 parameters (data/nemo_recipes.md)
        main_grad_dtype="bf16" if nemo else "fp32",
        fp8_param_gather=not nemo or rid in LATER_RECIPE,
        optimizer_state_dtype="bf16" if rid == NEMOTRON else "fp32",
        flash_attention=not rid.startswith(("sc21", "korthikanti")),
        attention_kernel="flash2" if titan else "fused",
        cross_entropy="pytorch" if titan else "fused",
        fused_norm=not eager,
        fused_swiglu=not eager,
        fused_rope=not eager,
        sp_keeps_gathered_input=titan,
        tp_backward_overlap=not titan,
        selective_recompute="per_op" if titan else "core_attn",
        tp_overlap_cfg=nemo_userbuffers(rid),
    )
    if titan:
        job = replace(
            job,
            framework="torchtitan",
            torchtitan=TorchtitanSection(
                compile="torch.compile" in other, async_tp="AsyncTP" in other
            ),
            fp8_recipe="tensorwise",
            fp8_param_gather=False,
            expandable_segments=True,
            **TITAN_DROPOUT,  # torchtitan's models have no dropout (planner.inputs.plan)
        )
    recompute = _recompute(par.get("recompute"))
    if rid == NEMOTRON:
        recompute = "selective"
    sp_on = bool(sp) if sp is not None else tp > 1
    overlap = "tp-comm-overlap" in other or rid in NEMO_TP_OVERLAP
    layout = Layout(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=_int(par.get("cp")),
        ep=_int(par.get("ep")),
        vpp=_int(par.get("vpp")),
        sequence_parallel=sp_on,
        micro_batch_size=_int(par.get("micro_batch_size")),
        zero_stage=_zero(par.get("zero_or_dist_opt")),  # type: ignore[arg-type]
        recompute=recompute,  # type: ignore[arg-type]
        tp_comm_overlap=overlap and sp_on,
        overlap_grad_reduce="no overlap of DP gradient" not in other,
    )
    tokens = published_tokens(row, arch)
    group = rid.split("-")[0]
    return Case(rid, job, layout, tokens or math.nan, published_mfu(row), group, row)


def load_published(reference: Path = REFERENCE, with_throughput: bool = True) -> list[Case]:
    """Published runs as planner cases: those with a throughput figure (tokens_per_s_per_gpu is
    NaN for the others when with_throughput is False; rows that cannot be mapped are skipped)."""
    rows = yaml.safe_load((reference / "published_runs.yaml").read_text())
    out = []
    for r in rows:
        if with_throughput and not has_throughput(r):
            continue
        try:
            out.append(case_from_row(r))
        except (ValueError, StopIteration, KeyError, TypeError):
            if with_throughput:
                raise
    return out


def load_hagemann(
    kernel: str | None = "flash_attention2",
    outcomes: tuple[str, ...] = ("ok",),
    assume: hagemann.Assumptions = hagemann.MODELLED,
) -> list[Case]:
    """The Hagemann et al. rows (benchmarks/hagemann.py) with these outcomes and attention kernel
    (None: every kernel), described per `assume` (hagemann.Assumptions: the modelled settings or
    a what-if); tokens_per_s_per_gpu and mfu_pct are NaN where the row has none."""
    kernels = (kernel,) if kernel else hagemann.KERNELS
    out = []
    rows = hagemann.rows(kernels=kernels, outcomes=outcomes, assume=assume)
    for row in rows:
        r = row.data
        tok = float(r["tokens_per_s_per_gpu"] or "nan")
        mfu = float(r["mfu_pct"] or "nan")
        rid = f"hagemann-{r['trial_id']}"
        out.append(Case(rid, row.job, row.layout, tok, mfu, row.group, dict(r), row.dp_sync))
    return out
