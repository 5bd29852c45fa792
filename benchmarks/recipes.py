"""NVIDIA's Megatron-Bridge performance pre-training recipes as planner plan files: does each fit,
what does planner predict, and does `planner launch` emit the flags the recipe sets?

    python benchmarks/recipes.py                 # the table, then each recipe's differences
    python benchmarks/recipes.py --write-plans   # rewrite examples/recipes/*.toml from the data

The recipes' settings are read from benchmarks/data/bridge_recipes.md (108 recipes of
NVIDIA-NeMo/Megatron-Bridge @ 067f987d: Llama 3 8B / 70B, Llama 3.1 405B, Qwen3 30B-A3B and
235B-A22B, GPT-OSS 120B / 20B, DeepSeek-V3 on H100, B200 and GB200). Settings only: no
throughput figure of Megatron-Bridge's was read or is printed; "tok/s/GPU" is planner's own
prediction. Each modelled recipe has a plan file under examples/recipes/, written by
`plan_document` from the same row (so `--write-plans` reproduces them); the recipe's
Megatron-LM flags are written independently by `recipe_flags`, the Megatron-LM spelling of each
Bridge setting, and compared with what `planner.emit.megatron` emits for the plan, limited to
the layout, precision, recompute and MoE flags (`SCOPE`).

Skipped, and listed as such: NVFP4 recipes (planner has no FP4), and the recipes the data file
marks INFEASIBLE (their expert x pipeline size does not divide their GPU count, so they cannot
run at the size in their name). Settings with no plan field are named in each recipe's notes.
The data file's development ("_dev") recipes are not among the 108 and are not modelled.

"verdict GiB" is the worst stage's peak / usable memory; "flag diffs" counts the flags that
differ, each listed below the table (those whose reason is the same everywhere, once).

Exit 0 regardless; the verdict is check's (`planner.model.memory.estimate`, default headroom).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.emit.common import environment
from planner.emit.megatron import arguments
from planner.inputs import pipeline_layout
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.search import rules

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "benchmarks" / "data" / "bridge_recipes.md"
PLANS = REPO / "examples" / "recipes"
BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"

GPUS = {"H100": "h100-sxm-80gb", "B200": "b200-sxm-180gb", "GB200": "gb200-nvl72"}
"""The data file's GPU column -> catalog GPU."""

MODELS = {
    "llama3_8b": "llama3.1-8b",
    "llama3_70b": "llama3.1-70b",
    "llama31_405b": "llama3.1-405b",
    "qwen3_30b_a3b": "qwen3-30b-a3b",
    "qwen3_235b_a22b": "qwen3-235b-a22b",
    "gpt_oss_120b": "gpt-oss-120b",
    "gpt_oss_20b": "gpt-oss-20b",
    "deepseek_v3": "deepseek-v3",
}
"""Recipe function prefix -> zoo model. Llama 3 8B / 70B (meta-llama/Meta-Llama-3-8B / -70B,
the recipes' HF configs) have exactly the Llama 3.1 shapes (layers, widths, heads, vocabulary
128256); only the RoPE scaling and context length differ, neither of which planner models at
these 8,192-token sequences."""

DSV3_ROUTING = (8, 4)
"""DeepSeek-V3's group-limited routing, HF n_group / topk_group (bridge_recipes.md: Bridge maps
them to moe_router_num_groups / moe_router_group_topk)."""

DSV3_LAYOUTS: dict[tuple[int, int], list[str]] = {
    (16, 1): ["Etttt", *["tttt"] * 14, "tmL"],
    (8, 2): ["Etttt", *["tttt"] * 14, "tmL"],
    (4, 4): ["Etttt", *["tttt"] * 14, "tmL"],
}
"""Megatron-Bridge's built-in DeepSeek-V3 pipeline layouts by (pp, vpp), the ones the recipes
use: set_deepseek_v3_pipeline_model_parallel_layout's layout_map in
src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py (read at commit 0edb6699, settings
only): the embedding and 4 layers, 14 stages of 4, then 1 layer with MTP and loss. For (8, 2)
bridge_recipes.md's D3 row lists the 8-stage (8, 1) list instead, which vpp 2 cannot hold (16
stages); the 16-stage list of its D9 row and of the source is used."""

