"""Read a plan, render one launch file, write it (or hand it back for stdout): `planner launch`.

Targets: `megatron-args` (Megatron-LM pretrain_gpt.py arguments), `torchrun` (bash script),
`slurm` (sbatch script), `k8s` (Kubeflow PyTorchJob), `megatron-bridge` (a Megatron-Bridge
ConfigContainer override), all for framework "megatron"; `torchtitan` (torchtitan's job TOML,
and under --out its torchrun and sbatch scripts beside it) and `torchtitan-module` (the Python
configuration torchtitan takes since 9810191b, with its scripts) for framework "torchtitan". With an
output directory the file gets the target's fixed name there; an existing file is kept unless
`force` (InputError, exit 2, naming it). The job name defaults to the plan file's stem. The
plan's layout must pass the rules (`planner.search.rules`); rendering is the pure functions of
the other emit modules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from planner.emit import (
    bridge,
    k8s,
    megatron,
    slurm,
    torchrun,
    torchtitan,
    torchtitan_module,
    torchtitan_run,
)
from planner.emit.common import check_job_name
from planner.emit.launch_pricing import POOL_TARGETS, launched
from planner.emit.prediction import HEADROOM, planned_figures
from planner.emit.torchrun import pool_files
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan
from planner.inputs.units import against, over
from planner.model import memory
from planner.search.rules import check_plan


class Renderer(Protocol):
    """A target's render: (plan, job name) -> the file's text, its header judging the plan's
    memory at `headroom_pct` (`planner.emit.prediction.predict`)."""

    def __call__(self, plan: Plan, job_name: str, *, headroom_pct: float = ...) -> str: ...


TARGETS: dict[str, tuple[Renderer, str]] = {
    "megatron-args": (megatron.render, "megatron-args.txt"),
    "torchrun": (torchrun.render, "train.sh"),
    "slurm": (slurm.render, "train.sbatch"),
    "k8s": (k8s.render, "pytorchjob.yaml"),
    "torchtitan": (torchtitan.render, torchtitan_run.CONFIG_NAME),
    "torchtitan-module": (torchtitan_module.render, torchtitan_module.MODULE_FILE),
    "megatron-bridge": (bridge.render, "bridge-overrides.yaml"),
}
"""target -> (renderer, file name written under --out)."""

COMPANIONS: dict[str, tuple[tuple[Renderer, str], ...]] = {
    "torchtitan": (
        (torchtitan_run.render_torchrun, "torchtitan-train.sh"),
        (torchtitan_run.render_slurm, "torchtitan-train.sbatch"),
    ),
    "torchtitan-module": (
        (torchtitan_run.render_module_torchrun, "torchtitan-train.sh"),
        (torchtitan_run.render_module_slurm, "torchtitan-train.sbatch"),
    ),
}
"""Files written beside a target's own under --out (the scripts that run torchtitan on the
target's configuration)."""

FRAMEWORK = {"torchtitan": "torchtitan", "torchtitan-module": "torchtitan"}
"""target -> the plan framework it needs (the others launch Megatron-LM)."""


SCRIPTS = (".sh", ".sbatch")
"""Suffixes of the files written executable (the bash and sbatch scripts)."""


@dataclass(frozen=True)
class Launched:
    """What `launch` produced: the text, and where it was written (None = for stdout)."""

    text: str
    path: Path | None = None
    note: str | None = None
    """What the user should know of the file written (`renamed`, `planned_note`)."""
    warning: str | None = None
    """Where the launched plan is predicted not to fit (`unfit`): the file is still written,
    as its header says, but a script that submits it should hear so on stderr."""


def unfit(plan: Plan, where: Path, headroom_pct: float = HEADROOM) -> str | None:
    """The warning for a launched plan whose peak memory exceeds its GPUs' usable memory at
    `headroom_pct` (the header's verdict, 'DOES NOT FIT'), None where it fits."""
    rep = memory.estimate(plan.job, plan.require_layout(), headroom_pct)
    if rep.fits:
        return None
    peak, cap = against(rep.peak, rep.capacity)
    return (
        f"{where}: the launched plan does not fit: peak {peak} GiB of {cap} GiB usable, "
        f"{over(rep.shortfall)} over (stage {rep.worst.stage}); `planner check` exits 1 on it"
    )


def planned_note(plan: Plan, target: str, headroom_pct: float = HEADROOM) -> list[str]:
    """[what the file's header predicts of the launched job and what the plan as written
    predicts] where `target` launches it otherwise (`launched`) and the two print otherwise
    (`prediction.planned_figures`): `check` and `explain` say so on stderr, and `launch` as
    well; [] where they print alike."""
    return [
        f"--target {target} launches the plan as its training code runs it, predicted {ran}; "
        f"the plan as written predicts {own} (the file's header gives both)"
        for ran, own in planned_figures(plan, headroom_pct)
    ]


