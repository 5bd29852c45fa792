"""A Slurm batch script's `#SBATCH` directives, as `planner check --megatron-args` reads them
beside the command line: `--segment` (Slurm >= 24.11's topology/block option: the job's nodes
in segments of N nodes, each segment within one block) becomes `[cluster]
gpus_per_domain_used` (`ClusterSpec.domain_used`), N times the GPUs per node, so a script
planner wrote (`planner.emit.slurm`, which writes `--segment` for a plan priced on part of each
NVLink domain) is checked as it was priced.

sbatch reads directives from the top of the script, stopping at the first line that is not a comment
or blank (each directive line `#SBATCH` and options, several to a line); a heterogeneous job's
components (`#SBATCH hetjob`) are not read: planner's reading of a script is one cluster. The GPUs
per node are the directives' `--gpus-per-node=[type:]N` (or `--gres=gpu[:type]:N`), else the catalog
GPU's. A segment matters where an NVLink domain spans several nodes (GB200 / GB300 NVL72 racks); on
a GPU whose domain is one node, Slurm's nodes are its domains already, and the directive is left
unread.
"""

from __future__ import annotations

import re

from planner.inputs import catalog
from planner.inputs.errors import InputError

_NODES = re.compile(r"[1-9][0-9]{0,5}")
"""A whole positive number (at most six digits: planner's GPU counts are far below)."""


def directives(text: str) -> dict[str, str]:
    """The options of the script's leading `#SBATCH` lines, `--name=value` or `--name value`
    (a later one winning, as sbatch's option parsing does); empty for a heterogeneous job."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        words = stripped[len("#SBATCH") :].split()
        if words[:1] == ["hetjob"]:
            return {}
        for k, word in enumerate(words):
            if word.startswith("#"):
                break
            if not word.startswith("--"):
                continue
            name, eq, value = word.partition("=")
            if not eq:
                after = words[k + 1] if k + 1 < len(words) else ""
                value = "" if after.startswith("-") else after
            out[name] = value
    return out


def domain_used(text: str, gpu: str, where: str) -> tuple[int, str] | None:
    """`[cluster] gpus_per_domain_used` from the script's `#SBATCH --segment`, and a note of how
    it was read; None where the script sets no segment, or the GPU's NVLink domain is one node
    (or the name is no catalog GPU: the plan refuses it). A segment that is no whole number of
    nodes, or more GPUs than a domain holds, is bad input naming the file, the directive and its
    value."""
    found = directives(text)
    if "--segment" not in found:
        return None
    try:
        spec = catalog.get_gpu(gpu)
    except InputError:
        return None
    span = spec.tiers[0].span_gpus if spec.tiers else None
    value = found["--segment"]
    if not _NODES.fullmatch(value):
        raise InputError(
            f"{where}: #SBATCH --segment: expected a whole number of nodes, 1 or more "
            f"(got {value!r})"
        )
    per, how = _gpus_per_node(found, spec.gpus_per_node, where)
    if span is None or span <= per:
        return None
    used = int(value) * per
    if used > span:
        raise InputError(
            f"{where}: #SBATCH --segment: {value} nodes of {per} GPUs ({used} GPUs) is more than "
            f"one NVLink domain of {gpu} holds ({span}): a segment lies within one domain"
        )
    note = (
        f"#SBATCH --segment={value}: {used} GPUs of each {span}-GPU NVLink domain "
        f"({value} nodes x {per} GPUs, {how}): [cluster] gpus_per_domain_used = {used}"
    )
    return used, note


def _gpus_per_node(found: dict[str, str], default: int, where: str) -> tuple[int, str]:
    """The GPUs per node the directives ask for (`--gpus-per-node=[type:]N`, or
    `--gres=gpu[:type]:N`), and how; else the catalog GPU's."""
    if "--gpus-per-node" in found:
        flag, count = "--gpus-per-node", found["--gpus-per-node"].rpartition(":")[2]
    else:
        gres = [g for g in found.get("--gres", "").split(",") if g.split(":")[0] == "gpu"]
        if not gres or len(gres[0].split(":")) < 2:
            return default, "the catalog's GPUs per node"
        flag, count = "--gres", gres[0].rpartition(":")[2]
    if not _NODES.fullmatch(count):
        raise InputError(
            f"{where}: #SBATCH {flag}: expected a whole number of GPUs per node "
            f"(got {found[flag]!r})"
        )
    return int(count), f"#SBATCH {flag}"