SCOPE = frozenset(
    {
        # layout
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--num-virtual-stages-per-pipeline-rank",
        "--num-layers-per-virtual-pipeline-stage",
        "--pipeline-model-parallel-layout",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--microbatch-group-size-per-virtual-pipeline-stage",
        "--sequence-parallel",
        "--tp-comm-overlap",
        "--micro-batch-size",
        "--global-batch-size",
        "--seq-length",
        "--use-distributed-optimizer",
        "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy",
        "--fsdp-double-buffer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--overlap-param-gather-with-optimizer-step",
        "--cpu-offloading-num-layers",
        # precision
        "--bf16",
        "--fp8-format",
        "--fp8-recipe",
        "--fp8-param-gather",
        "--fp8-amax-history-len",
        "--fp8-amax-compute-algo",
        "--fp8-output-proj",
        "--reuse-grad-buf-for-mxfp8-param-ag",
        "--grad-reduce-in-bf16",
        "--use-precision-aware-optimizer",
        "--main-grads-dtype",
        "--exp-avg-dtype",
        "--exp-avg-sq-dtype",
        # recompute
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
        "--recompute-modules",
        # MoE
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--moe-token-dispatcher-type",
        "--moe-flex-dispatcher-backend",
        "--overlap-moe-expert-parallel-comm",
        "--delay-wgrad-compute",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-expert-capacity-factor",
        "--moe-pad-expert-input-to-capacity",
        "--moe-router-force-load-balancing",
        "--moe-paged-stash",
        "--moe-expert-rank-capacity-factor",
        "--mtp-num-layers",
    }
)
"""The flags compared: layout, precision, recompute and MoE. Data, kernels (grouped GEMM, fused
permute), logging and checkpointing flags are not."""

WHY: dict[str, str] = {
    "--moe-router-force-load-balancing": "benchmark-only random routing; planner models "
    "learned routing as balanced, no plan field",
    "--fp8-amax-history-len": "FP8-DS's amax history (1024, max): no plan field; Megatron's "
    "default (1, most_recent) is emitted",
    "--fp8-amax-compute-algo": "see --fp8-amax-history-len",
    "--fp8-output-proj": "FP8 output projection: no plan field",
    "--overlap-param-gather-with-optimizer-step": "no plan field (Bridge's "
    "PG-overlap-with-opt-step)",
    "--moe-paged-stash": "paged stash of expert activations (full-iteration CUDA graphs): no "
    "plan field",
    "--moe-expert-rank-capacity-factor": "HybridEP per-rank token budget (drops beyond it): no "
    "plan field",
    "--fsdp-double-buffer": "Megatron-FSDP double buffering: no plan field (planner counts two "
    "gathered layers)",
    "--delay-wgrad-compute": "the plan's ep_comm_overlap always delays the weight gradients",
    "--use-precision-aware-optimizer": "precision-aware optimizer with fp32 states: same memory "
    "as Adam's, so planner emits it only for bf16 moments",
    "--overlap-param-gather": "Megatron-LM's validate_args refuses param-gather overlap without "
    "grad-reduce overlap (Bridge, outside validate_args, keeps it)",
}
"""Why a flag differs where the reason is the same for every recipe that shows it."""


# --- the data file


@dataclass
class Recipe:
    """One row of bridge_recipes.md: its layout table, its runtime table and its environment."""

    id: str
    function: str
    source: str
    gpu: str
    n: int
    precision: str
    tp: int
    pp: int
    vpp: int | None
    cp: int
    ep: int
    etp: int | None
    sp: bool
    mbs: int
    gbs: int
    seq: int
    split: str
    runtime: dict[str, str] = field(default_factory=dict)
    env: str = ""

    @property
    def family(self) -> str:
        return next(p for p in MODELS if self.function.startswith(p))

    @property
    def model(self) -> str:
        return MODELS[self.family]

    @property
    def is_moe(self) -> bool:
        return self.id[0] in "QGD"

    @property
    def stem(self) -> str:
        """The plan file's name: the function without `_config`, hyphenated."""
        return self.function.removesuffix("_config").replace("_", "-")

    @property
    def plan_path(self) -> Path:
        return PLANS / f"{self.stem}.toml"

    @property
    def skip(self) -> str | None:
        """Why this recipe has no plan file (None: it has one)."""
        if self.precision.startswith("NVFP4"):
            return "NVFP4: planner has no FP4 precision"
        if "INFEASIBLE" in self.runtime.get("notes", ""):
            note = self.runtime["notes"]
            return "cannot run at its advertised size: " + note[note.index("INFEASIBLE") :]
        return None