def renamed(target: str, job_name: str) -> str | None:
    """Where Slurm's or Kubernetes' name for the job is not the job name as given (the
    characters a directive or a DNS-1035 label cannot hold replaced, cut to length, 'j-' before
    a leading digit): what it is, and that JOB_NAME keeps the name given."""
    if target == "slurm":
        name, what = slurm.sbatch_name(job_name), "#SBATCH --job-name"
    elif target == "k8s":
        name, what = k8s.k8s_name(job_name), "the PyTorchJob's metadata.name"
    else:
        return None
    if name == job_name:
        return None
    return f"{what} is {name!r} (what it can hold of {job_name!r}, which JOB_NAME keeps)"


def _target(target: str) -> tuple[Renderer, str]:
    """TARGETS[target], or the InputError naming the targets there are."""
    if target not in TARGETS:
        raise InputError(f"--target: expected one of {', '.join(TARGETS)} (got {target!r})")
    return TARGETS[target]


def render(
    plan: Plan, target: str, job_name: str | None = None, headroom_pct: float = HEADROOM
) -> tuple[str, str]:
    """(file name, text) of one target for a loaded plan, launched as `launched` says at
    `headroom_pct`, which its header's memory verdict is judged at too (as `unfit`'s)."""
    renderer, file_name = _target(target)
    need = FRAMEWORK.get(target, "megatron")
    if plan.job.framework != need:
        where = str(plan.path) if plan.path else "<plan>"
        fits = [t for t in TARGETS if FRAMEWORK.get(t, "megatron") == plan.job.framework]
        fits = [t for t in fits if t in POOL_TARGETS] if plan.job.pools else fits
        raise InputError(
            f"{where}: training.framework: --target {target} launches {need}, the plan trains "
            f"with {plan.job.framework} (targets for it: {', '.join(fits)})"
        )
    if plan.job.pools and target not in POOL_TARGETS:  # ranks must land on their pools
        raise InputError(
            f"{plan.path}: cluster.pools: --target {target} cannot place pipeline ranks on pools; "
            f"use one of {', '.join(POOL_TARGETS)}"
        )
    if plan.job.frozen_model:  # the launched run would train what the plan counts as frozen
        raise InputError(
            f"{plan.path}: training.frozen_model: no launch target can freeze the model (no "
            "Megatron-LM, Megatron-Bridge or torchtitan flag does; Megatron-LM's MIMO example "
            "freezes it in its model provider): the files would train every parameter, whose "
            "gradients and optimizer states this plan does not count; set frozen_model = false "
            "to launch a full training"
        )
    if plan.job.t5_encoder is not None:  # every target launches a decoder-only model
        raise InputError(
            f"{plan.path}: training.t5_encoder: no launch target runs T5 (the targets launch "
            "Megatron-LM's pretrain_gpt.py, Megatron-Bridge's GPT recipes and torchtitan, all "
            "decoder-only); run Megatron-LM's T5 example, pretrain_t5.py, with the plan's layout"
        )
    if need == "megatron" and (field := _unlaunched(plan, target)) is not None:
        raise InputError(f"{plan.path}: training.{field[0]}: {field[1]}")
    if job_name is None:
        job_name = plan.path.stem if plan.path is not None else "planner-job"
    plan = launched(plan, target, headroom_pct)
    return file_name, renderer(plan, check_job_name(job_name), headroom_pct=headroom_pct)


def _unlaunched(plan: Plan, target: str) -> tuple[str, str] | None:
    """(field, why) for a plan part the Megatron targets cannot launch: each starts
    pretrain_gpt.py (Megatron-Bridge its GPT recipe), which neither holds an RL rollout's KV
    cache or inference engine (Megatron-LM's train_rl.py and its many flags do) nor builds a
    vision encoder (its multimodal examples do); the file would launch the bare language model
    this plan prices with them. TP userbuffers without an overlap (`Job.tp_userbuffers`): where
    the target cannot allocate them alone."""
    job = plan.job
    if job.rl_kv_cache_bytes:
        value = f"{job.rl_kv_cache_bytes / 2**30:g} GiB"
        return "rl_kv_cache_gib", f"{value}: " + _RL_WHY
    if job.rl_inference_parallel is not None:
        return "rl_inference_parallel", f"{list(job.rl_inference_parallel)}: " + _RL_WHY
    lay = plan.require_layout()
    if job.tp_userbuffers and lay.tp > 1 and not lay.tp_comm_overlap:
        if not lay.sequence_parallel:  # Megatron-LM's --tp-comm-overlap asserts it
            return "tp_userbuffers", (
                "true without sequence_parallel: the flag that allocates the userbuffers, "
                "--tp-comm-overlap, needs --sequence-parallel (arguments.py:1441-1442 "
                "@d98e8a64); set parallel.sequence_parallel = true or tp_userbuffers = false"
            )
        if target == "megatron-bridge":
            return "tp_userbuffers", (
                "true: Megatron-Bridge allocates the userbuffers only with its TP overlap "
                "(comm_overlap.tp_comm_overlap), which planner does not write with every "
                "overlap off; launch with --target megatron-args (--tp-comm-overlap with each "
                "--disable-tp-comm-* flag) or set tp_userbuffers = false"
            )
    if job.vision_encoder is not None:
        return "vision_encoder", (
            f"{list(job.vision_encoder)}: no launch target builds a vision encoder (the targets "
            "launch pretrain_gpt.py and Megatron-Bridge's GPT recipes; Megatron-LM's multimodal "
            "examples do); remove it to launch the language model alone"
        )
    return None


