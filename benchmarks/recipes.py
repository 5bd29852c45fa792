"""NVIDIA's Megatron-Bridge performance pre-training recipes as planner plan files: does each fit,
what does planner predict, and does `planner launch` emit the flags the recipe sets?

    python benchmarks/recipes.py                 # the table, then each recipe's differences
    python benchmarks/recipes.py --write-plans   # rewrite examples/recipes/*.toml from the data

The recipes' settings are read from benchmarks/data/bridge_recipes.md (259 recipes of
NVIDIA-NeMo/Megatron-Bridge @ 067f987d: Llama 3 8B / 70B, Llama 3.1 405B, Qwen3 30B-A3B and
235B-A22B, Qwen3-Next 80B-A3B, GPT-OSS 120B / 20B, DeepSeek-V3, Kimi K2, Nemotron 3 Nano / Super /
Ultra, Nemotron-H 56B on H100, B200, GB200, B300 and GB300).
Settings only: no throughput figure of Megatron-Bridge's was read or is printed; "tok/s/GPU" is
planner's own prediction. Each modelled recipe has a plan file under examples/recipes/, written by
`plan_document` from the same row (so `--write-plans` reproduces them); the recipe's
Megatron-LM flags are written independently by `recipe_flags`, the Megatron-LM spelling of each
Bridge setting, and compared with what `planner.emit.megatron` emits for the plan, limited to
the layout, precision, recompute and MoE flags (`SCOPE`). The rows are read by
benchmarks/recipe_data.py and their settings by recipe_settings.py, the flags written and
compared by benchmarks/recipe_flags.py; this script writes the plan files, evaluates each recipe
and prints the table.

Skipped, and listed as such: the recipes the data file marks INFEASIBLE (their expert x pipeline
size does not divide their GPU count, or their global batch their data-parallel ranks, so they
cannot run at the size in their name). The NVFP4
recipes are plans of precision "fp4", with fp4_param_gather and bf16 first / last layers as each
recipe sets them (bridge_recipes.md, "NVFP4 per recipe"). Settings with no plan field are named
in each recipe's notes.
The data file's development ("_dev") recipes are not among the 259 and are not modelled.
Six 128-GPU Llama 3.1 405B recipes (L21-L23, L38-L40) whose code contradicts their docstrings
are modelled from the legacy presets the docstrings describe, each named in its notes
(bridge_recipes.md, "Legacy presets modelled in place of the flat code"); the B300 / GB300
128-GPU ones with the same history (L54-L57, L73-L76) are modelled as their code has them.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.recipe_data import (
    BRIDGE_COMMIT,
    CP_COMM_TYPE,
    DSV3_ROUTING,
    GPUS,
    MTP,
    PLANS,
    REPO,
    VOCAB,
    Recipe,
    load_recipes,
)
from benchmarks.recipe_flags import (
    WHY,
    Difference,
    compare,
    emitted_flags,
    recipe_connections,
    recipe_flags,
)
from benchmarks.recipe_settings import Settings, fsdp_fields, read
from planner.emit.common import environment
from planner.inputs import catalog, hybrid, pipeline_layout
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan
from planner.inputs.plan_writer import toml_value
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.search import rules

# --- the recipe as a plan


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
    if s.optimizer == "muon":
        # Bridge's dist_muon runs the layer-wise optimizer's legacy whole-parameter path: its DDP
        # wrap (models/model_provider.py:698-706) passes no use_layer_wise_distributed_optimizer
        # (False: Megatron-LM 2a75ac12 training/models/dist_utils.py:270) and Kimi leaves
        # ddp.use_distributed_optimizer False (recipes/kimi/h100/kimi_k2.py:74): one unpadded
        # buffer, parameters dealt whole (Megatron-LM d98e8a64 core/optimizer/__init__.py:827-835)
        training["optimizer"] = "muon"
        training["muon_tp_mode"] = s.muon_tp_mode
        training["muon_whole_params"] = True
    if s.optimizer_instances > 1:
        training["optimizer_instances"] = s.optimizer_instances
        if s.outer_optim:
            training["outer_dp_sharding_strategy"] = "optim"
    if s.precision == "fp8":
        training["fp8_recipe"] = s.fp8_recipe
        training["fp8_param_gather"] = s.fp8_param_gather
    if s.precision == "fp4":
        training["fp4_param_gather"] = s.fp4_param_gather
    optional = ("bf16_layers_at_start", "bf16_layers_at_end", "fp8_attention", "fp8_output_proj")
    for name in (*optional, "moe_fused_grouped_mlp"):
        if getattr(s, name):  # written where the recipe sets them (0 / false: the plan default)
            training[name] = getattr(s, name)
    if r.family == "deepseek_v3":
        training["moe_router_num_groups"], training["moe_router_group_topk"] = DSV3_ROUTING
    if s.force_load_balancing:  # random routing: every MoE recipe but GPT-OSS-20B's (data file)
        training["moe_router_force_load_balancing"] = True
    if s.rank_capacity:  # HybridEP's per-rank budget, and the paged stash beside it
        training["moe_expert_rank_capacity_factor"] = float(s.rank_capacity)
    if s.paged_stash:
        training["moe_paged_stash"] = True
    if s.graph_modules is not None:
        training["cuda_graphs"] = True
        if s.graph_modules:
            training["cuda_graph_modules"] = list(s.graph_modules)
    training.update(s.extra)  # TE's per-layer graphs; the native loss (recipe_settings._extra)
    if recipe_expandable(r):
        training["expandable_segments"] = True
    # no recipe runs hidden or attention dropout at Bridge 067f987d: the model bridges set
    # hidden_dropout = 0.0 (models/llama/llama_bridge.py:55, deepseek/deepseek_v3_bridge.py:87,
    # kimi/kimi_bridge.py:76, qwen/qwen3_moe_bridge.py:59, gpt_oss/gpt_oss_bridge.py:76) and take
    # attention_dropout from the HF config (conversion/model_bridge.py CONFIG_MAPPING: 0.0 in the
    # published Llama 3.1, Qwen3, DeepSeek-V3 and gpt-oss configs, tests/data/hf); the Nemotron
    # recipes' HybridModelProvider defaults both to 0.0 (hybrid/hybrid_provider.py:143-144); no
    # recipe overrides them: no dropout masks
    training["attention_dropout"] = training["hidden_dropout"] = False
    parallel: dict[str, Any] = {"tp": r.tp, "pp": r.pp, "cp": r.cp}
    if r.cp > 1 and r.family in CP_COMM_TYPE:
        parallel["cp_comm_type"] = CP_COMM_TYPE[r.family]
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
    parallel.update(zero_stage=s.zero_stage, **fsdp_fields(s))  # double buffer, unit size
    parallel["recompute"] = s.recompute
    if s.recompute == "selective":
        parallel["recompute_modules"] = list(s.recompute_modules)
    elif s.recompute == "full":
        parallel["recompute_method"] = s.recompute_method
        parallel["recompute_num_layers"] = s.recompute_num_layers
    if s.offload_layers:
        parallel["cpu_offloading_num_layers"] = s.offload_layers
    if s.offload_modules:
        parallel["offload_modules"] = list(s.offload_modules)
    if r.is_moe:
        parallel["moe_token_dispatcher_type"] = s.dispatcher
        if s.backend:
            parallel["moe_flex_dispatcher_backend"] = s.backend
        if s.dispatcher_sms is not None:
            parallel["moe_flex_dispatcher_num_sms"] = s.dispatcher_sms
        parallel["ep_comm_overlap"] = s.ep_overlap
    parallel["tp_comm_overlap"] = s.tp_overlap
    parallel["overlap_grad_reduce"] = s.overlap_grad_reduce
    # Megatron-LM's validate_args: no param-gather overlap without grad-reduce overlap
    parallel["overlap_param_gather"] = s.overlap_param_gather and s.overlap_grad_reduce
    return {
        "model": _model_table(r),
        "cluster": {"gpu": GPUS[r.gpu], "num_gpus": r.n},
        "training": training,
        "parallel": parallel,
    }


def _model_table(r: Recipe) -> dict[str, Any]:
    """The zoo model by name, or inline with the vocabulary (`VOCAB`) or the repeated MTP layer
    (`MTP`) the recipe's family sets, named "<zoo name>+recipe"."""
    vocab, mtp = VOCAB.get(r.family), MTP.get(r.family)
    if vocab is None and mtp is None:
        return {"name": r.model}
    arch = catalog.get_model(r.model)
    fields = arch.model_dump(exclude_defaults=True, exclude={"display_name"})
    changed = []
    if vocab is not None:
        fields["vocab_size"] = vocab
        changed.append(f"vocab_size {vocab} (VOCAB)")
    if mtp is not None:
        depth, depths = mtp
        pattern = replace(hybrid.parse(fields["hybrid_layer_pattern"]), mtp=depth, depths=depths)
        fields.update(
            hybrid_layer_pattern=pattern.text, mtp_num_layers=depths, mtp_use_repeated_layer=True
        )
        changed.append(f"{depths} MTP depths of one repeated '{depth}' layer (MTP)")
    fields["source"] = f"{arch.source}; {', '.join(changed)} as the recipe sets it"
    # its own name: a zoo model's beside fields that change it is refused (plan_resolve)
    fields["name"] = f"{r.model}+recipe"
    return fields


def plan_text(r: Recipe, s: Settings) -> str:
    """The plan file: a header naming the recipe and its source, then the tables."""
    lines = [
        f"# {r.id}: Megatron-Bridge {r.function}",
        f"# (src/megatron/bridge/perf_recipes/{r.source} @ {BRIDGE_COMMIT[:8]}), its settings as",
        "# benchmarks/data/bridge_recipes.md lists them. Written by benchmarks/recipes.py",
        "# --write-plans; the recipe table: python benchmarks/recipes.py",
    ]
    if r.legacy:
        lines[2] = (
            "# benchmarks/data/bridge_recipes.md lists them, from the legacy preset its docstring"
        )
        lines.insert(3, "# describes (see the note). Written by benchmarks/recipes.py")
    for n in s.notes:
        lines += textwrap.wrap(n, 98, initial_indent="# note: ", subsequent_indent="#   ")
    for table, values in plan_document(r, s).items():
        lines += ["", f"[{table}]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


# --- each recipe: check, predict, compare


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
        return "skip: infeasible"
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
