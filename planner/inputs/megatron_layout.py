"""The layout half of a Megatron-LM command line: parallel degrees, pipeline split, ZeRO / FSDP,
DP overlap, recompute, offloading and MoE dispatch, as the plan's `[parallel]` table.

Flag meanings: Megatron-LM d98e8a64 (`megatron/training/arguments.py`, the config dataclasses;
megatron_rules.md sections 2, 6, 7, 11). Whether Megatron accepts the layout is
`planner.search.rules`; this module only says what the flags ask for, and refuses what Megatron's
parser or validate_args would refuse before a layout exists (a hierarchical CP split whose
product is not cp, an uneven split that does not divide).
"""

from __future__ import annotations

from collections import Counter
from math import prod
from typing import Any

from planner.inputs import megatron_hybrid
from planner.inputs.errors import InputError
from planner.inputs.layout import FSDP_STRATEGY
from planner.inputs.megatron_fsdp_flags import fsdp_fields
from planner.inputs.megatron_line import Line
from planner.inputs.megatron_tp_overlap import tp_comm_overlap

PARALLEL_INT = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--expert-tensor-parallel-size": "etp",
    "--micro-batch-size": "micro_batch_size",
}
LAYOUT_INT = {
    "--ddp-bucket-size": "ddp_bucket_size",
    "--ddp-num-buckets": "ddp_num_buckets",
    "--cpu-offloading-num-layers": "cpu_offloading_num_layers",
    "--microbatch-group-size-per-virtual-pipeline-stage": "microbatch_group_size_per_vp_stage",
}
"""Integer flags read as the `[parallel]` field of the same meaning, as they are."""
DISPATCHER_TEXT = {
    "--moe-token-dispatcher-type": "moe_token_dispatcher_type",
    "--moe-flex-dispatcher-backend": "moe_flex_dispatcher_backend",
}
"""The MoE dispatcher's flags, read as the `[parallel]` fields' names."""
_FSDP_STAGE = {strategy: stage for stage, strategy in FSDP_STRATEGY.items()}


