"""The job `planner suggest` and `planner scale` plan: a job file (a plan without `[parallel]`),
job flags on top of it, or the bundled default job; errors in a field a flag set name the flag.

`request_job` also says which of the job's headline fields (`JOB_FIELDS`) neither the job file nor
a flag set, so the output can mark them: without a job file they come from `DEFAULT_JOB` (a
user who gives only `--model`, `--gpu` and `--num-gpus` gets its 8k sequences and batch of 128),
with one only `precision` can be left to the plan file's default ("bf16").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.files import load_toml
from planner.inputs.hardware import MAX_GPUS
from planner.inputs.plan import Job, parse_plan

DEFAULT_JOB: dict[str, dict[str, Any]] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {"seq_length": 8192, "global_batch_size": 128, "precision": "bf16"},
}
"""The bundled default: Llama 3.1 8B on one 8-GPU H100 node, 8k sequences, 1M tokens per step."""

JOB_FIELDS: dict[str, tuple[str, str]] = {
    "model": ("model", "--model"),
    "gpu": ("cluster", "--gpu"),
    "num_gpus": ("cluster", "--num-gpus"),
    "seq_length": ("training", "--seq-length"),
    "global_batch_size": ("training", "--global-batch-size"),
    "precision": ("training", "--precision"),
}
"""The job's headline fields (the keys of `suggest --json`'s `job` object): the plan-file table
each lives in and the flag that sets it."""


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


@dataclass(frozen=True)
class JobRequest:
    """The job to plan and where its values came from."""

    job: Job
    model_ref: dict[str, Any]
    """The `[model]` table it used (an `hf_config` path made absolute), for the plan writer."""
    origin: str
    """Where it came from, for people: a job file's path, "flags", or the bundled default."""
    defaulted: tuple[str, ...]
    """The `JOB_FIELDS` neither the job file nor a flag set, in `JOB_FIELDS` order."""
    unread: str | None = None
    """What of the job file the command does not read (a plan's [parallel] table: the layout is
    what it searches), said on stderr even under --json; None where nothing."""

    def values(self) -> dict[str, object]:
        """The `JOB_FIELDS` of the job, by name."""
        return job_values(self.job)


def job_values(job: Job) -> dict[str, object]:
    """A job's `JOB_FIELDS`, by name (model and GPU by their catalog names)."""
    gpus = {p.cluster.gpu.name: None for p in job.pools}  # a pools job: each kind, in order
    return {
        "model": job.arch.name,
        "gpu": " + ".join(gpus) if gpus else job.cluster.gpu.name,
        "num_gpus": job.cluster.num_gpus,
        "seq_length": job.seq_length,
        "global_batch_size": job.global_batch_size,
        "precision": job.precision,
    }


def load_job(path: Path | None, args: JobArgs) -> tuple[Job, dict[str, Any], str]:
    """The job, the model reference it used, and how to describe where it came from."""
    req = request_job(path, args)
    return req.job, req.model_ref, req.origin


def _flagged(args: JobArgs, name: str) -> bool:
    if name == "num_gpus":
        return args.num_gpus is not None or args.nodes is not None
    return getattr(args, name) is not None


def _in_file(doc: dict[str, Any], name: str) -> bool:
    table = doc.get(JOB_FIELDS[name][0])
    if not isinstance(table, dict):
        return False
    if name in ("gpu", "num_gpus") and "pools" in table:
        return True  # each pool names its GPU and count
    return bool(table) if name == "model" else name in table


def request_job(path: Path | None, args: JobArgs) -> JobRequest:
    """The job, the model reference it used, where it came from, and which fields defaulted."""
    if path is None and args.empty():
        doc: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_JOB.items()}
        origin = "no job given: the bundled default job"
        base = None
        unread = None
    elif path is not None:
        doc = load_toml(path)
        # a whole plan is a job too: its layout is what the command searches, so not read
        dropped = doc.pop("parallel", None) is not None
        origin = f"{path}, its [parallel] not read" if dropped else str(path)
        unread = (
            f"{path}: its [parallel] table is not read: the layout is what is searched (pin a "
            "degree with --tp, --pp, --cp, --ep, --dp, --vpp, --mbs, --zero)"
            if dropped
            else None
        )
        base = path
    else:
        doc = {k: dict(v) for k, v in DEFAULT_JOB.items()}
        origin = "flags"
        base = None
        unread = None
    given = {} if path is None else doc
    defaulted = tuple(f for f in JOB_FIELDS if not _flagged(args, f) and not _in_file(given, f))
    doc = _apply_flags(doc, args, base)
    try:
        plan = parse_plan(doc, base)
    except InputError as e:
        raise InputError(name_flags(str(e), base, args)) from None
    ref = dict(plan.model_ref or {})
    hf = ref.get("hf_config")
    if base is not None and isinstance(hf, str) and not Path(hf).is_absolute():
        # relative to the job file, not to where planner runs (the plan writer re-relativises it)
        ref["hf_config"] = str((base.parent / hf).resolve())
    return JobRequest(plan.job, ref, origin, defaulted, unread)


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


def _apply_flags(doc: dict[str, Any], args: JobArgs, base: Path | None) -> dict[str, Any]:
    """The job file's (or the default job's) tables with the flags written in. A table a flag
    writes into that is not a table (`training = [1, 2]`, `cluster = "x"`) is left as it is:
    validating the plan names it (`cluster: Input should be a valid dictionary ...`)."""
    if any(not isinstance(doc.get(t, {}), dict) for t in ("cluster", "training")):
        return doc
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
        if "pools" in doc["cluster"]:
            raise InputError(
                "--nodes: give either pools or one GPU kind (the job's [[cluster.pools]] each "
                "give their num_gpus)"
            )
        per_node = _per_node(doc["cluster"], args, base)
        if per_node is not None:  # else validating the plan names the field
            doc["cluster"]["num_gpus"] = _nodes_gpus(args.nodes, per_node)
    if args.num_gpus is not None:
        doc["cluster"]["num_gpus"] = args.num_gpus
    for key in ("seq_length", "global_batch_size", "precision"):
        value = getattr(args, key)
        if value is not None:
            doc["training"][key] = value
    return doc


def _per_node(cluster: dict[str, Any], args: JobArgs, base: Path | None) -> int | None:
    """The GPUs per node --nodes counts in: the job's `cluster.gpus_per_node`, else its GPU's.
    None where the job's gpus_per_node is not a positive whole number (validating the plan names
    it, with its value) or it names no GPU (validating names the missing field); an unknown GPU
    is named by the flag or the file's field that gave it."""
    given = cluster.get("gpus_per_node")
    if given is not None:
        ok = isinstance(given, int) and not isinstance(given, bool) and given > 0
        return given if ok else None
    if "gpu" not in cluster:
        return None
    where = "--gpu" if args.gpu is not None else f"{base or '<plan>'}: cluster.gpu"
    try:
        return catalog.get_gpu(str(cluster["gpu"])).gpus_per_node
    except InputError as e:
        raise InputError(f"{where}: {e}") from None


def _nodes_gpus(nodes: int, per_node: int) -> int:
    """--nodes N of `per_node` GPUs each, within the GPUs a cluster may have (hardware.MAX_GPUS),
    quoting the user's node count where it is over."""
    if nodes * per_node > MAX_GPUS:
        raise InputError(
            f"--nodes: {nodes:,} nodes of {per_node} GPUs is {nodes * per_node:,} GPUs, over the "
            f"{MAX_GPUS:,} a cluster may have: at most {MAX_GPUS // per_node:,} nodes"
        )
    return nodes * per_node
