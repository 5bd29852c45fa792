"""A torchtitan job config TOML (the one `planner launch --target torchtitan` writes) read back
into a plan document: `planner check --torchtitan-config FILE [--gpu G]`; a Python configuration
(FILE.py[:FUNCTION], torchtitan since 9810191b) is read by `planner.inputs.torchtitan_module`
into the same tables first.

Field names: torchtitan/config/job_config.py at planner.inputs.torchtitan.TORCHTITAN_COMMIT; a
name it lacks, or a field planner does not model off its default, is refused
(`planner.inputs.torchtitan_toml`). What the TOML says is read into the plan (the degrees, the
batch and micro-batch, the schedule and its stages from module_fqns_per_model_part, activation
checkpointing, compile of the model, float8, the FSDP policy); the training-code knobs it has no
field for take torchtitan's defaults, as in a plan that leaves them out. The GPU is --gpu, else
the `# planner-gpu:` header line planner writes; the GPU count the product of the degrees.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from planner.inputs import pipeline_layout, torchtitan_toml
from planner.inputs.errors import InputError, spelled
from planner.inputs.files import parse_toml
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.torchtitan import MODELS, SINGLE_STAGE, default_schedule

FLAVORS = {v: k for k, v in MODELS.items()}
GPU_LINE = re.compile(r"^# planner-gpu: (\S+)$", re.MULTILINE)


def _get(doc: dict[str, Any], where: str, table: str, key: str, kind: type, default: Any) -> Any:
    section = doc.get(table, {})
    if not isinstance(section, dict):
        raise InputError(f"{where}: {table}: expected a table (got {spelled(section)})")
    value = section.get(key, default)
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise InputError(f"{where}: {table}.{key}: expected {kind.__name__} (got {spelled(value)})")
    return value


def _stages(parts: Any, where: str) -> tuple[str, ...]:
    """module_fqns_per_model_part -> planner's stage strings (E, t, L)."""
    field = f"{where}: parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not parts or not all(isinstance(p, list) for p in parts):
        raise InputError(
            f"{field}: expected a list of lists of module names, one per stage "
            f"(got {spelled(parts)})"
        )
    out = []
    for part in parts:
        stage = ""
        for name in part:
            if name == "tok_embeddings":
                stage += "E"
            elif isinstance(name, str) and re.fullmatch(r"layers\.\d+", name):
                stage += "t"
            elif name == "output":
                stage += "L"
            elif name != "norm":
                raise InputError(f"{field}: unknown module {spelled(name)}")
        out.append(stage)
    return tuple(out)


def _module(path: Path) -> tuple[Path, str | None] | None:
    """FILE.py or FILE.py:FUNCTION as (file, function), else None (a TOML)."""
    name, _, function = path.name.partition(":")
    if not name.endswith(".py"):
        return None
    return path.with_name(name), function or None


def read(path: Path, gpu: str | None, num_gpus: int | None) -> dict[str, Any]:
    """The plan document (as a plan file's tables) the TOML, or the Python configuration
    (`planner.inputs.torchtitan_module`, FILE.py[:FUNCTION]), describes."""
    where = str(path)
    module = _module(path)
    if module is not None:
        from planner.inputs import torchtitan_module  # ast and the baselines: only here

        doc, text = torchtitan_module.tables(*module)
        return _document(doc, text, str(module[0]), gpu, num_gpus)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{where}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: not a TOML file: {e}") from None
    doc = parse_toml(text, where)
    torchtitan_toml.check_fields(doc, where)
    compile_ = doc.get("compile")
    if isinstance(compile_, dict):
        parts = compile_.get("components", ["model", "loss"])
        if not isinstance(parts, list) or not all(isinstance(x, str) for x in parts):
            raise InputError(
                f"{where}: compile.components: expected a list of names (got {spelled(parts)})"
            )
        if "model" not in parts:  # the loss alone compiled: the model runs eager
            doc = {**doc, "compile": {**compile_, "enable": False}}
    return _document(doc, text, where, gpu, num_gpus)


