"""What the launch-file emitters share.

`megatron` (Megatron-LM `pretrain_gpt.py` arguments), `torchrun` (a bash script), `slurm` (an
sbatch script) and `k8s` (a Kubeflow PyTorchJob manifest) each expose `render(plan, job_name)`.
This module holds what they share besides the header (`planner.emit.prediction`): the
environment Megatron needs, the node count, the optimizer and schedule defaults, the CUDA-graph
implementation, and the helpers that keep user-given names from breaking a comment, a shell
script or a Kubernetes name. `planner.emit.launch` picks the emitter and writes the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.emit.prediction import exports_expandable
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.search.rules import graphs

RDZV_PORT = 29400
"""torchrun's default c10d rendezvous port (torch/distributed/run.py)."""

SCHEDULE: tuple[tuple[str, str | None, str], ...] = (
    ("--train-iters", "TRAIN_ITERS", "1000"),
    ("--lr", "LR", "3e-4"),
    ("--min-lr", "MIN_LR", "3e-5"),
    ("--lr-decay-style", None, "cosine"),
    ("--lr-warmup-iters", "WARMUP_ITERS", "100"),
    ("--weight-decay", None, "0.1"),
    ("--clip-grad", None, "1.0"),
    ("--adam-beta1", None, "0.9"),
    ("--adam-beta2", None, "0.95"),
    ("--log-interval", None, "10"),
)
"""Optimizer and schedule arguments, not part of the plan (Llama-style values): (flag, the
variable a user overrides it with in the torchrun / slurm scripts or None if fixed, value)."""


def comment_safe(text: str) -> str:
    """`text` with control and line-break characters escaped, so it stays on one comment line."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or code in (0x2028, 0x2029):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def check_job_name(name: str) -> str:
    """A job name must be non-empty and free of NUL (no shell variable can hold one)."""
    if not name or "\x00" in name:
        raise InputError(f"--job-name: must be non-empty text without NUL bytes (got {name!r})")
    return name


def file_word(text: str, max_len: int) -> str:
    """`text` as one word of a file or Slurm name: letters, digits, '.', '_' and '-' (runs of
    anything else become '-'), at most max_len of them; may be empty."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:max_len]


def slug(name: str, max_len: int = 40) -> str:
    """A DNS-1123 label from a free-form name (lower-case alphanumerics and '-'), for Kubernetes
    and Slurm names; the original name is kept elsewhere, quoted."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:max_len].strip("-")
    if not s:
        raise InputError(
            f"--job-name: {name!r} has no ASCII letters or digits (a-z, 0-9) to build a "
            "Kubernetes/Slurm name from"
        )
    return s


@dataclass(frozen=True)
class Nodes:
    """How the plan's GPUs are laid out on machines."""

    nnodes: int
    nproc_per_node: int