def parallel(
    line: Line, num_layers: int, num_gpus: int, notes: list[str] | None = None
) -> dict[str, Any]:
    """The plan's `[parallel]` table from the line's layout flags; what it reads but does not
    model goes to `notes` (`cp_exchange`'s)."""
    where = line.where
    out: dict[str, Any] = {}
    for flag, field in PARALLEL_INT.items():
        value = line.integer(flag)
        if value is None:
            continue
        if value < 1:  # a degree or batch of none divides nothing
            raise InputError(f"{where}: {flag}: expected a positive integer (got {value})")
        out[field] = value
    tp, pp, cp = out.get("tp", 1), out.get("pp", 1), out.get("cp", 1)
    _weight_shards(line, tp, out.get("etp"))
    sizes = line.words("--hierarchical-context-parallel-sizes")
    if sizes is not None:
        split = _ints(" ".join(sizes), "--hierarchical-context-parallel-sizes", where)
        if prod(split) != cp:
            raise InputError(
                f"{where}: --hierarchical-context-parallel-sizes: their product ({prod(split)}) "
                f"must equal --context-parallel-size ({cp})"
            )
    exchange, note = cp_exchange(line, num_layers)
    if exchange is not None:
        out["cp_comm_type"] = exchange
    if note is not None and notes is not None:
        notes.append(note)
    out["sequence_parallel"] = line.has("--sequence-parallel") and tp > 1
    if tp == 1 and line.has("--tp-comm-overlap"):
        raise InputError(
            f"{where}: --tp-comm-overlap: at --tensor-model-parallel-size 1 Megatron-LM turns "
            "sequence parallelism off and then refuses TP communication overlap (validate_args); "
            "drop the flag"
        )
    out["vpp"] = _vpp(line, num_layers, pp)
    first_last = _uneven(line, num_layers, pp, out["vpp"])
    if first_last is not None:
        out["pipeline_layers"] = first_last
    hybrid = megatron_hybrid.split(line, pp, first_last is not None)
    if hybrid:  # the pattern's "|" segments: a layout, whose stages say the virtual size
        out.update(hybrid)
        del out["vpp"]
    layout = None if hybrid is not None else line.text("--pipeline-model-parallel-layout")
    if layout is not None:
        # the stages say the virtual pipeline size (planner.inputs.plan derives vpp from them)
        out["pipeline_model_parallel_layout"] = layout
        del out["vpp"]
    for part in ("embedding", "loss"):
        if line.has(f"--account-for-{part}-in-pipeline-split"):
            out[f"account_for_{part}_in_pipeline_split"] = True
    out["tp_comm_overlap"] = tp_comm_overlap(line, notes)
    out["ep_comm_overlap"] = line.has("--overlap-moe-expert-parallel-comm")
    if line.has("--no-overlap-p2p-communication"):  # arguments.py:3118-3120 (vpp 1: inert)
        out["overlap_p2p_comm"] = False
    out["moe_shared_expert_overlap"] = line.has("--moe-shared-expert-overlap")
    out["zero_stage"] = _zero_stage(line)
    if fsdp2 := line.has("--use-torch-fsdp2"):  # its buffers and traffic: planner.model.fsdp2's
        keep = line.has("--torch-fsdp2-no-reshard-after-forward")  # training.py:2627-2629
        out.update(use_torch_fsdp2=True, torch_fsdp2_reshard_after_forward=not keep)
    # What the DP traffic overlaps with. torch FSDP2 prefetches and reduces in the backward whatever
    # the flags say; with no DP (or sharded optimizer, for the gather) the plan default (true) holds
    always = fsdp2 or num_gpus <= tp * pp  # FSDP2, or dp x cp == 1
    out["overlap_grad_reduce"] = always or line.has("--overlap-grad-reduce")
    if out["zero_stage"] > 0:  # without a sharded optimizer the default is left unset
        out["overlap_param_gather"] = always or line.has("--overlap-param-gather")
    out.update(_recompute(line))
    for flag, key in LAYOUT_INT.items():
        value = line.integer(flag)
        if value is not None:
            out[key] = value
    out.update(_deferral(line))
    out.update(fsdp_fields(line))  # double buffer, unit size
    if line.has("--use-tp-pp-dp-mapping"):  # rank order tp-cp-ep-pp-dp (initialize.py:395)
        out["use_tp_pp_dp_mapping"] = True
    fine = line.words("--offload-modules")
    if line.has("--fine-grained-activation-offloading") and fine:
        out["offload_modules"] = fine
        share = line.number("--activation-offload-fraction")
        if share is not None and not 0.0 <= share <= 1.0:
            raise InputError(f"{line.where}: --activation-offload-fraction: expected 0 to 1 "
                             f"(got {share:g})")  # fmt: skip
        if share is not None:
            out["activation_offload_fraction"] = share
    for flag, key in DISPATCHER_TEXT.items():
        name = line.text(flag)
        if name is not None:
            out[key] = name
    if line.integer("--num-experts") and "moe_token_dispatcher_type" not in out:
        out["moe_token_dispatcher_type"] = MEGATRON_DEFAULT_DISPATCHER
    sms = _dispatcher_sms(line)
    if sms is not None:
        out["moe_flex_dispatcher_num_sms"] = sms
    return out


DEPRECATED_SMS_FLAGS = ("--moe-deepep-num-sms", "--moe-hybridep-num-sms")
"""Megatron's per-backend SM counts, deprecated for --moe-flex-dispatcher-num-sms and routed to
it (TransformerConfig.__post_init__ @d98e8a64: an explicit --moe-flex-dispatcher-num-sms wins;
the two set to different counts is a ValueError)."""


