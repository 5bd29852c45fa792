"""The catalog's tables (`planner catalog`): its GPUs, its models, and one entry's fields."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from planner.inputs.arch import ModelArch
from planner.inputs.hardware import GpuSpec
from planner.model import params


def billions(n: float) -> str:
    return f"{n / 1e9:.2f}B"


def gpu_table(gpus: list[GpuSpec]) -> Table:
    t = Table(title="GPUs (hardware_catalog/gpus)")
    for col in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GiB", "scale-up", "node", "TDP W"):
        t.add_column(col, justify="left" if col in ("name", "scale-up") else "right")
    for g in gpus:
        t.add_row(
            g.name,
            f"{g.peak_tflops_bf16:g}",
            f"{g.peak_tflops_fp8:g}" if g.peak_tflops_fp8 else "-",
            f"{g.memory_gib:.1f}",
            f"{g.scaleup_name} x{g.scaleup_domain_gpus} "
            f"{g.scaleup_bandwidth_gb_per_s_per_gpu:g} GB/s",
            str(g.gpus_per_node),
            f"{g.tdp_w:g}",
        )
    return t


def model_table(models: list[ModelArch]) -> Table:
    t = Table(
        title="Models (model_zoo)",
        caption="params: the main model, embedding and output layer counted, MTP layers not "
        "(DeepSeek's 671B); active: what one token uses, the input embedding table counted "
        "whole (OpenAI's 5.1B for gpt-oss-120b leaves it out: 5.7B here)",
    )
    for col in ("name", "layers", "hidden", "heads/groups", "experts", "params", "active"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for m in models:
        experts = f"{m.num_moe_experts} top-{m.moe_router_topk}" if m.is_moe else "-"
        t.add_row(
            m.name,
            str(m.num_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.query_groups}",
            experts,
            billions(params.params_total(m)),
            billions(params.params_active(m)),
        )
    return t


def fields_table(title: str, data: dict[str, Any]) -> Table:
    t = Table(title=title, show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in data.items():
        t.add_row(k, "" if v is None else str(v))
    return t