def _document(
    doc: dict[str, Any], text: str, where: str, gpu: str | None, num_gpus: int | None
) -> dict[str, Any]:
    """The plan document of a torchtitan TOML's tables (`text` the file, for its GPU line)."""
    if gpu is None:
        found = GPU_LINE.search(text)
        if found is None:
            raise InputError(f"--torchtitan-config: {where} names no GPU; give --gpu NAME")
        gpu = found.group(1)
    name = _get(doc, where, "model", "name", str, "llama3")
    flavor = _get(doc, where, "model", "flavor", str, "debugmodel")
    if (name, flavor) not in FLAVORS:
        known = ", ".join(f"{n} {f}" for n, f in FLAVORS)
        raise InputError(f"{where}: model.flavor: planner knows no {name} {flavor!r} ({known})")

    def par(key: str, default: Any, kind: type = int) -> Any:
        return _get(doc, where, "parallelism", key, kind, default)

    def degree(key: str) -> int:
        value = par(key, 1)
        if value < 1:
            raise InputError(f"{where}: parallelism.{key}: must be at least 1 (got {value})")
        return int(value)

    rep, shard = degree("data_parallel_replicate_degree"), par("data_parallel_shard_degree", -1)
    tp, pp, cp = (
        degree("tensor_parallel_degree"),
        degree("pipeline_parallel_degree"),
        degree("context_parallel_degree"),
    )
    if shard < 1 and shard != -1:
        raise InputError(
            f"{where}: parallelism.data_parallel_shard_degree: must be at least 1, or -1 for "
            f"the GPUs the other degrees leave (got {shard})"
        )
    if shard == -1:
        if num_gpus is None:
            raise InputError(
                f"{where}: parallelism.data_parallel_shard_degree: {shard} (the rest) needs "
                "--num-gpus"
            )
        shard = num_gpus // (rep * tp * pp * cp)
    world = rep * shard * tp * pp * cp
    if num_gpus is not None and num_gpus != world:
        raise InputError(
            f"{where}: parallelism: the degrees multiply to {world} GPUs (replicate {rep} x shard "
            f"{shard} x cp {cp} x tp {tp} x pp {pp}), not --num-gpus {num_gpus}"
        )
    seq = _get(doc, where, "training", "seq_len", int, 2048)
    local = _get(doc, where, "training", "local_batch_size", int, 8)
    dp = rep * shard
    gbs = _get(doc, where, "training", "global_batch_size", int, -1)
    gbs = gbs if gbs > 0 else local * dp
    converters = _get(doc, where, "model", "converters", list, [])
    training: dict[str, Any] = {
        "framework": "torchtitan",
        "seq_length": seq,
        "global_batch_size": gbs,
        "precision": torchtitan_toml.precision(converters, where),
    }
    if par("disable_loss_parallel", False, bool):
        training["cross_entropy"] = "gathered"
    if _get(doc, where, "debug", "deterministic", bool, False):
        training["deterministic"] = True
    titan: dict[str, Any] = {
        "reshard_after_forward": par("fsdp_reshard_after_forward", "default", str),
        "dp_replicate": rep,
        # torchtitan turns async TP on only where tp > 1 (llama3/infra/parallelize.py)
        "async_tp": par("enable_async_tensor_parallel", False, bool) and tp > 1,
        "compile": _get(doc, where, "compile", "enable", bool, False),
    }
    if doc.get("parallelism", {}).get("context_parallel_load_balancer", "") is None:
        titan["cp_load_balance"] = False  # a Python configuration's None (TOML has no None)
    chunks = _get(doc, where, "loss", "num_chunks", int, 1)  # a Python configuration's loss
    if chunks != 1:
        titan["loss_chunks"] = chunks
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
    ep = par("expert_parallel_degree", 1)
    if ep > 1:
        parallel["ep"] = ep
        parallel["etp"] = par("expert_tensor_parallel_degree", 1)
        if par("expert_parallel_comm_backend", "standard", str) == "deepep":
            parallel["moe_token_dispatcher_type"] = "flex"
    parallel["micro_batch_size"] = par("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    if pp > 1:
        schedule = par("pipeline_parallel_schedule", "1F1B", str)
        parts = doc.get("parallelism", {}).get("module_fqns_per_model_part")
        vpp = 1 if schedule in SINGLE_STAGE else 2  # torchtitan's stages per rank by default
        if parts is not None:
            stages = _stages(parts, where)
            if len(stages) % pp:
                raise InputError(
                    f"{where}: parallelism.module_fqns_per_model_part: {len(stages)} stages, "
                    f"not a multiple of pipeline_parallel_degree ({pp})"
                )
            parallel["pipeline_model_parallel_layout"] = pipeline_layout.compact(stages)
            vpp = max(len(stages) // pp, 1)
        parallel["vpp"] = vpp
        if schedule != default_schedule(vpp):
            titan["pipeline_schedule"] = schedule
    parallel["zero_stage"] = 3 if shard * cp > 1 else 0
    mode = _get(doc, where, "activation_checkpoint", "mode", str, "selective")
    option = _get(doc, where, "activation_checkpoint", "selective_ac_option", str, "2")
    if mode == "selective" and option != "op":
        if not re.fullmatch(r"[0-9]{1,9}", option) or int(option) < 1:  # ASCII digits only
            raise InputError(
                f"{where}: activation_checkpoint.selective_ac_option: expected 'op' or a "
                f"positive integer (got {spelled(option)})"
            )
        parallel["recompute"] = "full"
        titan["selective_layer_every"] = int(option)
    elif mode in ("none", "full", "selective"):
        parallel["recompute"] = mode
    else:
        raise InputError(
            f"{where}: activation_checkpoint.mode: planner models none, full and selective "
            f"(got {spelled(mode)})"
        )
    if training["precision"] == "fp8":
        float8 = doc.get("quantize", {}).get("linear", {}).get("float8", {})
        training["fp8_recipe"] = float8.get("recipe_name", "tensorwise")
        titan["float8_all_gather"] = float8.get("enable_fsdp_float8_all_gather", False)
    return {
        "model": {"name": FLAVORS[name, flavor]},
        "cluster": {"gpu": gpu, "num_gpus": world},
        "training": training,
        "parallel": parallel,
        "torchtitan": titan,
    }


def load(path: Path, gpu: str | None, num_gpus: int | None) -> Plan:
    """The plan the TOML describes (its layout not yet checked by the rules)."""
    return parse_plan(read(path, gpu, num_gpus), path)