RUNTIME = (
    "recompute",
    "offload",
    "dispatcher",
    "dropping",
    "mtp",
    "tp_overlap",
    "ep_overlap",
    "optimizer",
    "graphs",
    "notes",
)
"""The runtime table's columns after the id."""


def _cells(line: str) -> list[str]:
    """A markdown table row's cells ("\\|" inside a cell is a literal bar)."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def _opt_int(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def load_recipes(path: Path = DATA) -> list[Recipe]:
    """Every recipe of the data file's three tables per family, in file order."""
    by_id: dict[str, Recipe] = {}
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("### "):
            section = line
            continue
        if not re.match(r"\|\s*[LQGD]\d+\s*\|", line):
            continue
        c = _cells(line)
        if section.endswith("parallel layout"):
            m = re.match(r"`(\w+)` \((.+)\)", c[1])
            if not m:
                raise ValueError(f"{path}: {c[0]}: cannot read the recipe cell {c[1]!r}")
            by_id[c[0]] = Recipe(
                id=c[0],
                function=m.group(1),
                source=m.group(2),
                gpu=c[2],
                n=int(c[3]),
                precision=c[4],
                tp=int(c[5]),
                pp=int(c[6]),
                vpp=_opt_int(c[7]),
                cp=int(c[8]),
                ep=int(c[9]),
                etp=_opt_int(c[10]),
                sp=c[11] == "yes",
                mbs=int(c[12]),
                gbs=int(c[13]),
                seq=int(c[14]),
                split=c[16].strip("`"),
            )
        elif section.endswith("runtime settings"):
            by_id[c[0]].runtime = dict(zip(RUNTIME, c[1:], strict=True))
        elif section.startswith("### Environment"):
            by_id[c[0]].env = c[1]
    return list(by_id.values())


# --- each Bridge setting, read


@dataclass(frozen=True)
class Settings:
    """A recipe's settings, read from its cells (`read`)."""

    precision: str  # "bf16" | "fp8"
    fp8_recipe: str | None
    fp8_param_gather: bool
    layout: tuple[str, ...] | None  # the pipeline layout's stages, if the recipe gives one
    account_for: bool
    recompute: str
    recompute_modules: tuple[str, ...]
    recompute_method: str | None
    recompute_num_layers: int | None
    offload_layers: int
    dispatcher: str | None
    backend: str | None
    tp_overlap: bool
    ep_overlap: bool
    delay_wgrad: bool
    zero_stage: int
    bf16_optimizer: bool  # precision-aware optimizer with bf16 main grads and moments
    fp32_aware_optimizer: bool  # precision-aware optimizer with every dtype fp32
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    param_gather_with_step: bool
    rank_capacity: str | None
    paged_stash: bool
    notes: tuple[str, ...]


