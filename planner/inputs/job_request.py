"""The job `planner suggest` and `planner scale` plan: a job file (a plan without `[parallel]`),
job flags on top of it, or the bundled default job; errors in a field a flag set name the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.files import load_toml
from planner.inputs.plan import Job, parse_plan

DEFAULT_JOB: dict[str, dict[str, Any]] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {"seq_length": 8192, "global_batch_size": 128, "precision": "bf16"},
}
"""The bundled default: Llama 3.1 8B on one 8-GPU H100 node, 8k sequences, 1M tokens per step."""

DEFAULT_DESCRIPTION = "llama3.1-8b on 8 x h100-sxm-80gb, seq 8192, global batch 128"


@dataclass(frozen=True)
class JobArgs:
    """Job flags; None = take it from the job file (or the default job)."""

    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    nodes: int | None = None
    seq_length: int | None = None
    global_batch_size: int | None = None
    precision: str | None = None

    def empty(self) -> bool:
        return all(v is None for v in vars(self).values())


def load_job(path: Path | None, args: JobArgs) -> tuple[Job, dict[str, Any], str]:
    """The job, the model reference it used, and how to describe where it came from."""
    if path is None and args.empty():
        doc: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_JOB.items()}
        origin = f"no job given: planning the bundled default ({DEFAULT_DESCRIPTION})"
        base = None
    elif path is not None:
        doc = load_toml(path)
        doc.pop("parallel", None)
        origin = str(path)
        base = path
    else:
        doc = {k: dict(v) for k, v in DEFAULT_JOB.items()}
        origin = "flags"
        base = None
    doc = _apply_flags(doc, args)
    try:
        plan = parse_plan(doc, base)
    except InputError as e:
        raise InputError(name_flags(str(e), base, args)) from None
    ref = dict(plan.model_ref or {})
    hf = ref.get("hf_config")
    if base is not None and isinstance(hf, str) and not Path(hf).is_absolute():
        # relative to the job file, not to where planner runs (the plan writer re-relativises it)
        ref["hf_config"] = str((base.parent / hf).resolve())
    return plan.job, ref, origin


FLAG_FIELDS: dict[str, tuple[str, ...]] = {
    "model": ("model.name", "model.hf_config", "model"),
    "gpu": ("cluster.gpu",),
    "num_gpus": ("cluster.num_gpus",),
    "nodes": ("cluster.num_gpus",),
    "seq_length": ("training.seq_length",),
    "global_batch_size": ("training.global_batch_size",),
    "precision": ("training.precision",),
}
"""The plan fields each job flag sets: an error in one of them names the flag instead."""


def name_flags(message: str, base: Path | None, args: JobArgs) -> str:
    """An error about a field a flag set, reworded to name the flag ('--model: ...')."""
    wheres = (str(base),) if base is not None else ("<plan>", "<inline>")
    for attr, fields in FLAG_FIELDS.items():
        if getattr(args, attr) is None:
            continue
        flag = "--" + attr.replace("_", "-")
        for where in wheres:
            for field in fields:
                message = message.replace(f"{where}: {field}: ", f"{flag}: ")
    return message


def _apply_flags(doc: dict[str, Any], args: JobArgs) -> dict[str, Any]:
    doc = {k: dict(v) if isinstance(v, dict) else v for k, v in doc.items()}
    for table in ("model", "cluster", "training"):
        doc.setdefault(table, {})
    if args.model is not None:
        ref = args.model
        doc["model"] = (
            {"hf_config": str(Path(ref).resolve())}
            if ref.endswith(".json")
            else {"name": ref if not catalog.looks_like_path(ref) else str(Path(ref).resolve())}
        )
    if args.gpu is not None:
        doc["cluster"]["gpu"] = args.gpu
    if args.nodes is not None and args.num_gpus is not None:
        raise InputError("--nodes and --num-gpus: give one of them")
    if args.nodes is not None:
        gpu = catalog.get_gpu(str(doc["cluster"].get("gpu", args.gpu)))
        per_node = int(doc["cluster"].get("gpus_per_node", gpu.gpus_per_node))
        doc["cluster"]["num_gpus"] = args.nodes * per_node
    if args.num_gpus is not None:
        doc["cluster"]["num_gpus"] = args.num_gpus
    for key in ("seq_length", "global_batch_size", "precision"):
        value = getattr(args, key)
        if value is not None:
            doc["training"][key] = value
    return doc
