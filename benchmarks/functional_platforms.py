"""Where Megatron-LM's functional-test cases ran: the GPU kind and count of each case's CI
recipe rows (`targets`) and of each golden-values file (`golden_target`), for
benchmarks/functional_tests.py and the step-time benchmarks that read the same cases.

A platform key names a GPU (GPU_OF_PLATFORM); a world size is nodes x the processes torchrun starts
per node. A case in no recipe (the release cases) runs on its golden files' platforms, with the
fewest whole nodes its model-parallel groups need; a case with neither, on DEFAULT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_OF_PLATFORM = {
    "dgx_h100": "h100-sxm-80gb",
    "dgxh100_dgxc": "h100-sxm-80gb",
    "dgx_a100": "a100-sxm-80gb",
    "dgxa100_dracooci": "a100-sxm-80gb",
    "dgxa100_dracooci-ord": "a100-sxm-80gb",
    "dgx_gb200": "gb200-nvl72",
}
DEFAULT = ("h100-sxm-80gb", 8)
"""GPU kind and count where the data does not say (a case in no recipe, a golden file without a
platform): one DGX H100 node, as `_run_training.sh` launches by default; more whole nodes when
the line's model-parallel sizes need more GPUs than that (the release cases)."""


@dataclass(frozen=True)
class Target:
    platform: str
    gpu: str
    num_gpus: int
    note: str = ""


def _platform(name: str) -> str:
    """Platform keys as the recipes spell them (one record has stray spaces: 'dg  x_h100')."""
    return "".join(name.split())


def _counts(entries: list[dict[str, Any]]) -> list[int]:
    """World sizes of a platform's recipe rows: nodes x the processes torchrun starts per node
    (inference recipes say gpus=1 but launch 8, the runner's default)."""
    sizes = {e["nodes"] * (e.get("torchrun_nproc_per_node") or e["gpus_per_node"]) for e in entries}
    return sorted(sizes)


def targets(case: dict[str, Any]) -> list[Target]:
    out = []
    for raw, entries in sorted(case["gpus_by_platform"].items()):
        platform = _platform(raw)
        note = f"platform {raw!r} read as {platform}" if raw != platform else ""
        gpu = GPU_OF_PLATFORM.get(platform)
        if gpu is None:
            out += [
                Target(platform, DEFAULT[0], n, f"unknown platform {raw!r}: H100 assumed")
                for n in _counts(entries)
            ]
            continue
        out += [Target(platform, gpu, n, note) for n in _counts(entries)]
    if not out:
        out = [
            Target(platform, gpu, 0, "in no recipe: the golden file's platform, GPUs assumed")
            for platform, gpu in golden_platforms(case)
        ]
    if not out:
        out.append(Target("unknown", DEFAULT[0], 0, "in no recipe: H100 x 8 (or more) assumed"))
    return out


def golden_platforms(case: dict[str, Any]) -> list[tuple[str, str]]:
    """(platform, GPU) of a case's golden files whose platform is a known GPU: the name's end,
    golden_values_{dev,lts}_<platform>.json (the release cases are in no recipe)."""
    found = set()
    for name in case["golden_values_files"]:
        platform = name.removeprefix("golden_values_").removesuffix(".json").split("_", 1)[-1]
        if platform in GPU_OF_PLATFORM:
            found.add((platform, GPU_OF_PLATFORM[platform]))
    return sorted(found)


@dataclass(frozen=True)
class GoldenTarget:
    target: Target
    count_known: bool
    """False: the GPU count is not in the data (no recipe row for the case on any platform)."""


def golden_target(record: dict[str, Any], case: dict[str, Any]) -> GoldenTarget:
    """GPU kind from the golden file's platform (the dracooci / dgxc clusters are A100 / H100);
    GPU count from the case's recipe rows on that platform, else the file's recipe rows, else
    the case's one count on its other platforms, else unknown (8 or more, not summarised)."""
    platform = record.get("platform")
    gpu = GPU_OF_PLATFORM.get(platform or "")
    by_platform = {_platform(k): v for k, v in case["gpus_by_platform"].items()}
    sizes = _counts(by_platform[platform]) if platform in by_platform else []
    notes = []
    if not sizes and record.get("recipe_gpus"):
        sizes = _counts(record["recipe_gpus"])
    if not sizes:
        every = sorted({n for entries in by_platform.values() for n in _counts(entries)})
        if len(every) == 1:
            sizes = every
            notes.append("count of another platform")
    if gpu is None:
        gpu = DEFAULT[0]
        notes.append("no platform: H100 assumed")
    known = bool(sizes)
    return GoldenTarget(
        Target(platform or "none", gpu, sizes[0] if known else 0, "; ".join(notes)), known
    )