_RL_WHY = (
    "no launch target runs the RL step (Megatron-LM's train_rl.py with its inference flags; "
    "the targets launch pretrain_gpt.py and Megatron-Bridge's pretraining recipes, which hold "
    "no rollout KV cache or inference engine); remove it to launch the pretraining step"
)


def refusals(plan: Plan) -> dict[str, list[str]]:
    """What `launch` refuses of a loaded plan among the targets of its framework (pools: those
    that place ranks on pools): message -> the targets refused with it (`suggest --write-plan`
    says so, rather than leave the plan's first launch to find it). A rule the plan breaks
    (`check_plan`) refuses them all, as `launch` checks it first."""
    targets = [
        t
        for t in TARGETS
        if FRAMEWORK.get(t, "megatron") == plan.job.framework
        and (not plan.job.pools or t in POOL_TARGETS)
    ]
    try:
        check_plan(plan)
    except InputError as e:
        return {str(e): targets}
    out: dict[str, list[str]] = {}
    for target in targets:
        try:
            render(plan, target)
        except InputError as e:
            out.setdefault(str(e), []).append(target)
    return out


def launch(
    plan_path: Path,
    target: str,
    out_dir: Path | None = None,
    job_name: str | None = None,
    force: bool = False,
    headroom_pct: float = HEADROOM,
) -> Launched:
    """Render `target` for the plan file; write it under `out_dir` when given. `headroom_pct`:
    the headroom the plan was ranked with, which decides what the launch may use
    (`megatron_lm_launched`) and whether it warns that the plan does not fit."""
    _target(target)  # before reading the plan: the cheaper message first
    # every file of the target (a pooled torchrun's per-pool scripts too) launches the plan as
    # its training code runs it (`launched`, which `render` applies for its callers alike)
    plan = launched(check_plan(load_plan(plan_path)), target, headroom_pct)
    file_name, text = render(plan, target, job_name, headroom_pct)
    said = [renamed(target, job_name or plan_path.stem), *planned_note(plan, target, headroom_pct)]
    note = "; ".join(n for n in said if n is not None) or None
    warning = unfit(plan, plan_path, headroom_pct)
    if out_dir is None and target == "torchrun" and len(plan.job.pools) > 1:
        scripts = _pool_scripts(plan, job_name or plan_path.stem, note, headroom_pct)
        return replace(scripts, warning=warning)
    if out_dir is None:
        return Launched(text, note=note, warning=warning)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out: {out_dir} exists and is not a directory")
    name = check_job_name(job_name or plan_path.stem)
    files = [(out_dir / file_name, text)]
    for renderer, extra in COMPANIONS.get(target, ()):
        files.append((out_dir / extra, renderer(plan, name, headroom_pct=headroom_pct)))
    if target == "torchrun" and plan.job.pools:  # one script per pool (planner.emit.pools)
        pooled = pool_files(plan, name, headroom_pct=headroom_pct)
        files = [(out_dir / f, body) for f, body in pooled]
    for path, _ in files:
        if path.exists() and not force:
            raise InputError(f"{path}: already exists; pass --force to overwrite it")
    for path, body in files:
        _write(path, body)
    return Launched(text, files[0][0], note, warning)


def _pool_scripts(
    plan: Plan, job_name: str, note: str | None, headroom_pct: float = HEADROOM
) -> Launched:
    """A pooled plan's torchrun scripts for stdout, one per pool (`pool_files`), each under a
    banner naming its pool and the file `--out` writes it to; none runs the others' ranks, so
    the note says to run each on its own pool's nodes."""
    files = pool_files(plan, check_job_name(job_name), headroom_pct=headroom_pct)
    parts = []
    for k, ((name, body), pool) in enumerate(zip(files, plan.job.pools, strict=True)):
        banner = f"# ===== pool {k + 1} of {len(files)}: {pool.name!r}, {name} ====="
        parts.append(f"{banner}\n{body.rstrip()}\n")
    said = (
        f"a plan over {len(files)} pools launches one torchrun script per pool, printed one "
        "after the other: run each on its own pool's nodes (--out DIR writes each to its file)"
    )
    return Launched("\n".join(parts), note=said if note is None else f"{note}; {said}")


def _write(path: Path, text: str) -> Path:
    """Write one launch file (InputError, exit 2, where it cannot)."""
    out_dir = path.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if path.suffix in SCRIPTS:
            path.chmod(0o755)
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror or e}") from None
    return path