def _dispatcher_sms(line: Line) -> int | None:
    """The flex dispatcher's SM count as Megatron routes its three flags (DEPRECATED_SMS_FLAGS);
    a count below 1 is refused (planner models a kernel on that many SMs)."""
    given = {f: v for f in DEPRECATED_SMS_FLAGS if (v := line.integer(f)) is not None}
    sms = line.integer("--moe-flex-dispatcher-num-sms")
    flag = "--moe-flex-dispatcher-num-sms"
    if sms is None and given:
        if len(set(given.values())) > 1:
            counts = ", ".join(f"{f} {v}" for f, v in given.items())
            raise InputError(
                f"{line.where}: {counts}: conflicting SM counts for the flex dispatcher (Megatron "
                "refuses them too); set one --moe-flex-dispatcher-num-sms"
            )
        flag, sms = next(iter(given.items()))
    if sms is not None and sms < 1:
        raise InputError(f"{line.where}: {flag}: expected 1 or more SMs (got {sms})")
    return sms


def _deferral(line: Line) -> dict[str, Any]:
    """--defer-embedding-wgrad-compute and its --wgrad-deferral-limit, a negative limit refused
    as Megatron's ModelParallelConfig refuses it (model_parallel_config.py d98e8a64
    `__post_init__`; pp = 1 is a rule of the plan: `planner.search.rules`)."""
    if not line.has("--defer-embedding-wgrad-compute"):
        return {}
    limit = line.integer("--wgrad-deferral-limit")
    if limit is not None and limit < 0:
        raise InputError(f"{line.where}: --wgrad-deferral-limit: expected 0 or more (got {limit})")
    out: dict[str, Any] = {"defer_embedding_wgrad_compute": True}
    if limit:
        out["wgrad_deferral_limit"] = limit
    return out


MEGATRON_DEFAULT_DISPATCHER = "allgather"
"""Megatron's token dispatcher where a line names none (TransformerConfig
moe_token_dispatcher_type = "allgather", transformer_config.py:891 @ d98e8a64;
benchmarks/data/megatron_rules.md section 1), not the plan file's default (alltoall)."""


CP_EXCHANGES = ("p2p", "a2a", "all_gather", "a2a+p2p")
"""The values Transformer Engine takes for cp_comm_type (attn_forward_func_with_cp raises
"Unsupported communication type" on any other; Megatron passes --cp-comm-type to it as spelt,
so the help text's "allgather" is refused at the first attention)."""


def cp_exchange(line: Line, num_layers: int) -> tuple[str | None, str | None]:
    """(The plan's cp_comm_type, a not-modelled note or None) from --cp-comm-type: one value for
    every layer, or one per decoder layer (Megatron's TransformerConfig asserts the count). A
    per-layer mix is read as its most common type and the hierarchical a2a+p2p as the p2p ring,
    each with a note; (None, None) without the flag."""
    kinds = line.words("--cp-comm-type")
    if not kinds:
        return None, None
    flag = "--cp-comm-type"
    bad = next((k for k in kinds if k not in CP_EXCHANGES), None)
    if bad is not None:
        raise InputError(
            f"{line.where}: {flag}: {bad!r} is not an exchange Transformer Engine runs "
            f"({', '.join(CP_EXCHANGES)}; Megatron-LM passes the value on as spelt)"
        )
    if len(kinds) > 1 and len(kinds) != num_layers:
        raise InputError(
            f"{line.where}: {flag}: {len(kinds)} values; give one, or one per decoder layer "
            f"({num_layers})"
        )
    common = Counter(kinds).most_common(1)[0][0]
    note = None
    if len(set(kinds)) > 1:
        note = f"{flag}: a per-layer mix is timed as its most common type, {common}"
    if common == "a2a+p2p":
        note, common = f"{flag}: the hierarchical a2a+p2p exchange is timed as the p2p ring", "p2p"
    return common, note


def _ints(value: str, flag: str, where: str) -> list[int]:
    parts = value.replace(",", " ").split()
    if not parts or not all(p.isdecimal() for p in parts):
        raise InputError(f"{where}: {flag}: expected integers (got {value!r})")
    return [int(p) for p in parts]


