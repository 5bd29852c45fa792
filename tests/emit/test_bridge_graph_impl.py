"""Per-layer CUDA graphs launched to Megatron-Bridge (QA Q3 #2): Bridge 067f987d runs them with
Transformer Engine only (utils/cuda_graph.py:146-154 raises ValueError on cuda_graph_impl "local"
outside full-iteration graphs; gpt_provider.py:233 and training/config.py:1399 call it), so the
override file writes transformer_engine for a plan of local graphs or of none named. Its header
must price that: Transformer Engine's graphs capturing moe_router without moe_preprocess turn the
pre-MLP norm's recompute off (transformer_layer.py:481-487, 503-521 @d98e8a64), where the local
implementation (which captures both) keeps it; and Megatron-Core asserts moe recompute away
beside a captured router under them (transformer_config.py:2860-2869), which the launch refuses.

Oracles: those source lines; planner's own pricing of the plan with cuda_graph_impl =
"transformer_engine" (the value the file writes, model.cuda_graph_impl), and the hand count of
the pre-MLP norm output the TE graphs keep: 48 layers x 8048 tokens x 2048 hidden x 2 bytes =
1.4736 GiB (Qwen3-30B-A3B, tp 1, micro-batch 1), and their three static buffers shared by every
layer (`planner.model.graph_buffers`), 3 x 8048 x 2048 x 2 bytes = 0.0921 GiB.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from cli_run import run

PLAN = """[model]
name = "qwen3-30b-a3b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 64
[training]
seq_length = 8048
global_batch_size = 256
cuda_graphs = true
cuda_graph_modules = ["attn", "moe_router"]
{impl}
[parallel]
tp = 1
pp = 1
ep = 8
micro_batch_size = 1
zero_stage = 2
recompute = "selective"
recompute_modules = {modules}
"""


def _write(tmp_path: Path, impl: str | None, modules: str = '["layernorm", "moe_act"]') -> Path:
    line = f'cuda_graph_impl = "{impl}"' if impl else ""
    path = tmp_path / f"graphs-{impl}.toml"
    path.write_text(PLAN.format(impl=line, modules=modules), encoding="utf-8")
    return path


def _peak(text: str) -> float:
    found = re.search(r"peak memory ([0-9.]+) GiB of", text)
    assert found is not None, text[:600]
    return float(found.group(1))


@pytest.mark.parametrize("impl", [None, "local"])
def test_bridge_launches_and_prices_transformer_engine_graphs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], impl: str | None
) -> None:
    code, out, _ = run(
        ["launch", str(_write(tmp_path, impl)), "--target", "megatron-bridge"], capsys
    )
    assert code == 0
    assert yaml.safe_load(out)["model"]["cuda_graph_impl"] == "transformer_engine"
    assert "utils/cuda_graph.py:146-154" in out  # the note says so
    _, te, _ = run(["check", str(_write(tmp_path, "transformer_engine")), "--json"], capsys)
    planned_te = json.loads(te)["memory"]
    # before: the header priced local graphs (76.5 GiB, fits) for a file that runs TE's (78.1)
    assert _peak(out) == pytest.approx(planned_te["peak_gib"], abs=0.05)
    _, local, _ = run(["check", str(_write(tmp_path, "local")), "--json"], capsys)
    kept = 48 * 8048 * 2048 * 2 / 2**30  # the pre-MLP norm outputs TE's graphs keep
    kept += 3 * 8048 * 2048 * 2 / 2**30  # their three shared static buffers (TE graph.py
    # :803-818, :880-906 @d0067d0d); the local graphs hold none (cuda_graphs.py:1632-1635)
    kept += 48 * 8048 * 128 * (2 + 1) / 2**30  # TE's router graphs' outputs the eager layer
    # frees: the probs (bf16) and routing map (bools) of 128 experts (moe_utils.py:936, :954,
    # :1567 @d98e8a64)
    held = planned_te["stages"][0]["allocated_gib"]
    assert held - json.loads(local)["memory"]["stages"][0]["allocated_gib"] == pytest.approx(
        kept, abs=0.005
    )


def test_bridge_refuses_moe_recompute_beside_a_captured_router(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _write(tmp_path, None, '["moe"]')
    # before: exit 0, a file Megatron-Core asserts against at start-up
    code, _, err = run(["launch", str(plan), "--target", "megatron-bridge"], capsys)
    assert code == 2
    assert "parallel.recompute_modules" in err and "moe_router" in err
    # the Megatron-LM targets write --cuda-graph-impl local, which recomputes it
    code, out, _ = run(["launch", str(plan), "--target", "megatron-args"], capsys)
    assert code == 0 and "--cuda-graph-impl local" in out
    # check takes the plan and says which target refuses it
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 0 and "launch --target megatron-bridge refuses this plan" in err