def read(r: Recipe) -> Settings:
    """The recipe's settings from its cells; what has no plan field goes into `notes`."""
    rt = r.runtime
    notes: list[str] = []
    label = r.precision
    fp8_recipe, gather, precision = None, False, "bf16"
    if label.startswith("FP8-CS"):
        precision, fp8_recipe, gather = "fp8", "tensorwise", True
    elif label.startswith("FP8-DS"):
        precision, fp8_recipe, gather = "fp8", "delayed", True
    elif label.startswith("FP8-blockwise"):
        precision, fp8_recipe, gather = "fp8", "blockwise", False
    elif label.startswith("MXFP8"):
        precision, fp8_recipe = "fp8", "mxfp8"
        gather = "without fp8-param-gather" not in label
    if "fp8 DPA" in label:
        notes.append("FP8 dot-product attention: no plan field")

    layout, account = None, False
    if r.split.startswith("account_for_embedding+loss"):
        account = True
    elif r.split.startswith("built-in"):
        layout = tuple(DSV3_LAYOUTS[(r.pp, r.vpp or 1)])
        if r.id in ("D3", "D6"):
            notes.append(
                "the data file lists the 8-stage (8,1) layout for vpp 2; Bridge's (8,2) layout "
                "(16 stages) is used"
            )
    elif r.split != "-":
        layout = pipeline_layout.parse(r.split)
        if layout is None:
            raise ValueError(f"{r.id}: cannot read the pipeline layout {r.split!r}")

    recompute, modules, method, nlayers = "none", (), None, None
    text = rt["recompute"]
    if m := re.fullmatch(r"full, (\w+), (\d+) layers", text):
        recompute, method, nlayers = "full", m.group(1), int(m.group(2))
    elif m := re.fullmatch(r"selective \[(.+)\]", text):
        recompute, modules = "selective", tuple(x.strip() for x in m.group(1).split(","))
    elif text.startswith("selective with empty module list"):
        notes.append("selective recompute with an empty module list: nothing recomputed")
    elif text != "none":
        raise ValueError(f"{r.id}: cannot read the recompute cell {text!r}")

    offload = 0
    if m := re.match(r"cpu_offloading, (\d+) layers", rt["offload"]):
        offload = int(m.group(1))
    elif "no effect" in rt["offload"]:
        notes.append(f"{rt['offload'].split(' set')[0]} without cpu_offloading: no effect (0)")

    dispatcher = backend = None
    d = rt["dispatcher"]
    if d.startswith("alltoall"):
        dispatcher = "alltoall"
    elif m := re.match(r"flex / (\w+)", d):
        dispatcher, backend = "flex", m.group(1)
        if "(from base)" in d:
            notes.append(
                "flex / hybridep as the base recipe sets it when built on an sm 8-10 GPU or none"
            )
    extra = re.findall(r"\((SMs \d+|\+permute fusion into hybridep)\)", d)
    if extra or "hybridep SMs" in rt["notes"]:
        notes.append(f"dispatcher tuning ({', '.join(extra) or 'hybridep SMs'}): no plan field")

    dropping = rt["dropping"]
    rank_capacity = None
    if m := re.search(r"moe_expert_rank_capacity_factor ([\d.]+)", dropping):
        rank_capacity = m.group(1)
    paged = "paged stash" in dropping

    ep_text = rt["ep_overlap"]
    ep_overlap = ep_text.startswith("on")
    delay = ep_overlap and "delay_wgrad on" in ep_text

    opt = rt["optimizer"]
    zero = 3 if "Megatron-FSDP" in opt else 1
    if zero == 3:
        notes.append(
            "Megatron-FSDP unit size 8e8, no gradient-accumulation fusion, average_in_collective "
            "off: no plan fields"
        )
    bf16_opt = "exp_avg bf16" in opt
    fp32_aware = "precision-aware optimizer" in opt and "fp32" in opt and not bf16_opt
    grad_overlap = "overlap_grad_reduce off" not in opt
    with_step = "PG-overlap-with-opt-step" in opt
    if not grad_overlap:
        notes.append("grad-reduce overlap off with param-gather overlap on: plan has both off")

    graphs = rt["graphs"]
    if not graphs.startswith("none"):
        notes.append(f"CUDA graphs ({graphs}): no plan field")
    if "TE op fuser" in graphs:
        notes.append("TE op fuser: no plan field")
    if r.family == "gpt_oss_20b":
        notes.append("Bridge's GPT-OSS-20B perf helper sets vocab 128256; the zoo's 201088 is used")
    if r.family in ("llama3_8b", "llama3_70b"):
        notes.append("Llama 3 shapes = the zoo's Llama 3.1 ones")
    return Settings(
        precision=precision,
        fp8_recipe=fp8_recipe,
        fp8_param_gather=gather,
        layout=layout,
        account_for=account,
        recompute=recompute,
        recompute_modules=modules,
        recompute_method=method,
        recompute_num_layers=nlayers,
        offload_layers=offload,
        dispatcher=dispatcher,
        backend=backend,
        tp_overlap=rt["tp_overlap"].startswith("on"),
        ep_overlap=ep_overlap,
        delay_wgrad=delay,
        zero_stage=zero,
        bf16_optimizer=bf16_opt,
        fp32_aware_optimizer=fp32_aware,
        overlap_grad_reduce=grad_overlap,
        overlap_param_gather="all param-gather overlap off" not in opt,
        param_gather_with_step=with_step,
        rank_capacity=rank_capacity,
        paged_stash=paged,
        notes=tuple(notes),
    )


