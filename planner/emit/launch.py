"""Read a plan, render one launch file, write it (or hand it back for stdout): `planner launch`.

Targets: `megatron-args` (Megatron-LM pretrain_gpt.py arguments), `torchrun` (bash script),
`slurm` (sbatch script), `k8s` (Kubeflow PyTorchJob). With an output directory the file gets the
target's fixed name there; an existing file is kept unless `force` (InputError, exit 2, naming
it). The job name defaults to the plan file's stem. The plan's layout must pass Megatron-LM's
rules (`planner.search.rules`); rendering is the pure functions of the other emit modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.emit import k8s, megatron, slurm, torchrun
from planner.emit.common import check_job_name
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan
from planner.search.rules import check_plan

Renderer = Callable[[Plan, str], str]

TARGETS: dict[str, tuple[Renderer, str]] = {
    "megatron-args": (megatron.render, "megatron-args.txt"),
    "torchrun": (torchrun.render, "train.sh"),
    "slurm": (slurm.render, "train.sbatch"),
    "k8s": (k8s.render, "pytorchjob.yaml"),
}
"""target -> (renderer, file name written under --out)."""

EXECUTABLE = {"torchrun", "slurm"}


@dataclass(frozen=True)
class Launched:
    """What `launch` produced: the text, and where it was written (None = for stdout)."""

    text: str
    path: Path | None = None


def _target(target: str) -> tuple[Renderer, str]:
    """TARGETS[target], or the InputError naming the targets there are."""
    if target not in TARGETS:
        raise InputError(f"--target: expected one of {', '.join(TARGETS)} (got {target!r})")
    return TARGETS[target]


def render(plan: Plan, target: str, job_name: str | None = None) -> tuple[str, str]:
    """(file name, text) of one target for a loaded plan."""
    renderer, file_name = _target(target)
    if job_name is None:
        job_name = plan.path.stem if plan.path is not None else "planner-job"
    return file_name, renderer(plan, check_job_name(job_name))


def launch(
    plan_path: Path,
    target: str,
    out_dir: Path | None = None,
    job_name: str | None = None,
    force: bool = False,
) -> Launched:
    """Render `target` for the plan file; write it under `out_dir` when given."""
    _target(target)  # before reading the plan: the cheaper message first
    plan = check_plan(load_plan(plan_path))
    file_name, text = render(plan, target, job_name)
    if out_dir is None:
        return Launched(text)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out: {out_dir} exists and is not a directory")
    path = out_dir / file_name
    if path.exists() and not force:
        raise InputError(f"{path}: already exists; pass --force to overwrite it")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if target in EXECUTABLE:
            path.chmod(0o755)
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror or e}") from None
    return Launched(text, path)