def _vpp(line: Line, num_layers: int, pp: int) -> int:
    """The virtual pipeline size, as Megatron-LM's validate_args derives it: the stages per rank
    as given, else the layers per rank over the layers per virtual stage, where the layers per
    rank count the embedding and the loss as one layer each under
    --account-for-{embedding,loss}-in-pipeline-split (both must divide evenly)."""
    stages = line.integer("--num-virtual-stages-per-pipeline-rank")
    flags = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")
    given = [f for f in (*flags, "--pipeline-model-parallel-layout") if line.has(f)]
    if len(given) > 1:
        raise InputError(
            f"{line.where}: {given[1]}: cannot be combined with {given[0]} (validate_args "
            "asserts no more than one of them)"
        )
    if stages is not None:
        return stages
    flag = "--num-layers-per-virtual-pipeline-stage"
    per = line.integer(flag)
    if per is None:
        return 1
    if per < 1:
        raise InputError(f"{line.where}: {flag}: expected a positive integer (got {per})")
    if line.has("--decoder-first-pipeline-num-layers") or line.has(
        "--decoder-last-pipeline-num-layers"
    ):
        raise InputError(
            f"{line.where}: {flag}: cannot be combined with --decoder-first/last-pipeline-num-"
            "layers; Megatron-LM asks for --num-virtual-stages-per-pipeline-rank there"
        )
    counted = num_layers + sum(
        line.has(f"--account-for-{part}-in-pipeline-split") for part in ("embedding", "loss")
    )
    if counted % pp or (counted // pp) % per:
        raise InputError(
            f"{line.where}: {flag}: {per} does not divide the {counted} / {pp} layers of a "
            "pipeline rank (the decoder layers, plus one each for an embedding or loss counted "
            "by --account-for-...-in-pipeline-split)"
        )
    return counted // pp // per


def _weight_shards(line: Line, tp: int, etp: int | None) -> None:
    """Refuses generalized tensor parallelism: --tensor-parallel-num-weight-shards (and the
    expert one) above the TP size shard the weights over another axis that counts toward the
    model-parallel size, so data parallelism is world / (tp x pp x cp x shards / tp)
    (arguments.py, model_parallel_config.py resolve_tensor_parallel_weight_shards, d98e8a64),
    with weights re-materialized per layer: planner models neither. The shards at the TP size
    (or unset) are plain TP."""
    for flag, size in (
        ("--tensor-parallel-num-weight-shards", tp),
        ("--expert-tensor-parallel-num-weight-shards", tp if etp is None else etp),
    ):
        shards = line.integer(flag)
        if shards is not None and shards != size:
            raise InputError(
                f"{line.where}: {flag}: {shards}: planner does not model weight shards beyond "
                f"the tensor-parallel size ({size}): Megatron then shards the weights over "
                f"another axis ({shards} / {size}) that divides the data-parallel size"
            )


def _uneven(line: Line, num_layers: int, pp: int, vpp: int) -> tuple[int, ...] | None:
    """Layers per pipeline rank from --decoder-first/last-pipeline-num-layers, as
    TransformerConfig d98e8a64 checks them: each given one positive and a multiple of the
    virtual size; middle layers and middle ranks both zero or both not, the middle layers
    dividing evenly over the middle ranks."""
    first_f, last_f = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    first, last = line.integer(first_f), line.integer(last_f)
    if first is None and last is None:
        return None
    if pp < 2:
        raise InputError(f"{line.where}: {first_f}: needs --pipeline-model-parallel-size > 1")
    for flag, value in ((first_f, first), (last_f, last)):
        if value is not None and (value <= 0 or value % vpp):
            raise InputError(
                f"{line.where}: {flag}: {value}: must be positive"
                + (f" and a multiple of the virtual pipeline size ({vpp})" if vpp > 1 else "")
                + " (TransformerConfig raises)"
            )
    ends = (first is not None) + (last is not None)
    middle_ranks = pp - ends
    rest = num_layers - (first or 0) - (last or 0)
    if rest < 0 or bool(rest) != bool(middle_ranks) or (middle_ranks and rest % middle_ranks):
        raise InputError(
            f"{line.where}: {first_f}: the middle layers ({rest}) must divide evenly over the "
            f"{middle_ranks} middle pipeline ranks (none over none)"
        )
    layers = [rest // middle_ranks if middle_ranks else 0] * pp
    if first is not None:
        layers[0] = first
    if last is not None:
        layers[-1] = last
    return tuple(layers)


def _zero_stage(line: Line) -> int:
    """ZeRO 1 for the distributed optimizer, and for --optimizer dist_muon, which validate_args
    (Megatron-LM d98e8a64 arguments.py:1727-1736) makes muon with the layer-wise distributed
    optimizer, as --optimizer muon --use-distributed-optimizer is (training.py:2262-2263 gives
    both the distributed optimizer's sharded layout); 2 or 3 under FSDP (torch FSDP2's: 3)."""
    if line.has("--use-torch-fsdp2"):
        return 3
    if line.has("--use-megatron-fsdp"):
        value = line.text("--data-parallel-sharding-strategy") or "optim_grads_params"
        if value not in _FSDP_STAGE:
            raise InputError(
                f"{line.where}: --data-parallel-sharding-strategy: unknown {value!r} "
                f"(Megatron-LM accepts {', '.join(_FSDP_STAGE)})"
            )
        return _FSDP_STAGE[value]
    distributed = line.has("--use-distributed-optimizer")  # forced on by Megatron-FSDP v1
    return 1 if distributed or line.text("--optimizer") == "dist_muon" else 0


def _recompute(line: Line) -> dict[str, Any]:
    """Megatron's recompute flags as the plan's recompute fields: selective with its module list
    (Megatron's default ["core_attn"]), full with its method and layer count. As Megatron-LM
    d98e8a64 does: --recompute-activations makes the granularity selective whatever
    --recompute-granularity says (arguments.py); selective takes neither --recompute-method
    (validate_args asserts) nor --recompute-num-layers, full needs both (TransformerConfig
    raises); the deprecated --moe-layer-recompute is selective recompute with "moe" added to the
    modules, and refused with full recompute; --checkpoint-activations makes Megatron exit.
    --recompute-modules without selective recompute is passed on, for the plan to read as
    Megatron does (`plan_layout._recompute_modules`)."""
    if line.has("--checkpoint-activations"):
        raise InputError(
            f"{line.where}: --checkpoint-activations: Megatron-LM exits on it (no longer valid): "
            "use --recompute-activations or --recompute-granularity"
        )
    granularity = line.text("--recompute-granularity") or ""
    if line.has("--recompute-activations"):
        granularity = "selective"  # arguments.py overrides --recompute-granularity with it
    moe_layer = line.has("--moe-layer-recompute")
    # modules without selective recompute: Megatron reads them as unread (`plan_layout`)
    given = line.words("--recompute-modules")
    unread = {"recompute_modules": given} if given else {}
    method = line.text("--recompute-method")
    layers = line.integer("--recompute-num-layers")
    if granularity == "full":
        if moe_layer:
            raise InputError(
                f"{line.where}: --moe-layer-recompute: Megatron refuses it with "
                "--recompute-granularity full"
            )
        missing = next(
            (f for f, v in (("--recompute-method", method), ("--recompute-num-layers", layers))
             if v is None),
            None,
        )  # fmt: skip
        if missing is not None:
            raise InputError(
                f"{line.where}: {missing}: not given; full recompute needs --recompute-method "
                "(uniform or block) and --recompute-num-layers (TransformerConfig raises)"
            )
        return {"recompute": "full", "recompute_method": method, "recompute_num_layers": layers,
                **unread}  # fmt: skip
    if granularity == "selective" or moe_layer:
        for flag, value in (("--recompute-method", method), ("--recompute-num-layers", layers)):
            if value is not None:
                raise InputError(
                    f"{line.where}: {flag}: {value}: Megatron takes it with full recompute only "
                    "(selective recompute: validate_args / TransformerConfig refuse it"
                    + (", and --recompute-activations makes the recompute selective)"
                       if line.has("--recompute-activations") else ")")
                )  # fmt: skip
        modules = line.words("--recompute-modules") or ["core_attn"]
        if moe_layer and "moe" not in modules:
            modules = [*modules, "moe"]
        return {"recompute": "selective", "recompute_modules": modules}
    return {"recompute": "none", **unread}