# --- the recipe as Megatron-LM flags, and as a plan


Flags = dict[str, tuple[str, ...]]


def recipe_flags(r: Recipe, s: Settings) -> Flags:
    """The Megatron-LM flags (within SCOPE) that carry the recipe's settings: each Bridge config
    field in the spelling of Megatron-LM's parser (megatron/training/arguments.py)."""
    f: Flags = {
        "--tensor-model-parallel-size": (str(r.tp),),
        "--pipeline-model-parallel-size": (str(r.pp),),
        "--context-parallel-size": (str(r.cp),),
        "--micro-batch-size": (str(r.mbs),),
        "--global-batch-size": (str(r.gbs),),
        "--seq-length": (str(r.seq),),
        "--bf16": (),
        # _benchmark_common: grad_reduce_in_fp32 = False
        "--grad-reduce-in-bf16": (),
    }
    if s.layout is not None:  # Megatron derives vpp from the layout (and refuses both)
        f["--pipeline-model-parallel-layout"] = (pipeline_layout.compact(s.layout),)
    else:
        if s.account_for:
            f["--account-for-embedding-in-pipeline-split"] = ()
            f["--account-for-loss-in-pipeline-split"] = ()
        if r.vpp and r.vpp > 1:
            f["--num-virtual-stages-per-pipeline-rank"] = (str(r.vpp),)
    if r.sp:
        f["--sequence-parallel"] = ()
    if s.tp_overlap:
        f["--tp-comm-overlap"] = ()
    if s.precision == "fp8":
        f["--fp8-format"] = ("e4m3" if s.fp8_recipe == "mxfp8" else "hybrid",)
        f["--fp8-recipe"] = (str(s.fp8_recipe),)
        if s.fp8_param_gather:
            f["--fp8-param-gather"] = ()
            if s.fp8_recipe == "mxfp8":  # Bridge's MXFP8 preset
                f["--reuse-grad-buf-for-mxfp8-param-ag"] = ()
        if s.fp8_recipe == "delayed":  # Bridge's FP8-DS preset
            f["--fp8-amax-history-len"] = ("1024",)
            f["--fp8-amax-compute-algo"] = ("max",)
    if "fp8 output proj" in r.precision:
        f["--fp8-output-proj"] = ()
    f["--use-distributed-optimizer"] = ()  # on in every recipe (base), FSDP included
    if s.zero_stage == 3:
        f["--use-megatron-fsdp"] = ()
        f["--data-parallel-sharding-strategy"] = ("optim_grads_params",)
        f["--fsdp-double-buffer"] = ()
    if s.bf16_optimizer:
        f["--use-precision-aware-optimizer"] = ()
        f["--main-grads-dtype"] = ("bf16",)
        f["--exp-avg-dtype"] = ("bf16",)
        f["--exp-avg-sq-dtype"] = ("bf16",)
    elif s.fp32_aware_optimizer:
        f["--use-precision-aware-optimizer"] = ()
    if s.overlap_grad_reduce:
        f["--overlap-grad-reduce"] = ()
    if s.overlap_param_gather:
        f["--overlap-param-gather"] = ()
    if s.param_gather_with_step:
        f["--overlap-param-gather-with-optimizer-step"] = ()
    if s.offload_layers:
        f["--cpu-offloading-num-layers"] = (str(s.offload_layers),)
    if s.recompute == "full":
        f["--recompute-granularity"] = ("full",)
        f["--recompute-method"] = (str(s.recompute_method),)
        f["--recompute-num-layers"] = (str(s.recompute_num_layers),)
    elif s.recompute == "selective":
        f["--recompute-granularity"] = ("selective",)
        f["--recompute-modules"] = s.recompute_modules
    if r.is_moe:
        f["--expert-model-parallel-size"] = (str(r.ep),)
        f["--expert-tensor-parallel-size"] = (str(r.etp or r.tp),)
        f["--moe-token-dispatcher-type"] = (str(s.dispatcher),)
        if s.backend:
            f["--moe-flex-dispatcher-backend"] = (s.backend,)
        f["--moe-router-force-load-balancing"] = ()  # every MoE performance recipe
        if s.ep_overlap:
            f["--overlap-moe-expert-parallel-comm"] = ()
        if s.delay_wgrad:
            f["--delay-wgrad-compute"] = ()
        if s.paged_stash:
            f["--moe-paged-stash"] = ()
        if s.rank_capacity:
            f["--moe-expert-rank-capacity-factor"] = (s.rank_capacity,)
    if r.family == "deepseek_v3":
        groups, topk = DSV3_ROUTING
        f["--moe-router-num-groups"] = (str(groups),)
        f["--moe-router-group-topk"] = (str(topk),)
        f["--mtp-num-layers"] = ("1",)
    return f


