"""A torchrun script and an sbatch script that run torchtitan on the plan's configuration,
written beside it by `planner launch --target torchtitan` (the TOML, `planner.emit.torchtitan`)
or `--target torchtitan-module` (the Python configuration, `planner.emit.torchtitan_module`).

torchtitan's own launcher (run_train.sh) runs `torchrun ... -m torchtitan.train` with
PYTORCH_ALLOC_CONF=expandable_segments:True and the configuration: `--job.config_file FILE` at
e347b1e5, `--module M --config F` since 9810191b (the module on PYTHONPATH); these scripts do the
same on every node, with the c10d rendezvous on the first (as `planner.emit.torchrun` / `slurm`
do for Megatron-LM). Every value from the plan or the user is shell-quoted (`torchrun.q`); paths
are variables the user sets in one marked block.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.emit.common import comment_block, nodes
from planner.emit.prediction import HEADROOM, header, predict
from planner.emit.slurm import FIRST_NODE_MASTER, sbatch_directives, sbatch_name
from planner.emit.torchrun import array, rdzv_words, user_settings
from planner.emit.torchtitan_module import FUNCTION, MODULE_FILE
from planner.inputs.plan import Plan
from planner.inputs.torchtitan import TOML_REMOVED

CONFIG_NAME = "torchtitan.toml"


@dataclass(frozen=True)
class Runs:
    """How a script hands torchtitan one kind of configuration."""

    settings: tuple[str, ...]
    """The lines of the user's block after TORCHTITAN_DIR ({beside}: the scripts' folder)."""
    train: str
    """torchrun's words from `-m torchtitan.train` on."""
    environment: str = ""
    """Lines exported before torchrun."""


TOML = Runs(
    (
        "# a torchtitan checkout at (or before) the commit named in the config's header:",
        f"# {TOML_REMOVED} reads no TOML job config",
        'TORCHTITAN_DIR="${TORCHTITAN_DIR:-/opt/torchtitan}"',
        "# the job config planner wrote (default: beside this script)",
        f'CONFIG_FILE="${{CONFIG_FILE:-{{beside}}/{CONFIG_NAME}}}"',
    ),
    '-m torchtitan.train --job.config_file "$CONFIG_FILE" --job.description="$JOB_NAME" "$@"',
)
MODULE = Runs(
    (
        "# a torchtitan checkout at the commit named in the configuration's header",
        'TORCHTITAN_DIR="${TORCHTITAN_DIR:-/opt/torchtitan}"',
        f"# the folder of the configuration planner wrote ({MODULE_FILE}; default: this one)",
        'CONFIG_DIR="${CONFIG_DIR:-{beside}}"',
    ),
    f"-m torchtitan.train --module {FUNCTION} --config {FUNCTION} "
    '--dump_folder "./outputs/$JOB_NAME" "$@"',
    'export PYTHONPATH="$CONFIG_DIR${PYTHONPATH:+:$PYTHONPATH}"  # the configuration module\n',
)


def _settings(runs: Runs, job_name: str, master_addr: bool, nnodes: int = 1) -> str:
    """The variables a user sets. The configuration defaults to the one beside the script: its
    directory under torchrun, the submission directory under Slurm (sbatch runs a copy)."""
    beside = '$(cd "$(dirname "$0")" && pwd)' if master_addr else "$SLURM_SUBMIT_DIR"
    body = [line.replace("{beside}", beside) for line in runs.settings]
    return user_settings(job_name, master_addr, body, nnodes)


def _environment(plan: Plan, runs: Runs) -> str:
    out = "# environment torchtitan's run_train.sh sets, and NCCL at scale\n" + runs.environment
    if plan.job.expandable_segments:
        out += "export PYTORCH_ALLOC_CONF=expandable_segments:True  # less fragmented memory\n"
    out += "export TORCH_NCCL_AVOID_RECORD_STREAMS=1  # free NCCL buffers sooner\n"
    if nodes(plan).nnodes > 1:
        out += "export NCCL_IB_TIMEOUT=19  # tolerate slow InfiniBand links at scale\n"
    return out


def _distributed(plan: Plan, rdzv_id: str) -> str:
    return array(
        "DISTRIBUTED_ARGS",
        [
            *rdzv_words(nodes(plan), rdzv_id),
            ("--local-ranks-filter", "0"),
            ("--role", "rank"),
            ("--tee", "3"),
        ],
    )


def render_torchrun(
    plan: Plan, job_name: str, runs: Runs = TOML, *, headroom_pct: float = HEADROOM
) -> str:
    """The torchrun script: run it on every node."""
    n = nodes(plan)
    how = "run this same script on each node" if n.nnodes > 1 else "run it on the node"
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "torchtitan torchrun", job_name, predict(plan, headroom_pct)),
                f"{n.nnodes} node(s) x {n.nproc_per_node} GPUs: {how}; extra arguments go to "
                "torchtitan.train (e.g. --training.steps 10)",
            ]
        )
        + "set -euo pipefail\n\n"
        + _settings(runs, job_name, True, n.nnodes)
        + "\n"
        + _environment(plan, runs)
        + "\n"
        + _distributed(plan, '"$JOB_NAME"')
        + 'cd "$TORCHTITAN_DIR"\n'
        + f'exec torchrun "${{DISTRIBUTED_ARGS[@]}}" {runs.train}\n'
    )


def render_slurm(
    plan: Plan, job_name: str, runs: Runs = TOML, *, headroom_pct: float = HEADROOM
) -> str:
    """The sbatch script: one torchrun per node, the rendezvous on the first."""
    name = sbatch_name(job_name)
    directives = sbatch_directives(plan, name)
    return (
        "#!/usr/bin/env bash\n"
        + comment_block(
            [
                *header(plan, "torchtitan slurm", job_name, predict(plan, headroom_pct)),
                "submit with sbatch; set --time (and --account / --partition) in the #SBATCH lines",
            ]
        )
        + "".join(f"#SBATCH {d}\n" for d in directives)
        + "\nset -euo pipefail\n\n"
        + _settings(runs, job_name, False)
        + "\n"
        + _environment(plan, runs)
        + FIRST_NODE_MASTER
        + _distributed(plan, '"$SLURM_JOB_ID"')
        + 'cd "$TORCHTITAN_DIR"\n'
        + f'srun --kill-on-bad-exit=1 torchrun "${{DISTRIBUTED_ARGS[@]}}" {runs.train}\n'
    )


def render_module_torchrun(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The torchrun script of the Python configuration."""
    return render_torchrun(plan, job_name, MODULE, headroom_pct=headroom_pct)


def render_module_slurm(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The sbatch script of the Python configuration."""
    return render_slurm(plan, job_name, MODULE, headroom_pct=headroom_pct)
