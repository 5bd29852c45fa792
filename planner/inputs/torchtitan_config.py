"""A torchtitan job config TOML (the one `planner launch --target torchtitan` writes) read back
into a plan document: `planner check --torchtitan-config FILE [--gpu G]`; a Python configuration
(FILE.py[:FUNCTION], torchtitan since 9810191b) is read by `planner.inputs.torchtitan_module`
into the same tables first.

Field names: torchtitan/config/job_config.py at planner.inputs.torchtitan.TORCHTITAN_COMMIT; a
name it lacks, or a field planner does not model off its default, is refused
(`planner.inputs.torchtitan_toml`). What the TOML says is read into the plan (the degrees, the
batch and micro-batch, the schedule and its stages from module_fqns_per_model_part, activation
checkpointing, compile of the model and of the loss, float8, the FSDP policy); the training-code
knobs it has no field for take torchtitan's defaults, as in a plan that leaves them out. The GPU
is --gpu, else the `# planner-gpu:` header line planner writes; the GPU count the product of the
degrees.

A TOML is read as e347b1e5 runs it: what that torchtitan raises on exits 2 naming the field
(`torchtitan_toml.era_refusal`, DeepSeek's DeepEP without EP or with expert TP), DeepEP for a
model whose parallelize ignores it is the all-to-all, and float8's filter_fqns decides the
precision (`torchtitan_float8.float8_filter`), the grouped float8 converter's fqns whether the
routed experts are float8 (`[torchtitan] float8_experts`, `torchtitan_float8.float8_experts`; the
linear filter leaves the experts in bf16). Under pipelining a step of more than one
gradient-accumulation step, each one pipeline schedule, reads in either form as `[torchtitan]
gradient_accumulation_steps` (`torchtitan_pipeline.batches`, which reads the batches, the
schedule and the stages). What is read otherwise than the file says is noted (`Plan.inert`,
written as warnings).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.inputs import catalog, torchtitan_float8, torchtitan_keys, torchtitan_toml
from planner.inputs import torchtitan_refusals as refusals
from planner.inputs.errors import InputError, spelled
from planner.inputs.files import parse_toml, read_file
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.torchtitan import COMPILE_LOSS_KEY, MODELS, MOE_MODELS, check_reduce_dtype
from planner.inputs.torchtitan_degrees import degree, degrees
from planner.inputs.torchtitan_pipeline import batches, get, pipeline

FLAVORS = {v: k for k, v in MODELS.items()}
GPU_LINE = re.compile(r"^# planner-gpu: (\S+)$", re.MULTILINE)
Notes = list[tuple[str, str]]


UNTIMED = (
    "deterministic attention is planned as SDPA's FlashAttention-2 with its split fp32 dQ "
    "accumulator (PyTorch refuses cuDNN attention then); not timed: that split's reduction, and "
    "FlexAttention's deterministic path, which DeepSeek-V3 and gpt-oss run"
)
"""The note on debug.deterministic: what of its attention planner does not model
(`planner.model.titan_sdpa`)."""


def _module(path: Path) -> tuple[Path, str | None] | None:
    """FILE.py or FILE.py:FUNCTION as (file, function), else None (a TOML)."""
    name, _, function = path.name.partition(":")
    if not name.endswith(".py"):
        return None
    return path.with_name(name), function or None


def read(path: Path, gpu: str | None, num_gpus: int | None) -> dict[str, Any]:
    """The plan document (as a plan file's tables) the TOML, or the Python configuration
    (`planner.inputs.torchtitan_module`, FILE.py[:FUNCTION]), describes."""
    return _read(path, gpu, num_gpus)[0]


def _read(
    path: Path, gpu: str | None, num_gpus: int | None, text: str | None = None
) -> tuple[dict[str, Any], Notes]:
    """The plan document and the notes on what it reads otherwise than the file says
    ((field, message), as `Plan.inert`); `text`, a TOML's text to read in place of the file's
    (`planner check`'s fixes, read back: `planner.inputs.line_edits`)."""
    where = str(path)
    notes: Notes = []
    module = _module(path)
    if module is not None:
        from planner.inputs import torchtitan_module  # ast and the baselines: only here

        doc, text, notes = torchtitan_module.read(*module)
        return _document(doc, text, str(module[0]), gpu, num_gpus, notes, False), notes
    if text is None:
        text = read_file(path)  # at most files.MAX_INPUT_CHARS, a regular file or a device
    doc = parse_toml(text, where)
    torchtitan_toml.check_fields(doc, where)
    training = doc.get("training")
    if isinstance(training, dict):
        field = "training.mixed_precision_reduce"
        check_reduce_dtype(training.get("mixed_precision_reduce"), where, field)
    compile_ = doc.get("compile")
    if isinstance(compile_, dict):
        parts = compile_.get("components", ["model", "loss"])
        if not isinstance(parts, list) or not all(isinstance(x, str) for x in parts):
            raise InputError(
                f"{where}: compile.components: expected a list of names (got {spelled(parts)})"
            )
        on = get(doc, where, "compile", "enable", bool, False)
        backend = compile_.get("backend", refusals.FUSING_BACKEND)
        # the loss compiled on its own (e347b1e5 components/loss.py:33-35): fused by inductor
        # alone (another backend's loss reads as eager, the larger); planner's key, read back
        # as [torchtitan] compile_loss (`_document`)
        loss = on and "loss" in parts and backend == refusals.FUSING_BACKEND
        compile_ = {**compile_, COMPILE_LOSS_KEY: loss}
        doc = {**doc, "compile": compile_}
        if "model" not in parts:  # the loss alone compiled: the model runs eager
            doc = {**doc, "compile": {**compile_, "enable": False}}
        elif on:  # e347b1e5 parallelize.py:262-264 passes backend
            said = refusals.compile_backend(where, "compile.backend", backend, False)
            if said is not None:  # nothing fused: as compile off, async TP (inductor's) too
                notes.append(("compile.backend", said))
                par = {**doc.get("parallelism", {}), "enable_async_tensor_parallel": False}
                doc = {**doc, "compile": {**compile_, "enable": False}, "parallelism": par}
    return _document(doc, text, where, gpu, num_gpus, notes, True), notes


def _document(
    doc: dict[str, Any],
    text: str,
    where: str,
    gpu: str | None,
    num_gpus: int | None,
    notes: Notes,
    toml: bool,
) -> dict[str, Any]:
    """The plan document of a torchtitan TOML's tables (`text` the file, for its GPU line;
    `toml`: a TOML file, read as e347b1e5 runs it, else a Python configuration's tables)."""
    if gpu is None:
        found = GPU_LINE.search(text)
        if found is None:
            raise InputError(f"--torchtitan-config: {where} names no GPU; give --gpu NAME")
        gpu = found.group(1)
    name = get(doc, where, "model", "name", str, "llama3")
    flavor = get(doc, where, "model", "flavor", str, "debugmodel")
    if (name, flavor) not in FLAVORS:
        known = ", ".join(f"{n} {f}" for n, f in FLAVORS)
        raise InputError(f"{where}: model.flavor: planner knows no {name} {flavor!r} ({known})")

    def par(key: str, default: Any, kind: type = int) -> Any:
        return get(doc, where, "parallelism", key, kind, default)

    d = degrees(doc, where, num_gpus)
    rep, shard, tp, pp, cp = d["rep"], d["shard"], d["tp"], d["pp"], d["cp"]
    seq = get(doc, where, "training", "seq_len", int, 2048)
    if toml:
        ep = degree(doc, where, "expert_parallel_degree")
        torchtitan_toml.era_refusal(where, name, {**d, "ep": ep}, seq)
        refusals.toml_era(where, doc, pp, ep)
    else:
        refusals.symm_mem(where, doc["parallelism"].get("enable_fsdp_symm_mem"), gpu)
    balancer = doc.get("parallelism", {}).get("context_parallel_load_balancer", "headtail")
    if balancer == "":  # job_config.py:439-444 at e347b1e5, configs.py:265-269 at b5bcd76c
        raise InputError(
            f'{where}: parallelism.context_parallel_load_balancer: "": torchtitan raises '
            "'cannot be an empty string' (ParallelismConfig.__post_init__); None turns it off"
        )
    if cp > 1 and balancer not in ("headtail", "ptrr", None):
        # any other name raises when CP shards (distributed/context_parallel.py:206-209 at
        # e347b1e5, distributed/context_parallel/api.py:181-184 at b5bcd76c);
        # "ptrr" (FlexAttention's balancer) balances a causal mask as headtail does
        raise InputError(
            f"{where}: parallelism.context_parallel_load_balancer: {balancer!r}: torchtitan "
            "raises 'Invalid load_balancer_type' (one of 'headtail', 'ptrr', or None)"
        )
    if toml and cp > 1:
        rotate = par("context_parallel_rotate_method", "allgather", str)
        if rotate != "allgather":
            notes.append((torchtitan_toml.ROTATE, torchtitan_toml.rotate_note(rotate)))
    dp = rep * shard
    mbs = par("pipeline_parallel_microbatch_size", 1) if pp > 1 else 0
    local, gbs, schedules = batches(doc, where, dp, pp, mbs, toml)
    converters = get(doc, where, "model", "converters", list, [])
    training: dict[str, Any] = {
        "framework": "torchtitan",
        "seq_length": seq,
        "global_batch_size": gbs,
        "precision": torchtitan_float8.precision(converters, where),
    }
    if par("disable_loss_parallel", False, bool):
        training["cross_entropy"] = "gathered"
    if get(doc, where, "debug", "deterministic", bool, False):
        training["deterministic"] = True
    if get(doc, where, "debug", "moe_force_load_balance", bool, False):
        ignored = _force_balance(name, toml)
        if ignored is None:
            training["moe_router_force_load_balancing"] = True  # round-robin routing
        else:
            notes.append(("debug.moe_force_load_balance" if toml else FORCE_FIELD, ignored))
    if get(doc, where, "optimizer", "state_dtype", str, "fp32") == "bf16":
        training["optimizer_state_dtype"] = "bf16"  # fused_opt_states_bf16 (b5bcd76c)
    titan: dict[str, Any] = {
        "reshard_after_forward": par("fsdp_reshard_after_forward", "default", str),
        "dp_replicate": rep,
        # torchtitan turns async TP on only where tp > 1 (llama3/infra/parallelize.py)
        "async_tp": par("enable_async_tensor_parallel", False, bool) and tp > 1,
        "compile": get(doc, where, "compile", "enable", bool, False),
    }
    if get(doc, where, "compile", COMPILE_LOSS_KEY, bool, False):
        titan["compile_loss"] = True
    if schedules > 1:  # gradient accumulation under pipelining: a schedule per step of it
        titan["gradient_accumulation_steps"] = schedules
    if get(doc, where, "validation", "enable", bool, False):  # a Python one's validator too
        titan["validation_batch"] = get(doc, where, "validation", "local_batch_size", int, 8)
        titan["validation_seq_len"] = get(doc, where, "validation", "seq_len", int, 2048)
    if toml and training.get("deterministic"):  # e347b1e5 leaves the NaN fill on
        titan["deterministic_fill"] = True
    if training.get("deterministic"):  # planner.model.titan_sdpa charges the rest
        notes.append(("debug.deterministic" if toml else "config.debug.deterministic", UNTIMED))
    if balancer is None:
        titan["cp_load_balance"] = False  # a Python configuration's None (TOML has no None)
    chunks = get(doc, where, "loss", "num_chunks", int, 1)  # a Python configuration's loss
    if chunks != 1:
        titan["loss_chunks"] = chunks
    mtp = get(doc, where, "model", "num_mtp_layers", int, 0)  # a Python configuration's
    if mtp:
        titan["num_mtp_layers"] = mtp
        titan["mtp_scale"] = get(doc, where, "loss", "mtp_scale", float, 0.3)
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
    ep = degree(doc, where, "expert_parallel_degree")
    etp = degree(doc, where, "expert_tensor_parallel_degree")
    backend = par("expert_parallel_comm_backend", "standard", str)
    flex = ep > 1 and backend == "deepep"
    if toml:
        flex, note = torchtitan_toml.deepep(where, name, backend, ep, etp)
        if note is not None:
            notes.append(("parallelism.expert_parallel_comm_backend", note))
    if ep > 1:
        parallel["ep"] = ep
        parallel["etp"] = etp
        if flex:
            parallel["moe_token_dispatcher_type"] = "flex"
    parallel["micro_batch_size"] = mbs if pp > 1 else local
    if pp > 1:
        pipeline(doc, where, pp, parallel, titan)
    parallel["zero_stage"] = 3 if shard * cp > 1 else 0
    _checkpointing(doc, where, parallel, titan)
    if training["precision"] == "fp8":
        float8 = doc.get("quantize", {}).get("linear", {}).get("float8", {})
        arch = catalog.get_model(FLAVORS[name, flavor])
        moe = [i for i, on in enumerate(arch.moe_layers) if on]
        if toml:
            fqns = float8.get("filter_fqns", [])
            on, said = torchtitan_float8.float8_filter(where, name, arch.num_layers, fqns, moe)
            notes.extend(said)
            if not on:
                training["precision"] = "bf16"
        if training["precision"] == "fp8":
            training["fp8_recipe"] = float8.get("recipe_name", "tensorwise")
            gather = float8.get("enable_fsdp_float8_all_gather", False)
            if gather and shard == 1:
                notes.append(("quantize.linear.float8.enable_fsdp_float8_all_gather", NO_GATHER))
                gather = False
            titan["float8_all_gather"] = gather
        if torchtitan_float8.GROUPED_FLOAT8 in converters:
            grouped = doc.get("quantize", {}).get("grouped_mm", {}).get("float8", {})
            on = torchtitan_float8.float8_experts(where, moe, grouped.get("fqns", []))
            if on and training["precision"] != "fp8":
                raise InputError(
                    f"{where}: quantize.linear.float8.filter_fqns: keeps every decoder linear in "
                    "bf16 beside float8 routed experts (quantize.grouped_mm.float8), which "
                    "planner does not model"
                )
            if toml:  # the converter's constructor asserts, whatever it converts
                _grouped_era(where, pp, cp)
            if on and flex:
                raise InputError(f"{where}: {torchtitan_float8.DEEPEP_GROUPED}")
            if on:
                titan["float8_experts"] = True
            else:
                field = "quantize.grouped_mm.float8.fqns" if toml else "config.model_spec"
                notes.append(
                    (field, "the grouped float8 converter converts no routed experts here")
                )
    return {
        "model": {"name": FLAVORS[name, flavor]},
        "cluster": {"gpu": gpu, "num_gpus": d["world"]},
        "training": training,
        "parallel": parallel,
        "torchtitan": titan,
    }


FORCE_FIELD = "config.debug.moe_force_load_balance"
"""How a Python configuration names the forced-balance switch (`_force_balance`)."""


def _force_balance(name: str, toml: bool) -> str | None:
    """None where torchtitan's `name` routes round-robin under debug.moe_force_load_balance
    (read as the plan's moe_router_force_load_balancing), else why it is read as off: a model
    without MoE layers, or at e347b1e5 (`toml`) one whose args do not copy it
    (`torchtitan_toml.FORCE_BALANCE_MODELS`)."""
    if name not in MOE_MODELS:
        return f"true: {name} has no MoE router: read as nothing"
    if toml and name not in torchtitan_toml.FORCE_BALANCE_MODELS:
        return (
            f"true: {torchtitan_toml.ERA}'s {name} does not read it (only "
            f"{', '.join(torchtitan_toml.FORCE_BALANCE_MODELS)} do): read as learned routing"
        )
    return None


NO_GATHER = (
    "true at data_parallel_shard_degree 1: torchtitan turns it on only where dp_shard > 1 "
    "(components/quantization/float8.py:87-90, parallel_dims.py:322-323 at e347b1e5), so the "
    "FSDP all-gather is bf16: read as false"
)


def _grouped_era(where: str, pp: int, cp: int) -> None:
    """The grouped float8 converter at degrees e347b1e5 asserts against
    (`torchtitan_float8.grouped_float8_problem`)."""
    problem = torchtitan_float8.grouped_float8_problem(
        pp, cp, "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree"
    )
    if problem is not None:
        raise InputError(
            f"{where}: model.converters: {torchtitan_float8.GROUPED_FLOAT8!r} {problem} "
            f"{torchtitan_toml.MODULE}"
        )


def _checkpointing(
    doc: dict[str, Any], where: str, parallel: dict[str, Any], titan: dict[str, Any]
) -> None:
    """activation_checkpoint: mode none / full / selective with selective_ac_option "op" (per-op)
    or "N" (e347b1e5 distributed/activation_checkpoint.py:27-49, :177-183: every N-th layer of
    the rank by a counter, str.isdigit; N = 0 every layer, `not ac_freq`)."""
    mode = get(doc, where, "activation_checkpoint", "mode", str, "selective")
    option = get(doc, where, "activation_checkpoint", "selective_ac_option", str, "2")
    if mode == "selective" and option != "op":
        if not re.fullmatch(r"[0-9]+", option):  # ASCII digits only: int() refuses "²"
            raise InputError(
                f"{where}: activation_checkpoint.selective_ac_option: expected 'op' or a "
                f"non-negative integer (got {spelled(option)})"
            )
        parallel["recompute"] = "full"
        if int(option):  # beyond any rank's layers alike: none checkpointed
            titan["selective_layer_every"] = min(int(option), MAX_EVERY)
    elif mode in ("none", "full", "selective"):
        parallel["recompute"] = mode
    else:
        raise InputError(
            f"{where}: activation_checkpoint.mode: planner models none, full and selective "
            f"(got {spelled(mode)})"
        )


MAX_EVERY = 10**9
"""selective_ac_option above this (more layers than any model has) reads as this."""


def load(path: Path, gpu: str | None, num_gpus: int | None, text: str | None = None) -> Plan:
    """The plan the TOML describes (its layout not yet checked by the rules), with the notes
    on what it reads otherwise than the file says as `Plan.inert` (written as warnings);
    `text`, a TOML's text in place of the file's (`_read`)."""
    doc, notes = _read(path, gpu, num_gpus, text)
    try:
        plan = parse_plan(doc, path)
    except InputError as e:  # named by the TOML's keys
        tables = None if text is None else parse_toml(text, str(path))
        raise InputError(torchtitan_keys.keys_named(str(e), path, tables)) from None
    return replace(plan, inert=plan.inert + tuple(notes)) if notes else plan