def recipe_expandable(r: Recipe) -> bool:
    """Does the recipe's environment set PYTORCH_CUDA_ALLOC_CONF=expandable_segments? Every
    recipe does unless its row says it does not set PYTORCH_CUDA_ALLOC_CONF (the Megatron-FSDP
    ones; bridge_recipes.md, environment table)."""
    return re.search(r"does not set[^)]*PYTORCH_CUDA_ALLOC_CONF", r.env) is None


def plan_document(r: Recipe, s: Settings) -> dict[str, dict[str, Any]]:
    """The plan file's tables for the recipe (README "The plan file"): each setting in its plan
    field; what has none is left to the notes."""
    training: dict[str, Any] = {
        "seq_length": r.seq,
        "global_batch_size": r.gbs,
        "precision": s.precision,
        "main_grad_dtype": "bf16",  # grad_reduce_in_fp32 = False in every recipe
    }
    if s.bf16_optimizer:
        training["optimizer_state_dtype"] = "bf16"
    if s.precision == "fp8":
        training["fp8_recipe"] = s.fp8_recipe
        training["fp8_param_gather"] = s.fp8_param_gather
    if r.family == "deepseek_v3":
        training["moe_router_num_groups"], training["moe_router_group_topk"] = DSV3_ROUTING
    if recipe_expandable(r):
        training["expandable_segments"] = True
    parallel: dict[str, Any] = {"tp": r.tp, "pp": r.pp, "cp": r.cp}
    if r.is_moe:
        parallel.update(ep=r.ep, etp=r.etp or r.tp)
    if s.layout is not None:
        parallel["pipeline_model_parallel_layout"] = pipeline_layout.compact(s.layout)
    else:
        parallel["vpp"] = r.vpp or 1
        if s.account_for:
            parallel["account_for_embedding_in_pipeline_split"] = True
            parallel["account_for_loss_in_pipeline_split"] = True
    parallel["sequence_parallel"] = r.sp
    parallel["micro_batch_size"] = r.mbs
    parallel["zero_stage"] = s.zero_stage
    parallel["recompute"] = s.recompute
    if s.recompute == "selective":
        parallel["recompute_modules"] = list(s.recompute_modules)
    elif s.recompute == "full":
        parallel["recompute_method"] = s.recompute_method
        parallel["recompute_num_layers"] = s.recompute_num_layers
    if s.offload_layers:
        parallel["cpu_offloading_num_layers"] = s.offload_layers
    if r.is_moe:
        parallel["moe_token_dispatcher_type"] = s.dispatcher
        if s.backend:
            parallel["moe_flex_dispatcher_backend"] = s.backend
        parallel["ep_comm_overlap"] = s.ep_overlap
    parallel["tp_comm_overlap"] = s.tp_overlap
    parallel["overlap_grad_reduce"] = s.overlap_grad_reduce
    # Megatron-LM's validate_args: no param-gather overlap without grad-reduce overlap
    parallel["overlap_param_gather"] = s.overlap_param_gather and s.overlap_grad_reduce
    return {
        "model": {"name": r.model},
        "cluster": {"gpu": GPUS[r.gpu], "num_gpus": r.n},
        "training": training,
        "parallel": parallel,
    }


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML spelling for {v!r}")


