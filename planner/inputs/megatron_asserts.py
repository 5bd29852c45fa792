"""What Megatron-LM refuses of a command line at start-up that the reader would otherwise read
past: `refuse` raises an InputError (exit 2) naming the flag and Megatron's check, so that
`planner check --megatron-args` never judges a line Megatron does not run.

Each check cites Megatron-LM d98e8a64: megatron/training/arguments.py (validate_args),
megatron/training/argument_utils.py (TransformerConfig from the arguments) and
megatron/core/optimizer/optimizer_config.py; `megatron_startup` holds the rest (FSDP2's
sizes, the batch, recompute, overlap and dispatcher pairs). Checks the reader needs to read a
value anyway live beside that reading (recompute, virtual pipeline, CUDA graphs, weight shards).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.inputs import pipeline_layout
from planner.inputs.errors import InputError, spelled
from planner.inputs.megatron_args_memory import mask_off
from planner.inputs.megatron_startup import first_problem

if TYPE_CHECKING:
    from planner.inputs.megatron_line import Line

DEPRECATED = {
    "--batch-size": "--micro-batch-size",
    "--warmup": "--lr-warmup-fraction",
    "--model-parallel-size": "--tensor-model-parallel-size",
}
"""Flags validate_args asserts unset ("no longer valid"), and what replaced each."""


FP8_GATHER_TRAINING = (
    "needs the distributed optimizer, Megatron-FSDP or torch FSDP2 in training "
    "(validate_args asserts it, arguments.py:1095-1097; only inference, without gradients, runs "
    "it alone)"
)
FP8_GATHER_INFERENCE = (
    "without --use-distributed-optimizer or FSDP only inference runs it (validate_args, "
    "arguments.py:1095-1097, lets it through where torch.is_grad_enabled() is false, as under "
    "run_text_generation_server.py's @torch.inference_mode()), and there the FP8 weights are the "
    "parameters (argument_utils.py:312 fp8_param, transformer_block.py:354-355 fp8_model_init); "
    "planner reads this line as if it trained, which Megatron-LM refuses and planner models "
    "only with a sharded optimizer: add --use-distributed-optimizer, or drop --fp8-param-gather"
)
"""Why --fp8-param-gather without a sharded optimizer is refused (Megatron-LM d98e8a64,
megatron/training/): on a training line Megatron asserts; on an inference entry point's line
it runs FP8 primary weights at ZeRO 0, which planner (bf16 weights beside an FP8 cache at
ZeRO 0, `planner.model.buffers.quantised_weight_bytes`) does not model, as for
--fp4-param-gather (`megatron_training`)."""


def virtual_size(parallel: dict[str, Any]) -> int:
    """The virtual pipeline size validate_args sets before its asserts, from the reader's
    `[parallel]` table: a pipeline layout's stages over pp (arguments.py:941-952; a hybrid
    pattern's '|' segments over pp, :855-860, which `megatron_hybrid.split` writes as such a
    layout), else the size the flags give (`megatron_layout`'s vpp). A layout that does not
    parse or divide is 1 here: the plan refuses it (`plan_layout`)."""
    text = parallel.get("pipeline_model_parallel_layout")
    if text is None:
        return int(parallel.get("vpp", 1))
    stages, pp = pipeline_layout.parse(text), int(parallel.get("pp", 1))
    if stages is None or len(stages) % pp:
        return 1
    return len(stages) // pp


def refuse(line: Line, position: str, vpp: int, trains: bool = True) -> None:
    """Raises where Megatron-LM refuses the line; `position` is the position embedding the line
    asks for (its default resolved), `vpp` the virtual pipeline size it asks for; `trains`, the
    line runs a training script (an inference entry point is let through what validate_args
    allows there, unless planner cannot read it as a training run: FP8_GATHER_INFERENCE)."""
    problem = _first_problem(line, position, vpp, trains)
    if problem is not None:
        flag, why = problem
        raise InputError(f"{line.where}: {flag}: {why}")


def _first_problem(line: Line, position: str, vpp: int, trains: bool) -> tuple[str, str] | None:
    for flag, new in DEPRECATED.items():
        if line.has(flag):
            return flag, f"no longer valid (validate_args asserts it unset): use {new}"
    checks = (
        _position(line, position),
        _activations(line),
        _precision(line),
        _sharding(line, trains),
        _pipeline(line, vpp),
        _context(line),
        _router_padding(line),
        _sft_mask(line),
    )
    found = next((c for c in checks if c is not None), None)
    return found if found is not None else first_problem(line, vpp, trains)


def _position(line: Line, position: str) -> tuple[str, str] | None:
    if line.has("--no-position-embedding") and position != "rope":
        return "--no-position-embedding", (
            "deprecated: Megatron-LM raises unless --position-embedding-type rope; use "
            "--position-embedding-type none"
        )
    # (validate_args also requires --max-position-embeddings; a line without it is read with a
    # note: `megatron_args.max_position_note`)
    longest, seq = line.integer("--max-position-embeddings"), line.integer("--seq-length")
    if longest is not None and seq is not None and longest < seq:
        return "--max-position-embeddings", (
            f"{spelled(longest)}: below --seq-length {spelled(seq)} (validate_args asserts "
            "it at least that)"
        )
    if line.integer("--mtp-num-layers") and position not in ("rope", "none"):
        return "--mtp-num-layers", (
            f"multi-token prediction runs with rope or no position embedding, not {position} "
            "(validate_args asserts it)"
        )
    return None


def _activations(line: Line) -> tuple[str, str] | None:
    if line.has("--swiglu"):
        for flag in ("--squared-relu", "--quick-geglu"):
            if line.has(flag):
                return flag, "cannot be combined with --swiglu (argument_utils.py asserts it)"
    return None


def _precision(line: Line) -> tuple[str, str] | None:
    if line.has("--fp8-format") and line.has("--fp4-format"):
        return "--fp4-format", "cannot be combined with --fp8-format (validate_args raises)"
    if line.has("--fp4-param-gather") and not line.has("--fp4-format"):
        return "--fp4-param-gather", "needs --fp4-format (validate_args raises)"
    fp8 = line.text("--fp8-format")
    if fp8 is not None and fp8 not in ("e4m3", "hybrid"):
        return "--fp8-format", f"{fp8}: e4m3 or hybrid (TransformerConfig's choices)"
    if line.has("--use-precision-aware-optimizer"):
        return None
    for flag in ("--main-grads-dtype", "--main-params-dtype"):
        if (line.text(flag) or "fp32") != "fp32":
            return flag, "only fp32 without --use-precision-aware-optimizer (OptimizerConfig "
            "asserts it)"
    return None


def _sharding(line: Line, trains: bool) -> tuple[str, str] | None:
    distributed = line.has("--use-distributed-optimizer")
    mfsdp, fsdp2 = line.has("--use-megatron-fsdp"), line.has("--use-torch-fsdp2")
    dist_muon = line.text("--optimizer") == "dist_muon"
    if line.has("--overlap-param-gather") and not (distributed or mfsdp or dist_muon):
        return "--overlap-param-gather", (
            "needs the distributed optimizer, Megatron-FSDP or dist_muon (validate_args asserts it)"
        )
    sharded = distributed or mfsdp or fsdp2  # not dist_muon: validate_args maps it after
    if line.has("--fp8-param-gather") and not sharded:
        return "--fp8-param-gather", FP8_GATHER_TRAINING if trains else FP8_GATHER_INFERENCE
    optimizer = line.text("--optimizer") or "adam"
    if optimizer not in ("adam", "sgd") and (mfsdp or fsdp2):  # arguments.py:1726-1740
        which = "--use-torch-fsdp2" if fsdp2 else "--use-megatron-fsdp"
        return "--optimizer", (
            f"{optimizer}: an emerging optimizer, which does not run with {which} "
            "(validate_args asserts it)"
        )
    ckpt = line.text("--ckpt-format") or "torch_dist"
    if mfsdp and ckpt != "fsdp_dtensor":
        return "--ckpt-format", (
            f"{ckpt}: Megatron-FSDP saves only --ckpt-format fsdp_dtensor (validate_args asserts "
            "it)"
        )
    if fsdp2:
        return _torch_fsdp2(line, ckpt, distributed)
    return None


def _torch_fsdp2(line: Line, ckpt: str, distributed: bool) -> tuple[str, str] | None:
    """validate_args' asserts for --use-torch-fsdp2 (the pipeline and expert sizes are the
    rules' own: `planner.search.rules`)."""
    needs = (
        (distributed, "--use-distributed-optimizer", "is not supported"),
        (not line.has("--no-gradient-accumulation-fusion"), "--no-gradient-accumulation-fusion",
         "must be given (gradient accumulation fusion is not supported)"),
        (ckpt not in ("torch_dist", "torch_dcp"), "--ckpt-format",
         f"{ckpt}: only torch_dist or torch_dcp are saved"),
        (not line.has("--untie-embeddings-and-output-weights"),
         "--untie-embeddings-and-output-weights", "must be given"),
        (line.has("--fp16"), "--fp16", "is not supported"),
    )  # fmt: skip
    for broken, flag, why in needs:
        if broken:
            return flag, f"{why} with --use-torch-fsdp2 (validate_args asserts it)"
    return None


def _pipeline(line: Line, vpp: int) -> tuple[str, str] | None:
    pp = line.integer("--pipeline-model-parallel-size") or 1
    if vpp > 1 and line.has("--no-overlap-p2p-communication") and pp <= 2:
        return "--no-overlap-p2p-communication", (
            f"the interleaved schedule without p2p overlap needs pipeline size > 2 (got {pp}; "
            "validate_args asserts it)"
        )
    return None


def _context(line: Line) -> tuple[str, str] | None:
    if line.has("--hybrid-context-parallel"):
        hybrid = _hybrid_context(line)
        if hybrid is not None:
            return "--hybrid-context-parallel", hybrid + " (validate_args asserts it)"
    kinds = line.words("--cp-comm-type") or []
    hierarchical = line.has("--hierarchical-context-parallel-sizes")
    if any("a2a+p2p" in k for k in kinds) and not hierarchical:
        return "--cp-comm-type", (
            "a2a+p2p needs --hierarchical-context-parallel-sizes (validate_args asserts it)"
        )
    return None


def _hybrid_context(line: Line) -> str | None:
    """What validate_args refuses beside --hybrid-context-parallel (Megatron-LM d98e8a64
    arguments.py:1444-1449; the dataloader type defaults to single, :1254-1255)."""
    if (line.integer("--pipeline-model-parallel-size") or 1) > 1:
        return "not supported with pipeline parallelism"
    for flag in ("--enable-cuda-graph", "--use-megatron-fsdp"):
        if line.has(flag):
            return f"not supported with {flag}"
    kind = line.text("--dataloader-type")
    if kind is not None and kind != "single":
        return f"needs --dataloader-type single (got {kind})"
    if not line.has("--calculate-per-token-loss"):
        return "needs --calculate-per-token-loss"
    return None


def _router_padding(line: Line) -> tuple[str, str] | None:
    """--moe-router-padding-for-quantization (or its alias --moe-router-padding-for-fp8, which
    turns it on): TransformerConfig raises without FP8 / FP4 and with the allgather (Megatron's
    default) or alltoall_seq dispatcher (transformer_config.py:2641-2659 d98e8a64)."""
    flags = ("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8")
    flag = next((f for f in flags if line.has(f)), None)
    if flag is None:
        return None
    if not line.has("--fp8-format") and not line.has("--fp4-format"):
        return flag, "needs --fp8-format or --fp4-format (TransformerConfig raises)"
    dispatcher = line.text("--moe-token-dispatcher-type") or "allgather"
    if dispatcher in ("allgather", "alltoall_seq"):
        return flag, f"cannot run with the {dispatcher} dispatcher (TransformerConfig raises)"
    return None


def _sft_mask(line: Line) -> tuple[str, str] | None:
    """--sft builds SFTDataset (pretrain_gpt.py:468-470), whose every sample asserts the
    dataloader's attention mask off (training/datasets/sft_dataset.py:174): such a run stops at
    its first batch unless the mask is turned off."""
    if line.has("--sft") and not mask_off(line):
        return "--sft", (
            "needs the dataloader's attention mask off (SFTDataset asserts "
            "`not create_attention_mask` on every sample, sft_dataset.py:174): add "
            "--no-create-attention-mask-in-dataloader"
        )
    return None