def nodes(plan: Plan) -> Nodes:
    """Whole nodes of cluster.gpus_per_node GPUs (or one partial node for a small job)."""
    cl = plan.job.cluster
    n, per = cl.num_gpus, cl.gpus_per_node
    if n <= per:
        return Nodes(1, n)
    if n % per:
        raise InputError(
            f"{plan.path}: cluster.num_gpus: {n} GPUs are not a whole number of nodes of "
            f"gpus_per_node ({per})"
        )
    return Nodes(n // per, per)


@dataclass(frozen=True)
class EnvVar:
    """One environment setting; value None means `unset`."""

    name: str
    value: str | None
    why: str


def optimizer_instances(plan: Plan) -> int:
    """Megatron's --num-distributed-optimizer-instances for the plan: one per pool of a
    data-parallel plan across pools (planner.model.pools), else the plan's own
    (`training.optimizer_instances`); 1 without a distributed optimizer or FSDP."""
    lay = plan.require_layout()
    if lay.zero_stage == 0:
        return 1
    return lay.dp_pools if lay.dp_pools > 1 else plan.job.optimizer_instances


PLAN_KERNEL_ENV = ("NVTE_EXT_MARGIN_SM", "NVTE_CUTEDSL_FUSED_GROUPED_MLP", "NVTE_ROCM_ENABLE_MXFP8")
"""The variables of `environment` that choose the kernels the plan was timed with (its GEMMs'
SM margin, TE's fused grouped MLP, ROCm's MXFP8 GEMMs): every launch target sets them, Megatron-
Bridge in its env_vars (`planner.emit.bridge_notes`) as the scripts export them."""


def environment(plan: Plan) -> list[EnvVar]:
    """The environment Megatron-LM needs for this plan, with the reason for each setting.

    CUDA_DEVICE_MAX_CONNECTIONS: validate_args asserts it is "1" when TP > 1 or CP > 1 before
    Blackwell, and asserts it is not "1" with Megatron-FSDP (zero_stage >= 2); the EP all-to-all
    overlap needs it above 1 (Megatron's MoE README; validate_args then only warns about TP / CP),
    and 32 is the value that warning names. Wherever "1" is not required, NVIDIA's
    Megatron-Bridge performance recipes set 32 (benchmarks/data/bridge_recipes.md, environment
    table: every recipe without TP / CP > 1 on Hopper), so the overlapped NCCL kernels get
    hardware queues of their own; on AMD it is set only where asserted. Also from those recipes,
    on NVIDIA GPUs: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (all but the Megatron-FSDP
    recipes, which leave it unset; with FSDP only where the plan says `expandable_segments`),
    which keeps the caching allocator's fragmentation down (memory counts the smaller
    fragmentation only where the plan says so: the gate errs high), and
    NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=20 (set by all 108, at 10-20; here on more than one GPU),
    which leaves SMs to the NCCL kernels overlapped with Transformer Engine's norm kernels.
    NVTE_EXT_MARGIN_SM with the plan's `gemm_sm_margin` (Transformer Engine launches every GEMM
    on the SMs less it). NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 with `moe_fused_grouped_mlp`: without it
    Transformer Engine registers no fused grouped-MLP kernel (d0067d0d
    `_GroupedMLP_CuTeGEMMBase.is_supported`), as Megatron-Bridge's DeepSeek-V3 recipes set it.
    NVTE_CPU_OFFLOAD_V1=1 with fine-grained activation offloading:
    validate_args asserts it under Transformer Engine >= 2.10 (so that TE's offload hooks do not
    move weights).
    NCCL settings come from Megatron-LM's own launch examples (examples/llama,
    examples/megatron_fsdp); on AMD the ROCm Megatron-LM guide's HSA_NO_SCRATCH_RECLAIM (RCCL
    reads the NCCL_* names too), and NVTE_ROCM_ENABLE_MXFP8=1 with the mxfp8 recipe there, without
    which ROCm Transformer Engine refuses MXFP8 (ROCm/TransformerEngine 030b7921
    transformer_engine/pytorch/quantization.py:74-82). With pools (one vendor) every rank gets
    the same environment: CUDA_DEVICE_MAX_CONNECTIONS "1" where any pool's GPU needs it (a Hopper
    pool beside a Blackwell one: Blackwell takes "1" too, with fewer queues)."""
    lay = plan.require_layout()
    gpu = plan.job.cluster.gpu
    nvidia = gpu.vendor == "nvidia"  # pools are of one vendor (`planner.inputs.pools`)
    # with pools, one environment for every pool's ranks: "1" where any pool's GPU needs it
    kinds = [p.cluster.gpu for p in plan.job.pools] or [gpu]
    needs_one = any(g.needs_one_device_connection for g in kinds)
    env: list[EnvVar] = []
    many = "32"
    if lay.zero_stage >= 2:  # torch FSDP2 too: arguments.py:1048-1049 (d98e8a64)
        fsdp = "torch FSDP2" if lay.use_torch_fsdp2 else "Megatron-FSDP"
        if nvidia:
            env.append(EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", many, f"{fsdp} asserts not 1"))
        else:
            env.append(EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", None, f"{fsdp} asserts it is not 1"))
    elif lay.ep_comm_overlap:
        env.append(EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", many, "EP all-to-all overlap needs > 1"))
    elif (lay.tp > 1 or lay.cp > 1) and needs_one:
        env.append(
            EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", "1", "TP/CP > 1 before Blackwell (asserted)")
        )
    elif nvidia:
        env.append(
            EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", many, "queues for overlapped NCCL kernels")
        )
    env.append(EnvVar("TORCH_NCCL_AVOID_RECORD_STREAMS", "1", "free NCCL buffers sooner"))
    if nvidia and (lay.zero_stage < 2 or plan.job.expandable_segments):
        why = "less fragmented memory"
        if exports_expandable(plan):  # the header gives both peaks
            why += " (the plan's peak counts without it: training.expandable_segments)"
        env.append(EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", why))
        if plan.job.cuda_graphs and plan.job.cuda_graph_impl == "transformer_engine":
            # arguments.py d98e8a64 asserts it beside expandable segments for TE's graphs
            env.append(
                EnvVar("NCCL_GRAPH_REGISTER", "0", "TE CUDA graphs with expandable segments")
            )
    if nvidia and plan.job.cluster.num_gpus > 1:
        for way in ("FWD", "BWD"):
            env.append(
                EnvVar(f"NVTE_{way}_LAYERNORM_SM_MARGIN", "20", "SMs for overlapped NCCL kernels")
            )
    if plan.job.gemm_sm_margin:
        margin = str(plan.job.gemm_sm_margin)
        env.append(EnvVar("NVTE_EXT_MARGIN_SM", margin, "SMs every TE GEMM leaves free"))
    if plan.job.moe_fused_grouped_mlp and nvidia:
        env.append(EnvVar("NVTE_CUTEDSL_FUSED_GROUPED_MLP", "1", "TE's fused grouped MLP kernels"))
    if nodes(plan).nnodes > 1:
        env.append(EnvVar("NCCL_IB_TIMEOUT", "19", "tolerate slow InfiniBand links at scale"))
        env.append(EnvVar("NCCL_P2P_NET_CHUNKSIZE", "2097152", "larger PP sends over the network"))
    if lay.offload_modules:
        env.append(
            EnvVar("NVTE_CPU_OFFLOAD_V1", "1", "fine-grained offloading with TE >= 2.10 (asserted)")
        )
    if gpu.vendor == "amd":
        env.append(EnvVar("HSA_NO_SCRATCH_RECLAIM", "1", "ROCm: keep kernel scratch allocated"))
        if plan.job.precision == "fp8" and plan.job.fp8_recipe == "mxfp8":
            env.append(EnvVar("NVTE_ROCM_ENABLE_MXFP8", "1", "ROCm TE: MXFP8 GEMMs (gfx950)"))
    return env


def comment_block(lines: list[str]) -> str:
    """`lines` as '# ' comments, each kept on its own line by `comment_safe`."""
    return "".join(f"# {comment_safe(line)}\n" if line else "#\n" for line in lines)


def cuda_graph_impl(plan: Plan) -> str:
    """The CUDA-graph implementation a `cuda_graphs` plan launches with: the plan's own
    (`Job.cuda_graph_impl`), else Megatron-Core's per-layer graphs ("local", the MLPerf v5.x
    configs' MCORE_CUDA_GRAPH; the transformer_engine implementation runs with
    NCCL_GRAPH_REGISTER=0 beside expandable_segments, which arguments.py d98e8a64 asserts:
    `environment`). What it does not
    run (per-layer graphs: CPU offloading, full recompute; any: graphed recompute with dropout,
    `planner.search.rules.graphs`) is refused, naming the field."""
    found = graphs.module_conflict(plan.job) or graphs.conflict(plan.job, plan.require_layout())
    if found is not None:
        field, why = found
        raise InputError(
            f"{plan.path}: {field}: with training.cuda_graphs = true, {why}; set one of them "
            "otherwise"
        )
    return plan.job.cuda_graph_impl or "local"


INFLIGHT_OFFLOADS = 1
"""TransformerConfig.fine_grained_offloading_max_inflight_offloads where a full-iteration CUDA
graph runs fine-grained offloading: Megatron-Core asserts it a non-negative integer there
(transformer_config.py d98e8a64; the graph does not rely on record_stream, so the copies are
joined explicitly), None (no joins) elsewhere. 1, as Megatron-Bridge 067f987d's DeepSeek-V3
GB300 and Nemotron-H GB200 performance recipes set it: one copy per offload group in flight."""


def inflight_offloads(plan: Plan) -> int | None:
    """`INFLIGHT_OFFLOADS` where the plan offloads under a full-iteration graph, else None."""
    lay, job = plan.require_layout(), plan.job
    whole_step = job.cuda_graphs and cuda_graph_impl(plan) == "full_iteration"
    return INFLIGHT_OFFLOADS if whole_step and lay.offload_modules else None
