"""What Megatron-LM refuses of a command line at start-up (validate_args, the config dataclasses'
`__post_init__`, the optimizer's set-up) or at the first training step, beyond
`megatron_asserts`' checks: `first_problem` gives (flag, why) for the first such problem, in
that module's shape, so that `planner check --megatron-args` never judges a run Megatron does not
start.

Each check cites NVIDIA/Megatron-LM d98e8a64 (args = megatron/training/arguments.py, tc =
megatron/core/transformer/transformer_config.py, mpc = megatron/core/model_parallel_config.py).
validate_args runs before the configs are built, so its asserts come first where both apply.
TransformerConfig's checks below sit at the top level of `__post_init__` (not under a model
kind), so they fire for every model the line builds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from planner.inputs.errors import InputError
from planner.inputs.layout import MIN_OFFLOADED_ELEMENTS
from planner.inputs.megatron_flags import (
    DEV_BRANCH_FLAGS,
    FORK_FLAGS,
    SCRIPT_FLAGS,
    megatron_flags,
)

if TYPE_CHECKING:
    from planner.inputs.megatron_line import Line

Problem = tuple[str, str] | None

ADAM_FAMILY = ("adam", "sgd")
"""The optimizers validate_args leaves alone; every other one is an emerging optimizer
(args:1725-1736), built by megatron/core/optimizer/__init__.py
`_get_megatron_emerging_optimizer`."""


def _given(line: Line, flag: str) -> bool:
    """Whether a flag the reader checks but does not read (not in `megatron_flags.READ`: it
    stays listed as ignored) is on the line."""
    return flag in line.flags


def _value(line: Line, flag: str) -> str | None:
    """The last word of such a flag (its choices already checked: `megatron_choices`)."""
    words = line.flags.get(flag)
    return words[-1] if words else None


def first_problem(line: Line, vpp: int, trains: bool) -> Problem:
    """The first (flag, why) Megatron-LM refuses the line on; `vpp` the virtual pipeline size the
    line asks for, `trains` whether it runs a training script (checks Megatron makes only in
    training are skipped on an inference entry point's line)."""
    checks = (
        lambda: _batch(line),
        lambda: _fsdp2(line),
        lambda: _moe_sequence_parallel(line, trains),
        lambda: _recompute(line),
        lambda: _param_gather(line, vpp),
        lambda: _precision(line),
        lambda: _cuda_graphs(line),
        lambda: _expert_overlap(line),
        lambda: _dispatcher(line),
        lambda: _pipeline(line, vpp),
        lambda: _offload(line),
    )
    return next((p for check in checks if (p := check()) is not None), None)


def micro_batch_note(line: Line, trains: bool) -> list[str]:
    """What a training line without --micro-batch-size is told: validate_args asserts it given
    (args:693); planner reads it as 1 with this note, as it reads a line without
    --max-position-embeddings (`megatron_args.max_position_note`), rather than refusing: the
    reader's own tests and users' partial lines leave it out."""
    if not trains or line.has("--micro-batch-size"):
        return []
    return [
        "--micro-batch-size: not given, read as 1; Megatron-LM requires it (validate_args "
        "asserts it, arguments.py:693): add it to the line"
    ]


def _batch(line: Line) -> Problem:
    instances = line.integer("--num-distributed-optimizer-instances")
    if instances is not None and instances < 1:
        return "--num-distributed-optimizer-instances", (
            f"{instances}: expected 1 or more (Megatron-LM divides the data-parallel size by it, "
            "megatron/core/parallel_state.py:922-926)"
        )
    return None


def _fsdp2(line: Line) -> Problem:
    """validate_args' torch FSDP2 sizes (args:1034-1037). --torch-fsdp2-no-reshard-after-forward
    is read (`Layout.torch_fsdp2_reshard_after_forward`, planner.model.fsdp2); without
    --use-torch-fsdp2 it is read by nothing (get_megatron_ddp_config)."""
    if not line.has("--use-torch-fsdp2"):
        return None
    for flag, what in (
        ("--pipeline-model-parallel-size", "pipeline"),
        ("--expert-model-parallel-size", "expert"),
    ):
        size = line.integer(flag) or 1
        if size != 1:
            return flag, (
                f"{size}: --use-torch-fsdp2 is not supported with {what} parallelism "
                "(validate_args asserts it 1, args:1034-1037)"
            )
    return None


def moe_needs_sequence_parallel(experts: bool, tp: int, sequence_parallel: bool) -> bool:
    """Whether Megatron's MoE layer raises ValueError at its first training forward: a model
    with experts, an attention TP group of more than one rank (MoELayer's attn_tp_group is the
    TP group, transformer MoE moe_layer.py:181 d98e8a64) and no sequence parallelism
    (moe_layer.py:636-640); whatever the dispatcher or expert TP. The Megatron-args reader
    (`first_problem`) and the plan's rule (`rules.parallel.sequence_parallel`) share it."""
    return experts and tp > 1 and not sequence_parallel


def _moe_sequence_parallel(line: Line, trains: bool) -> Problem:
    tp = line.integer("--tensor-model-parallel-size") or 1
    experts = bool(line.integer("--num-experts"))
    if trains and moe_needs_sequence_parallel(experts, tp, line.has("--sequence-parallel")):
        return "--sequence-parallel", (
            f"not given with experts at tensor-parallel size {tp}: the first MoE layer's "
            "forward in training raises ValueError (Megatron-Core transformer MoE "
            "moe_layer.py:636-640); add --sequence-parallel"
        )
    return None


def _recompute(line: Line) -> Problem:
    """--distribute-saved-activations: validate_args (args:1410-1420) asserts tp > 1, full
    recompute and a recompute method; TransformerConfig (tc:1934-1938) refuses it beside
    sequence parallelism. --recompute-activations makes the granularity selective."""
    flag = "--distribute-saved-activations"
    if not _given(line, flag):
        return None
    granularity = line.text("--recompute-granularity")
    if line.has("--recompute-activations"):
        granularity = "selective"
    tp = line.integer("--tensor-model-parallel-size") or 1
    if tp < 2:
        return flag, "needs --tensor-model-parallel-size > 1 (validate_args asserts it, args:1410)"
    if granularity != "full" or not line.has("--recompute-method"):
        return flag, (
            "needs --recompute-granularity full and a --recompute-method (validate_args asserts "
            "both, args:1413-1418)"
        )
    if line.has("--sequence-parallel"):
        return flag, "must be off with --sequence-parallel (TransformerConfig raises, tc:1934-1938)"
    return None


def _param_gather(line: Line, vpp: int) -> Problem:
    """--overlap-param-gather-with-optimizer-step's asserts (args:1066-1075): the distributed
    optimizer, --overlap-param-gather, the interleaved schedule, and no distributed checkpoint
    (use_dist_ckpt = --ckpt-format != torch, training/utils/common_utils.py:580-581); and
    Megatron-FSDP v2's (args:1124-1126)."""
    flag = "--overlap-param-gather-with-optimizer-step"
    if _given(line, flag):
        needs = (
            (line.has("--use-distributed-optimizer"), "--use-distributed-optimizer"),
            (line.has("--overlap-param-gather"), "--overlap-param-gather"),
            (vpp > 1, "the interleaved schedule (a virtual pipeline size > 1)"),
            ((line.text("--ckpt-format") or "torch_dist") == "torch", "--ckpt-format torch"),
        )
        missing = next((what for ok, what in needs if not ok), None)
        if missing is not None:
            return flag, f"needs {missing} (validate_args asserts it, args:1066-1075)"
    fsdp_v2 = line.has("--use-megatron-fsdp") and _value(line, "--megatron-fsdp-version") == "2"
    if fsdp_v2 and line.has("--use-distributed-optimizer"):
        return "--megatron-fsdp-version", (
            "2 is not compatible with --use-distributed-optimizer (validate_args asserts it, "
            "args:1124-1126)"
        )
    return None


def _precision(line: Line) -> Problem:
    if _given(line, "--fp16-lm-cross-entropy") and not line.has("--fp16"):
        return "--fp16-lm-cross-entropy", "needs --fp16 (validate_args asserts it, args:1372-1373)"
    defer = line.has("--defer-embedding-wgrad-compute")
    if defer and line.has("--no-gradient-accumulation-fusion"):
        return "--defer-embedding-wgrad-compute", (
            "needs gradient accumulation fusion, which --no-gradient-accumulation-fusion turns "
            "off (ModelParallelConfig raises, mpc:550-553)"
        )
    optimizer = line.text("--optimizer") or "adam"
    layer_wise = optimizer == "dist_muon" or line.has("--use-distributed-optimizer")
    instances = line.integer("--num-distributed-optimizer-instances") or 1
    emerging = optimizer not in ADAM_FAMILY
    if emerging and layer_wise and instances > 1 and not line.has(NO_PARAM_LAYOUT):
        return "--num-distributed-optimizer-instances", (
            f"{instances}: {optimizer} with the distributed optimizer runs the layer-wise "
            "optimizer beside a DistributedOptimizer, which asserts one instance "
            "(megatron/core/optimizer/__init__.py:838-845; training.py:2262-2263)"
        )
    return None


NO_PARAM_LAYOUT = "--no-use-layer-wise-param-layout"


def _cuda_graphs(line: Line) -> Problem:
    if line.has("--cuda-graph-scope") and line.has("--cuda-graph-modules"):
        return "--cuda-graph-scope", (
            "cannot be combined with --cuda-graph-modules (validate_args asserts it, args:633-636)"
        )
    if line.has("--enable-cuda-graph") and line.has("--external-cuda-graph"):
        return "--external-cuda-graph", (
            "cannot be combined with --enable-cuda-graph (validate_args asserts it, args:615-617)"
        )
    return None


def _expert_overlap(line: Line) -> Problem:
    overlap = line.has("--overlap-moe-expert-parallel-comm")
    if _given(line, "--delay-wgrad-compute") and not overlap:
        return "--delay-wgrad-compute", (
            "needs --overlap-moe-expert-parallel-comm (TransformerConfig asserts it, tc:3074-3077)"
        )
    if _given(line, "--overlap-dispatch-backward-with-experts-wgrad") and overlap:
        return "--overlap-dispatch-backward-with-experts-wgrad", (
            "cannot be combined with --overlap-moe-expert-parallel-comm (TransformerConfig "
            "asserts it, tc:3084-3088)"
        )
    if _given(line, "--ep-overlap-early-attn-memory-release") and not overlap:
        return "--ep-overlap-early-attn-memory-release", (
            "needs --overlap-moe-expert-parallel-comm (TransformerConfig asserts it, tc:3097-3101)"
        )
    return None


def _dispatcher(line: Line) -> Problem:
    dispatcher = line.text("--moe-token-dispatcher-type") or "allgather"
    backend = line.text("--moe-flex-dispatcher-backend")
    for flag in ("--moe-single-grouped-weight", "--moe-single-grouped-bias"):
        if _given(line, flag) and not line.has("--moe-use-grouped-tensor"):
            return flag, "needs --moe-use-grouped-tensor (TransformerConfig raises, tc:1736-1741)"
    if _given(line, "--moe-enable-deepep"):
        if dispatcher != "flex":
            return "--moe-enable-deepep", (
                f"DeepEP runs with --moe-token-dispatcher-type flex only, not {dispatcher} "
                "(TransformerConfig raises, tc:1743-1745)"
            )
        if backend == "hybridep":
            return "--moe-enable-deepep", (
                "cannot be combined with --moe-flex-dispatcher-backend hybridep (TransformerConfig "
                "raises, tc:1746-1747)"
            )
    for flag in ("--moe-dispatch-fwd-dtype", "--moe-combine-bwd-dtype"):
        dtype = _value(line, flag) or "bf16"
        if dtype != "bf16" and (dispatcher != "flex" or backend != "ncclep"):
            return flag, (
                f"{dtype} needs --moe-token-dispatcher-type flex with "
                "--moe-flex-dispatcher-backend ncclep (TransformerConfig raises, tc:1776-1783)"
            )
        fused = line.has("--use-transformer-engine-op-fuser") and line.has("--moe-grouped-gemm")
        if dtype != "bf16" and not fused:
            return flag, (
                f"{dtype} needs --use-transformer-engine-op-fuser and --moe-grouped-gemm "
                "(TransformerConfig raises, tc:1785-1790)"
            )
    return None


def _pipeline(line: Line, vpp: int) -> Problem:
    """--overlap-p2p-communication-warmup-flush needs the p2p overlap without batched p2p
    (mpc:570-575); validate_args turns the overlap off without the interleaved schedule
    (args:1010-1012), and batch_p2p_comm is `not overlap_p2p_comm` (argument_utils.py:307)."""
    flag = "--overlap-p2p-communication-warmup-flush"
    if not _given(line, flag):
        return None
    if vpp < 2:
        return flag, (
            "needs the interleaved schedule: without a virtual pipeline validate_args turns the "
            "p2p overlap off (args:1010-1012) and ModelParallelConfig raises (mpc:570-575)"
        )
    if line.has("--no-overlap-p2p-communication"):
        return flag, (
            "needs the p2p overlap that --no-overlap-p2p-communication turns off "
            "(ModelParallelConfig raises, mpc:570-575)"
        )
    return None


def _offload(line: Line) -> Problem:
    """Fine-grained activation offloading's tuning flags, which planner does not model:
    --delta-offload-bytes-across-pp-ranks D keeps r x D bytes of offloadable groups on pipeline
    rank r's GPU (fine_grained_activation_offload.py:641-648: nothing at pp 1, nor for D <= 0);
    --min-offloaded-tensor-size N offloads only tensors of N elements or more (:1084). Refused
    where planner's peak would be too low: D > 0 at pp > 1, N above the default (a tensor
    planner counts as offloaded may stay). N at or below the default only offloads more than
    planner counts (it keeps a module below the default on the GPU): read, the GPU peak
    over-counted. Without offloading the flags change nothing."""
    if not (line.has("--fine-grained-activation-offloading") and line.words("--offload-modules")):
        return None
    pp = line.integer("--pipeline-model-parallel-size") or 1
    delta = _value(line, "--delta-offload-bytes-across-pp-ranks")
    if delta is not None and int(delta) > 0 and pp > 1:
        return "--delta-offload-bytes-across-pp-ranks", (
            f"{delta}: planner does not model it: pipeline rank r then keeps r x {delta} bytes "
            "of the activations it would offload on the GPU (fine_grained_activation_offload.py:"
            "641-648), which planner counts as offloaded; drop it to check the even offload"
        )
    least = _value(line, "--min-offloaded-tensor-size")
    if least is not None and int(least) > MIN_OFFLOADED_ELEMENTS:
        return "--min-offloaded-tensor-size", (
            f"{least}: planner does not model a threshold above Megatron's default "
            f"({MIN_OFFLOADED_ELEMENTS:,} elements): tensors below it stay on the GPU "
            "(fine_grained_activation_offload.py:1084) where planner counts them offloaded"
        )
    return None


PARSER = (
    "Megatron-LM's parser (argparse with allow_abbrev=False, no positional arguments and no "
    "fromfile_prefix_chars, arguments.py:119-120) exits on it: unrecognized arguments"
)


def refuse_unparsed(
    words: list[str], unknown: Iterable[str], trains: bool, where: str, named: bool = True
) -> None:
    """Refuses, on a line that runs one of Megatron-LM's pretrain_*.py scripts (whose parser is
    `megatron_flags`' alone, SCRIPT_FLAGS aside), what Megatron-LM's argparse rejects and the
    reader would otherwise read past (PARSER): a flag that abbreviates one of Megatron's
    (`--tensor-model-par 4`, which the reader would list as a fork's flag and drop), and a word
    between the script
    and its first flag (`pretrain_gpt.py @args.txt --num-layers ...`: no positional takes it, an
    `@file` is not read). A word that is still a shell variable or a command's output is left to
    the reader's own message (bash may expand it to flags). On one of ENTRY_POINTS, a flag the
    parser lacks (`_refuse_unknown`), unless `named` is False: the script is planner's guess."""
    script = words[0].rsplit("/", 1)[-1] if words else ""
    if not trains or not (script.startswith("pretrain_") and script.endswith(".py")):
        return  # another script's parser (train.py's extra arguments), a launcher's flags
    names = sorted(megatron_flags())
    for flag in unknown:
        full = [n for n in names if n.startswith(flag)]
        if full and flag not in SCRIPT_FLAGS | FORK_FLAGS:
            more = f" (or {len(full) - 1} more)" if len(full) > 1 else ""
            raise InputError(
                f"{where}: {flag}: abbreviates {full[0]}{more}: {PARSER}; spell the flag out"
            )
    for word in words[1:]:
        if word.startswith("--") and " " not in word.partition("=")[0]:
            break  # the first flag (`megatron_line.flag_runs`)
        if "$" not in word and "`" not in word:
            raise InputError(f"{where}: {word}: a word before the first flag: {PARSER}")
    if named:
        _refuse_unknown(script, unknown, where)


ENTRY_POINTS = {
    "pretrain_gpt.py": "pretrain_gpt.py:525-528",
    "pretrain_hybrid.py": "pretrain_hybrid.py:542-545",
    "pretrain_mamba.py": "pretrain_mamba.py:16-19 runs pretrain_hybrid.py, whose :542-545",
    "pretrain_bert.py": "pretrain_bert.py:185, in examples, bert",
    "pretrain_t5.py": "pretrain_t5.py:273, in examples, t5",
}
"""Megatron-LM's training entry points whose parser is `megatron_flags`' (no flags of their own;
pretrain_gpt.py's and pretrain_hybrid.py's add only ModelOpt's, which that table holds), and
where each calls parse_and_validate_args without ignore_unknown_args, which defaults to False
(arguments.py:88): parse_args then calls parser.parse_args() (arguments.py:129-132), which
exits on an unrecognized argument. pretrain_vlm.py and train_rl.py add flags of their own
(extra_args_provider), so their unknown words stay listed, as a fork's do."""


def _refuse_unknown(script: str, unknown: Iterable[str], where: str) -> None:
    """Refuses the first flag Megatron-LM's parser lacks on a line that runs one of
    ENTRY_POINTS, unless the line holds a known fork's flag (FORK_FLAGS: its own script of
    that name, whose parser has more), the flag is Megatron-LM's development branch's
    (DEV_BRANCH_FLAGS: the line runs that branch) or still a shell variable."""
    called = ENTRY_POINTS.get(script)
    flags = [f for f in unknown if "$" not in f and "`" not in f and f not in DEV_BRANCH_FLAGS]
    if called is None or not flags or FORK_FLAGS.intersection(unknown):
        return
    raise InputError(
        f"{where}: {flags[0]}: not a Megatron-LM flag; {script} parses its line with "
        f"ignore_unknown_args=False ({called}), so argparse exits on it: unrecognized "
        "arguments (arguments.py:129-132); drop it or use its current name"
    )
