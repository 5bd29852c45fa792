"""`planner suggest`: the job (from a job file, flags, or the bundled default), the user's pins and
bounds, the search, and, when nothing fits, why and the smallest change that would.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner import catalog, memory
from planner import space as space_mod
from planner.errors import InputError
from planner.layout import Layout, Recompute
from planner.search import SearchResult
from planner.space import Bound, Space
from planner.spec import Job, parse_plan

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


def parse_bound(flag: str, text: str) -> Bound:
    """ "8" pins, "1-16" bounds, "4-" is at least 4, "-8" at most 8."""
    m = re.fullmatch(r"\s*(\d*)\s*(-?)\s*(\d*)\s*", text)
    if not m or not (m.group(1) or m.group(3)) or (m.group(2) == "" and not m.group(1)):
        raise InputError(f"{flag}: expected N, LO-HI, LO- or -HI (got {text!r})")
    lo = int(m.group(1)) if m.group(1) else 1
    hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else 1 << 30)
    if lo < 1 or hi < lo:
        raise InputError(f"{flag}: the range {text!r} is empty")
    return Bound(lo, hi)


def merge_bound(flag: str, bound: Bound, max_value: int | None) -> Bound:
    """Apply --max-X on top of --X; a pin above the maximum is a contradiction."""
    if max_value is None:
        return bound
    if max_value < 1:
        raise InputError(f"--max-{flag}: must be at least 1 (got {max_value})")
    if bound.lo > max_value:
        raise InputError(
            f"--{flag} {bound.lo if bound.lo == bound.hi else f'{bound.lo}-'} contradicts "
            f"--max-{flag} {max_value}"
        )
    return Bound(bound.lo, min(bound.hi, max_value))


def load_job(path: Path | None, args: JobArgs) -> tuple[Job, dict[str, Any], str]:
    """The job, the model reference it used, and how to describe where it came from."""
    if path is None and args.empty():
        doc: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_JOB.items()}
        origin = f"no job given: planning the bundled default ({DEFAULT_DESCRIPTION})"
        base = None
    elif path is not None:
        doc = catalog.load_toml(path)
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


def check_space(job: Job, space: Space) -> None:
    """Impossible requests exit 2 naming the contradiction."""
    n = job.cluster.num_gpus
    for name in ("tp", "pp", "cp", "ep", "dp"):
        b: Bound = getattr(space, name)
        if b.lo > n:
            raise InputError(f"--{name} {b.lo} exceeds num_gpus ({n})")
    _check_degrees(n, space)
    if space.dp.lo > job.global_batch_size:
        raise InputError(
            f"--dp {space.dp.lo} exceeds global_batch_size ({job.global_batch_size}): every "
            f"data-parallel rank needs at least one sequence"
        )
    if space.pp.lo > job.arch.num_layers:
        raise InputError(f"--pp {space.pp.lo} exceeds num_layers ({job.arch.num_layers})")
    if space.ep.lo > 1 and not job.arch.is_moe:
        raise InputError(f"--ep {space.ep.lo}: {job.arch.name} has no experts")
    if not space.zero_stages:
        raise InputError("--zero: no ZeRO stage left to search")
    if not space.recompute:
        raise InputError("--recompute: no recompute policy left to search")


def _flag(name: str, b: Bound) -> str:
    if b.lo == b.hi:
        return f"--{name} {b.lo}"
    return f"--{name} {b.lo}-{'' if b.hi >= 1 << 30 else b.hi}"


def _check_degrees(n: int, space: Space) -> None:
    """Pins and bounds on tp, cp, pp, dp must leave some tp x cp x pp x dp equal to num_gpus."""
    names = ("tp", "cp", "pp", "dp")
    bounds: dict[str, Bound] = {k: getattr(space, k) for k in names}
    for k, b in bounds.items():
        if b.lo == b.hi and n % b.lo:
            raise InputError(f"--{k} {b.lo} does not divide num_gpus ({n})")
    ds = space_mod.divisors(n)
    b_tp, b_cp, b_pp, b_dp = bounds.values()
    for tp in (d for d in ds if b_tp.admits(d)):
        for cp in (d for d in ds if b_cp.admits(d) and (n // tp) % d == 0):
            for pp in (d for d in ds if b_pp.admits(d) and (n // (tp * cp)) % d == 0):
                if b_dp.admits(n // (tp * cp * pp)):
                    return
    default = Space()
    given = " and ".join(_flag(k, b) for k, b in bounds.items() if b != getattr(default, k))
    lo = math.prod(b.lo for b in bounds.values())
    hi = math.prod(min(b.hi, n) for b in bounds.values())
    if lo > n:
        why = f"need at least {lo} GPUs (tp x cp x pp x dp) but num_gpus is {n}"
    elif hi < n:
        why = f"allow at most {hi} GPUs (tp x cp x pp x dp) but num_gpus is {n}"
    else:
        why = f"no tp x cp x pp x dp within them equals num_gpus ({n})"
    raise InputError(f"{given}: {why}")


@dataclass(frozen=True)
class Infeasible:
    """Why nothing fits, and the smallest changes that would make something fit."""

    binding: str
    changes: list[str]


def _min_peak(job: Job, space: Space) -> tuple[float, Layout | None]:
    """The smallest peak memory any layout of the space reaches (most sharding, most recompute,
    smallest micro-batch, no interleaving), and that layout."""
    lean = replace(
        space,
        zero_stages=(max(space.zero_stages),),
        recompute=(space.recompute[-1],),
        mbs=Bound(space.mbs.lo, space.mbs.lo),
        vpp=Bound(1, 1),
    )
    best: tuple[float, Layout | None] = (float("inf"), None)
    for s in space_mod.structures(job, lean, Counter()):
        for mbs, vpp, split in space_mod.options(job, lean, s):
            lay = space_mod.bases(job, s, mbs, vpp, split, lean)[0][0].with_(
                zero_stage=lean.zero_stages[0], recompute=lean.recompute[0]
            )
            peak = memory.estimate(job, lay, space.headroom_pct, all_stages=False).peak
            if peak < best[0]:
                best = (peak, lay)
    return best


def explain_infeasible(job: Job, space: Space, result: SearchResult) -> Infeasible:
    """The binding constraint and the smallest single change (GPUs, memory, sequence, batch)."""
    if result.structures == 0 or result.space_size == 0:
        top = ", ".join(f"{k} ({v})" for k, v in result.rejected.most_common(3))
        changes = _batch_changes(job, space)
        return Infeasible(f"no layout passes the rules: {top}", changes)
    cap = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    peak, lay = _min_peak(job, space)
    gib = 2**30
    binding = (
        f"memory: the leanest layout ({lay.describe() if lay else '?'}) needs "
        f"{peak / gib:.1f} GiB per GPU, {cap / gib:.1f} GiB available"
    )
    # the physical size whose usable part holds the peak
    needed = peak * job.cluster.capacity_bytes / cap
    changes = [f"GPUs with at least {needed / gib:.0f} GiB each"]
    for k in range(1, 7):
        n = job.cluster.num_gpus * 2**k
        bigger = replace(job, cluster=job.cluster.model_copy(update={"num_gpus": n}))
        if _min_peak(bigger, space)[0] <= cap:
            changes.append(f"{n} GPUs instead of {job.cluster.num_gpus}")
            break
    seq = job.seq_length
    while seq > 256:
        seq //= 2
        if _min_peak(replace(job, seq_length=seq), space)[0] <= cap:
            changes.append(f"seq_length {seq} instead of {job.seq_length}")
            break
    return Infeasible(binding, changes)


def _batch_changes(job: Job, space: Space) -> list[str]:
    out = []
    for gbs in (job.global_batch_size * 2**k for k in range(1, 5)):
        trial = replace(job, global_batch_size=gbs)
        structs = space_mod.structures(trial, space, Counter())
        if any(space_mod.options(trial, space, s) for s in structs):
            out.append(f"global_batch_size {gbs} instead of {job.global_batch_size}")
            break
    return out


def recompute_list(text: str | None) -> tuple[Recompute, ...]:
    if text is None:
        return space_mod.RECOMPUTE_ORDER
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in space_mod.RECOMPUTE_ORDER]
    if bad:
        raise InputError(f"--recompute: expected none, selective, full (got {bad[0]!r})")
    return tuple(r for r in space_mod.RECOMPUTE_ORDER if r in items)


def zero_list(text: str | None) -> tuple[int, ...]:
    if text is None:
        return (0, 1, 2, 3)
    try:
        items = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise InputError(f"--zero: expected stages 0-3, e.g. 1 or 1,2 (got {text!r})") from None
    if not items or any(z not in (0, 1, 2, 3) for z in items):
        raise InputError(f"--zero: expected stages 0-3, e.g. 1 or 1,2 (got {text!r})")
    return tuple(items)
