"""Read an existing Megatron-LM command line or launch script into a plan document.

Teams gate the launch scripts they already have: `planner check --megatron-args train.sh --gpu
h100-sxm-80gb --num-gpus 1024`. The text is split like a shell would (comments, quotes and line
continuations), simple `NAME=value` assignments are substituted into `$NAME` / `${NAME}`, and the
flags that decide memory (model shape, parallel sizes, batch, recompute, distributed optimizer,
precision, MoE, GQA, MLA) become a plan document for `planner.inputs.plan.parse_plan`. Flags
that do not change memory are ignored; a parallelism flag planner does not know is an error,
since it could change the layout. Flag names: Megatron-LM `megatron/training/arguments.py`
(NVIDIA/Megatron-LM d98e8a64).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.files import read_file, read_text
from planner.inputs.layout import FSDP_STRATEGY

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")

# flag -> ModelArch field (integer valued)
MODEL_INT = {
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels",
    "--vocab-size": "vocab_size",
    "--padded-vocab-size": "vocab_size",
    "--make-vocab-size-divisible-by": "make_vocab_size_divisible_by",
    "--max-position-embeddings": "max_position_embeddings",
    "--num-experts": "num_moe_experts",
    "--moe-router-topk": "moe_router_topk",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--q-lora-rank": "q_lora_rank",
    "--kv-lora-rank": "kv_lora_rank",
    "--qk-head-dim": "qk_head_dim",
    "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim",
    "--v-head-dim": "v_head_dim",
    "--mtp-num-layers": "mtp_num_layers",
}
# flag -> ModelArch field set to a constant
MODEL_SWITCH: dict[str, tuple[str, Any]] = {
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", True),
    "--disable-bias-linear": ("add_bias_linear", False),
    "--add-qkv-bias": ("add_qkv_bias", True),
    "--qk-layernorm": ("qk_layernorm", True),
    "--multi-latent-attention": ("multi_latent_attention", True),
}
PARALLEL_INT = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--expert-tensor-parallel-size": "etp",
    "--micro-batch-size": "micro_batch_size",
}
# parallelism flags read below by hand
PARALLEL_READ = {
    "--sequence-parallel",
    "--tp-comm-overlap",
    "--overlap-moe-expert-parallel-comm",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--use-torch-fsdp2",
    "--data-parallel-sharding-strategy",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--moe-token-dispatcher-type",
    "--moe-flex-dispatcher-backend",
}
# parallelism flags that are understood but do not change the memory model's inputs
PARALLEL_IGNORED = {
    "--no-overlap-p2p-communication",
    "--overlap-param-gather-with-optimizer-step",
    "--distributed-backend",
    "--num-distributed-optimizer-instances",
    "--ddp-bucket-size",
    "--ddp-num-buckets",
    "--ddp-average-in-collective",
    "--ddp-pad-buckets-for-high-nccl-busbw",
    "--cp-comm-type",
    "--moe-grouped-gemm",
    "--moe-permute-fusion",
    "--moe-shared-expert-overlap",
    "--data-parallel-random-init",
}
# a flag with one of these words that is in none of the three tables is an error
_PARALLEL_WORDS = ("parallel", "pipeline", "fsdp", "expert-model", "virtual-stage", "zero")
_PARALLEL_KNOWN = set(PARALLEL_INT) | PARALLEL_READ | PARALLEL_IGNORED
_FSDP_STAGE = {strategy: stage for stage, strategy in FSDP_STRATEGY.items()}


def tokens(text: str) -> list[str]:
    """Shell-like words of a script: comments dropped, `\\` continuations joined, simple
    `NAME=value` assignments substituted into later `$NAME` / `${NAME}`."""
    env: dict[str, str] = {}
    words: list[str] = []

    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1) or m.group(2), m.group(0))

    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        m = _ASSIGN.match(line)
        if m:
            env[m.group(1)] = m.group(2).strip("\"'")
            continue
        try:
            words += shlex.split(_VAR.sub(sub, line), comments=True)
        except ValueError as e:
            raise InputError(f"cannot split the line {line.strip()!r}: {e}") from None
    return words


def _flags(words: list[str]) -> dict[str, list[str]]:
    """--flag -> the values that follow it (up to the next --flag); --a=b is split too."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for w in words:
        if w.startswith("--"):
            name, _, value = w.partition("=")
            current = name
            out[current] = [value] if value else []
        elif current is not None:
            out[current].append(w)
    return out