def plan_text(r: Recipe, s: Settings) -> str:
    """The plan file: a header naming the recipe and its source, then the tables."""
    lines = [
        f"# {r.id}: Megatron-Bridge {r.function}",
        f"# (src/megatron/bridge/perf_recipes/{r.source} @ {BRIDGE_COMMIT[:8]}), its settings as",
        "# benchmarks/data/bridge_recipes.md lists them. Written by benchmarks/recipes.py",
        "# --write-plans; the recipe table: python benchmarks/recipes.py",
    ]
    for n in s.notes:
        lines += textwrap.wrap(n, 98, initial_indent="# note: ", subsequent_indent="#   ")
    for table, values in plan_document(r, s).items():
        lines += ["", f"[{table}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


# --- what launch emits, against the recipe


def emitted_flags(plan: Plan) -> Flags:
    """`planner launch`'s Megatron-LM flags within SCOPE, a layers-per-virtual-stage count read
    as the virtual stages per rank it means, a pipeline layout as Megatron expands it."""
    lay = plan.require_layout()
    out: Flags = {}
    for arg in arguments(plan).flat_args():
        flag, values = arg[0], tuple(arg[1:])
        if flag == "--num-layers-per-virtual-pipeline-stage":
            flag, values = "--num-virtual-stages-per-pipeline-rank", (str(lay.vpp),)
        if flag == "--pipeline-model-parallel-layout":
            values = (pipeline_layout.compact(pipeline_layout.parse(values[0]) or ()),)
        if flag in SCOPE:
            out[flag] = values
    return out


@dataclass(frozen=True)
class Difference:
    flag: str
    recipe: tuple[str, ...] | None  # None: the recipe does not set it
    launch: tuple[str, ...] | None  # None: launch does not emit it

    def text(self) -> str:
        def spell(v: tuple[str, ...] | None) -> str:
            return "-" if v is None else " ".join((self.flag, *v))

        if self.launch is None:
            return f"recipe only: {spell(self.recipe)}"
        if self.recipe is None:
            return f"launch only: {spell(self.launch)}"
        both = f"recipe {' '.join(self.recipe)} / launch {' '.join(self.launch)}"
        return f"differ: {both} ({self.flag})"


def compare(want: Flags, got: Flags) -> list[Difference]:
    return [
        Difference(flag, want.get(flag), got.get(flag))
        for flag in sorted(set(want) | set(got))
        if want.get(flag) != got.get(flag)
    ]


def recipe_connections(r: Recipe) -> str | None:
    m = re.search(r"CUDA_DEVICE_MAX_CONNECTIONS=(\d+)", r.env)
    return m.group(1) if m else None


@dataclass
class Row:
    recipe: Recipe
    settings: Settings | None = None
    plan: Plan | None = None
    error: str | None = None
    fits: bool | None = None
    peak_gib: float = 0.0
    capacity_gib: float = 0.0
    components: list[tuple[str, float]] = field(default_factory=list)
    tokens_per_s_per_gpu: float = 0.0
    differences: list[Difference] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    connections: tuple[str | None, str | None] = (None, None)


def evaluate(r: Recipe) -> Row:
    """Load the recipe's plan file, apply Megatron's rules, check its memory, predict its
    throughput and compare launch's flags with the recipe's."""
    row = Row(r)
    if r.skip:
        return row
    s = row.settings = read(r)
    try:
        plan = row.plan = rules.check_plan(load_plan(r.plan_path))
        args = emitted_flags(plan)
    except InputError as e:
        row.error = str(e)
        return row
    lay = plan.require_layout()
    rep = memory.estimate(plan.job, lay)
    row.fits = rep.fits
    row.peak_gib, row.capacity_gib = rep.peak / GIB, rep.capacity / GIB
    w = rep.worst
    parts = {
        "weights": w.weights,
        "grads": w.grads,
        "optimizer": w.optimizer,
        "activations": w.activations,
        "other": w.other,
    }
    row.components = sorted(((k, v / GIB) for k, v in parts.items()), key=lambda kv: -kv[1])
    row.tokens_per_s_per_gpu = cost.estimate(plan.job, lay).tokens_per_s_per_gpu
    row.differences = compare(recipe_flags(r, s), args)
    row.warnings = [v.message for v in rules.warnings(plan.job, lay)]
    env = {e.name: e.value for e in environment(plan)}
    row.connections = (recipe_connections(r), env.get("CUDA_DEVICE_MAX_CONNECTIONS"))
    return row


# --- printing


def verdict(row: Row) -> str:
    if row.recipe.skip:
        return "skip: " + ("NVFP4" if row.recipe.skip.startswith("NVFP4") else "infeasible")
    if row.error is not None:
        return "REJECTED"
    word = "fits" if row.fits else "NO FIT"
    return f"{word} {row.peak_gib:.0f}/{row.capacity_gib:.0f}"


def table(rows: list[Row]) -> None:
    head = (
        "id",
        "model",
        "GPU",
        "N",
        "plan file (examples/recipes/)",
        "verdict GiB",
        "tok/s/GPU",
        "flag diffs",
    )
    widths = (4, 16, 6, 5, 60, 16, 10, 10)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        r = row.recipe
        plan = "-" if r.skip else r.plan_path.name
        tps = f"{row.tokens_per_s_per_gpu:,.0f}" if row.fits is not None else "-"
        diffs = str(len(row.differences)) if row.fits is not None else "-"
        cells = (r.id, r.model, r.gpu, str(r.n), plan, verdict(row), tps, diffs)
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))