def _int(flags: dict[str, list[str]], flag: str, where: str) -> int:
    vals = flags[flag]
    if not vals:
        raise InputError(f"{where}: {flag}: expected an integer value (got nothing)")
    try:
        return int(vals[0])
    except ValueError:
        raise InputError(f"{where}: {flag}: expected an integer (got {vals[0]!r})") from None


def _float(flags: dict[str, list[str]], flag: str, where: str) -> float:
    value = flags[flag][0]
    try:
        return float(value)
    except ValueError:
        raise InputError(f"{where}: {flag}: expected a number (got {value!r})") from None


def _layer_freq(value: str, where: str) -> int | list[int]:
    """--moe-layer-freq: an int, or a Python-list expression like "[0]*3+[1]*58"."""
    if re.fullmatch(r"\d+", value):
        return int(value)
    out: list[int] = []
    for part in value.replace(" ", "").split("+"):
        m = re.fullmatch(r"\[([01](?:,[01])*)\](?:\*(\d+))?", part)
        if not m:
            raise InputError(f"{where}: --moe-layer-freq: cannot read {value!r}")
        items = [int(x) for x in m.group(1).split(",")]
        out += items * int(m.group(2) or 1)
    return out


def to_plan(text: str, gpu: str, num_gpus: int, where: str = "<megatron-args>") -> dict[str, Any]:
    """A plan document (as `planner.inputs.plan.parse_plan` takes) from Megatron-LM arguments."""
    flags = _flags(tokens(text))
    get = partial(_int, flags, where=where)
    model: dict[str, Any] = {}
    for flag, field in MODEL_INT.items():
        if flag in flags:
            model[field] = get(flag)
    for flag, (field, value) in MODEL_SWITCH.items():
        if flag in flags:
            model[field] = value
    if "--group-query-attention" not in flags:
        model.pop("num_query_groups", None)  # Megatron ignores it without the switch
    if "--swiglu" in flags:
        model.update(gated_linear_unit=True, activation="swiglu")
    elif "--squared-relu" in flags:
        model["activation"] = "squared_relu"
    if flags.get("--normalization"):
        model["normalization"] = flags["--normalization"][0]
    if flags.get("--position-embedding-type"):
        model["position_embedding_type"] = flags["--position-embedding-type"][0]
    else:  # Megatron's default (arguments.py): learned absolute position embeddings
        model["position_embedding_type"] = "learned_absolute"
    if flags.get("--moe-layer-freq"):
        model["moe_layer_freq"] = _layer_freq(flags["--moe-layer-freq"][0], where)
    for required in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if required not in model:
            flag = next(f for f, v in MODEL_INT.items() if v == required)
            raise InputError(f"{where}: {flag}: required to size the model, but not given")
    model.setdefault("ffn_hidden_size", _default_ffn(model))

    unknown = [
        f for f in flags if any(w in f for w in _PARALLEL_WORDS) and f not in _PARALLEL_KNOWN
    ]
    if unknown:
        raise InputError(f"{where}: {unknown[0]}: unknown parallelism flag")

    parallel: dict[str, Any] = {}
    for flag, field in PARALLEL_INT.items():
        if flag in flags:
            parallel[field] = get(flag)
    tp, pp = parallel.get("tp", 1), parallel.get("pp", 1)
    parallel["sequence_parallel"] = "--sequence-parallel" in flags and tp > 1
    parallel["vpp"] = _vpp(flags, model["num_layers"], pp, get)
    first_last = _uneven(flags, model["num_layers"], pp, get, where)
    if first_last is not None:
        parallel["pipeline_layers"] = first_last
    if flags.get("--pipeline-model-parallel-layout"):
        # the stages say the virtual pipeline size (planner.inputs.plan derives vpp from them)
        parallel["pipeline_model_parallel_layout"] = flags["--pipeline-model-parallel-layout"][0]
        del parallel["vpp"]
    for part in ("embedding", "loss"):
        if f"--account-for-{part}-in-pipeline-split" in flags:
            parallel[f"account_for_{part}_in_pipeline_split"] = True
    parallel["tp_comm_overlap"] = "--tp-comm-overlap" in flags
    parallel["ep_comm_overlap"] = "--overlap-moe-expert-parallel-comm" in flags
    parallel["zero_stage"] = _zero_stage(flags, where)
    # What the DP traffic overlaps with. torch FSDP2 prefetches and reduces in the backward
    # whatever the flags say; with no data parallelism (or, for the parameter all-gather, no
    # sharded optimizer) there is no such traffic and the plan default (true) is kept.
    always = "--use-torch-fsdp2" in flags or num_gpus <= tp * pp  # FSDP2, or dp x cp == 1
    parallel["overlap_grad_reduce"] = always or "--overlap-grad-reduce" in flags
    no_gather = parallel["zero_stage"] == 0
    parallel["overlap_param_gather"] = always or no_gather or "--overlap-param-gather" in flags
    parallel.update(_recompute(flags, get))
    if "--cpu-offloading-num-layers" in flags:
        parallel["cpu_offloading_num_layers"] = get("--cpu-offloading-num-layers")
    if "--microbatch-group-size-per-virtual-pipeline-stage" in flags:
        group = get("--microbatch-group-size-per-virtual-pipeline-stage")
        parallel["microbatch_group_size_per_vp_stage"] = group
    for flag, key in (
        ("--moe-token-dispatcher-type", "moe_token_dispatcher_type"),
        ("--moe-flex-dispatcher-backend", "moe_flex_dispatcher_backend"),
    ):
        if flags.get(flag):
            parallel[key] = flags[flag][0]

    if "--seq-length" not in flags:
        raise InputError(f"{where}: --seq-length: required, but not given")
    training: dict[str, Any] = {"seq_length": get("--seq-length")}
    # Megatron requires --max-position-embeddings; a script without it is read as seq_length
    model.setdefault("max_position_embeddings", training["seq_length"])
    mbs = parallel.get("micro_batch_size", 1)
    if "--global-batch-size" in flags:
        training["global_batch_size"] = get("--global-batch-size")
    else:  # Megatron's default: one micro-batch per data-parallel rank
        model_size = tp * pp * parallel.get("cp", 1)
        training["global_batch_size"] = mbs * max(num_gpus // model_size, 1)
    fp8 = "--fp8-format" in flags or "--fp8" in flags
    training["precision"] = "fp8" if fp8 else "bf16"
    if fp8:
        training["fp8_param_gather"] = "--fp8-param-gather" in flags
        if flags.get("--fp8-recipe"):
            training["fp8_recipe"] = flags["--fp8-recipe"][0]
    for flag in ("--moe-router-num-groups", "--moe-router-group-topk"):
        if flag in flags:
            training[flag[2:].replace("-", "_")] = get(flag)
    if flags.get("--moe-expert-capacity-factor"):
        training["moe_expert_capacity_factor"] = _float(
            flags, "--moe-expert-capacity-factor", where
        )
    if "--moe-pad-expert-input-to-capacity" in flags:
        training["moe_pad_expert_input_to_capacity"] = True
    if "--grad-reduce-in-bf16" in flags:
        training["main_grad_dtype"] = "bf16"
    if "--use-precision-aware-optimizer" in flags:
        # both moments in 16 bits (each defaults to fp32)
        moments = [
            (flags.get(f) or ["fp32"])[-1] for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype")
        ]
        if all(m in ("bf16", "fp16") for m in moments):
            training["optimizer_state_dtype"] = "bf16"
    return {
        "model": model,
        "cluster": {"gpu": gpu, "num_gpus": num_gpus},
        "training": training,
        "parallel": parallel,
    }


def _default_ffn(model: dict[str, Any]) -> int:
    """Megatron's default ffn_hidden_size: 4h, or int(4h x 2/3 / 64) x 64 with --swiglu."""
    h = int(model["hidden_size"])
    if model.get("gated_linear_unit"):
        return int(4 * h * 2 / 3 / 64) * 64
    return 4 * h


def _vpp(flags: dict[str, list[str]], L: int, pp: int, get: Callable[[str], int]) -> int:
    if "--num-virtual-stages-per-pipeline-rank" in flags:
        return get("--num-virtual-stages-per-pipeline-rank")
    if "--num-layers-per-virtual-pipeline-stage" in flags:
        per = get("--num-layers-per-virtual-pipeline-stage")
        return max(L // pp // max(per, 1), 1)
    return 1


def _uneven(
    flags: dict[str, list[str]], L: int, pp: int, get: Callable[[str], int], where: str
) -> tuple[int, ...] | None:
    first_f, last_f = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    if first_f not in flags and last_f not in flags:
        return None
    if pp < 2:
        raise InputError(f"{where}: {first_f}: needs --pipeline-model-parallel-size > 1")
    first = get(first_f) if first_f in flags else None
    last = get(last_f) if last_f in flags else None
    ends = (first is not None) + (last is not None)
    middle_ranks = pp - ends
    rest = L - (first or 0) - (last or 0)
    if middle_ranks == 0 or rest % middle_ranks or rest < 0:
        raise InputError(
            f"{where}: {first_f}: the middle layers ({rest}) must divide evenly over the "
            f"{middle_ranks} middle pipeline ranks"
        )
    each = rest // middle_ranks
    layers = [each] * pp
    if first is not None:
        layers[0] = first
    if last is not None:
        layers[-1] = last
    return tuple(layers)


def _zero_stage(flags: dict[str, list[str]], where: str) -> int:
    if "--use-torch-fsdp2" in flags:
        return 3
    if "--use-megatron-fsdp" in flags:
        value = (flags.get("--data-parallel-sharding-strategy") or ["optim_grads_params"])[0]
        if value not in _FSDP_STAGE:
            raise InputError(f"{where}: --data-parallel-sharding-strategy: unknown {value!r}")
        return _FSDP_STAGE[value]
    return 1 if "--use-distributed-optimizer" in flags else 0


def _recompute(flags: dict[str, list[str]], get: Callable[[str], int]) -> dict[str, Any]:
    """Megatron's recompute flags as the plan's recompute fields: selective with its module list
    (Megatron's default ["core_attn"]), full with its method and layer count."""
    granularity = (flags.get("--recompute-granularity") or [""])[0]
    if granularity == "full":
        out: dict[str, Any] = {"recompute": "full"}
        if flags.get("--recompute-method"):
            out["recompute_method"] = flags["--recompute-method"][0]
        if "--recompute-num-layers" in flags:
            out["recompute_num_layers"] = get("--recompute-num-layers")
        return out
    if granularity == "selective" or "--recompute-activations" in flags:
        modules = flags.get("--recompute-modules") or ["core_attn"]
        return {"recompute": "selective", "recompute_modules": modules}
    return {"recompute": "none"}


def load(path: str, gpu: str, num_gpus: int) -> tuple[dict[str, Any], str]:
    """Read a file (or '-' for standard input) of Megatron-LM arguments into a plan document;
    also returns how messages name the source."""
    where = "<stdin>" if path == "-" else path
    text = read_text(sys.stdin, where) if path == "-" else read_file(Path(path))
    return to_plan(text, gpu, num_gpus, where), where