def details(rows: list[Row]) -> None:
    print("\nPer recipe: flag differences (launch against the recipe), environment, notes")
    for row in rows:
        r = row.recipe
        if r.skip:
            continue
        lines = [d.text() for d in row.differences if d.flag not in WHY]
        if row.error:
            lines.insert(0, f"rejected: {row.error}")
        want, got = row.connections
        if want is not None and want != got:  # None: the recipe inherits it (not listed)
            lines.append(f"env CUDA_DEVICE_MAX_CONNECTIONS: recipe {want} / launch {got}")
        lines += [f"warns: {w}" for w in row.warnings]
        lines += [f"note: {n}" for n in row.settings.notes] if row.settings else []
        if lines:
            print(f"{r.id} {r.function}")
            print("".join(f"    {x}\n" for x in lines), end="")
    print("\nDifferences every recipe that shows them shares (reason):")
    seen = sorted({d.flag for row in rows for d in row.differences if d.flag in WHY})
    for flag in seen:
        who = [row.recipe.id for row in rows if any(d.flag == flag for d in row.differences)]
        print(f"  {flag}: {WHY[flag]} [{', '.join(who)}]")


def summary(rows: list[Row]) -> None:
    done = [row for row in rows if not row.recipe.skip]
    skipped = [row for row in rows if row.recipe.skip]
    fit = [row for row in done if row.fits]
    nofit = [row for row in done if row.fits is False]
    bad = [row for row in done if row.error]
    print(
        f"\n{len(rows)} recipes: {len(done)} modelled ({len(fit)} fit, {len(nofit)} do not, "
        f"{len(bad)} rejected by Megatron's rules), {len(skipped)} skipped"
    )
    for reason in sorted({row.recipe.skip or "" for row in skipped}):
        ids = [row.recipe.id for row in skipped if row.recipe.skip == reason]
        print(f"  skipped ({reason}): {', '.join(ids)}")
    if nofit:
        print("Do not fit (worst stage: peak / usable GiB, over by; largest components):")
        for row in nofit:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in row.components[:3])
            over = row.peak_gib - row.capacity_gib
            print(
                f"  {row.recipe.id:4} {row.recipe.model} on {row.recipe.n} {row.recipe.gpu}: "
                f"{row.peak_gib:.1f} / {row.capacity_gib:.1f} (+{over:.1f}, "
                f"{over / row.capacity_gib:+.0%}); {parts}"
            )
    emitted = sum(len(row.differences) for row in done)
    print(f"{emitted} flag differences in all ({len(WHY)} kinds explained once above)")


def write_plans(recipes: list[Recipe]) -> Iterator[Path]:
    PLANS.mkdir(parents=True, exist_ok=True)
    for r in recipes:
        if r.skip:
            continue
        r.plan_path.write_text(plan_text(r, read(r)))
        yield r.plan_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-plans", action="store_true", help="rewrite examples/recipes/*.toml")
    a = p.parse_args()
    recipes = load_recipes()
    if a.write_plans:
        written = list(write_plans(recipes))
        print(f"wrote {len(written)} plan files under {PLANS.relative_to(REPO)}")
        return
    rows = [evaluate(r) for r in recipes]
    table(rows)
    details(rows)
    summary(rows)


if __name__ == "__main__":
    main()
