"""Settings that change nothing for their job and layout are named (planner.inputs.inert), and
only those: the oracle is planner's own estimates, memory per stage and step time identical with
and without the setting for every case named, and different for the same setting where it is
read (so the comparison can fail). Each case's reason, from the training code, is beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import write

from planner.inputs.plan import load_plan
from planner.model import cost, memory

LLAMA = 'name = "llama3.1-8b"'  # no QK layernorm, no experts
QWEN3_MOE = 'name = "qwen3-30b-a3b"'  # QK layernorm; 128 experts, none shared, no groups
SHARED_MOE = 'name = "deepseek-v2-lite"'  # MLA; shared experts


def _text(model: str, training: str, parallel: str) -> str:
    return (
        f'[model]\n{model}\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        f"[training]\nseq_length = 4096\nglobal_batch_size = 64\n{training}"
        f"[parallel]\n{parallel}"
    )


def _with_and_without(
    tmp_path: Path, model: str, training: str, parallel: str, table: str, line: str
) -> tuple[tuple[object, float], tuple[object, float], list[str]]:
    """(memory per stage, step time) without and with `line` in `table`, and the fields named."""
    estimates: list[tuple[object, float]] = []
    named: list[str] = []
    for given in ("", line + "\n"):
        text = _text(
            model,
            training + (given if table == "training" else ""),
            parallel + (given if table == "parallel" else ""),
        )
        plan = load_plan(write(tmp_path, text, f"plan{len(estimates)}.toml"))
        assert plan.layout is not None
        stages = memory.estimate(plan.job, plan.layout).stages
        estimates.append((stages, cost.estimate(plan.job, plan.layout).step_time_s))
        named = [field for field, _ in plan.inert]
    return estimates[0], estimates[1], named


TP2 = "tp = 2\npp = 1\n"
TP1 = "tp = 1\npp = 1\n"
GRAPHS = 'cuda_graphs = true\ncuda_graph_modules = ["attn", "moe_router", "moe_preprocess"]\n'

INERT = [
    # Megatron-FSDP's settings below ZeRO 2: plain DDP / the distributed optimizer run
    (LLAMA, "", TP2 + "zero_stage = 1\n", "parallel", "fsdp_double_buffer = true"),
    (LLAMA, "", TP2 + "zero_stage = 0\n", "parallel", "fsdp_double_buffer = true"),
    (LLAMA, "", TP2 + "zero_stage = 1\n", "parallel", "suggested_communication_unit_size = 10000"),
    (LLAMA, "", TP2 + "zero_stage = 1\n", "training", 'fsdp_grad_comm_dtype = "bf16"'),
    # attention.py:1765-1766 d98e8a64: the realtime test returns without QK layernorm
    (LLAMA, "", TP2, "training", "test_mode = true"),
    # the masked softmax is the unfused attention's; flash attention (the default) has none
    (LLAMA, "", TP2, "training", "masked_softmax_fusion = false"),
    # tp 1: no TP collective, no userbuffers, no sequence parallelism
    (LLAMA, "", TP1, "training", "tp_userbuffers = true"),
    (LLAMA, "", TP1, "training", "sp_keeps_gathered_input = true"),
    (LLAMA, "", TP1, "training", "tp_backward_overlap = false"),
    # moe_layer.py:345-353 d98e8a64: the dispatcher is given shared experts only where built
    (QWEN3_MOE, "", TP2 + "ep = 4\n", "parallel", "moe_shared_expert_overlap = true"),
    (QWEN3_MOE, GRAPHS, TP2 + "ep = 4\n", "parallel", "moe_shared_expert_overlap = true"),
    # moe_utils.py:868 d98e8a64: group-limited top-k only `if group_topk`
    (QWEN3_MOE, "", TP1 + "ep = 8\n", "training", "moe_router_num_groups = 4"),
]


@pytest.mark.parametrize(
    ("model", "training", "parallel", "table", "line"), INERT, ids=[c[4] for c in INERT]
)
def test_a_setting_named_inert_changes_no_estimate(
    model: str, training: str, parallel: str, table: str, line: str, tmp_path: Path
) -> None:
    without, given, named = _with_and_without(tmp_path, model, training, parallel, table, line)
    assert given == without
    assert named == [f"{table}.{line.split(' = ')[0]}"]


READ = [
    # the same settings where they are read: each changes memory or step time, and is not named
    (LLAMA, "", TP2 + "zero_stage = 2\n", "parallel", "fsdp_double_buffer = true"),
    (LLAMA, "", TP2 + "zero_stage = 3\n", "parallel", "suggested_communication_unit_size = 10000"),
    (LLAMA, "", TP2 + "zero_stage = 3\n", "training", 'fsdp_grad_comm_dtype = "bf16"'),
    (QWEN3_MOE, "", TP2 + "ep = 4\n", "training", "test_mode = true"),
    (  # Megatron's local attention, softmax in fp32: its fused kernel keeps 2 bytes a score,
        # the torch softmax the flag turns to 4 + 2 (planner.model.scores)
        LLAMA,
        'flash_attention = false\nunfused_attention = "local_fp32"\n',
        TP2,
        "training",
        "masked_softmax_fusion = false",
    ),
    (LLAMA, "", TP2, "training", "tp_userbuffers = true"),
    (LLAMA, "", TP2, "training", "sp_keeps_gathered_input = true"),
    (LLAMA, "", TP2, "training", "tp_backward_overlap = false"),
    (SHARED_MOE, "", TP2 + "ep = 4\n", "parallel", "moe_shared_expert_overlap = true"),
]


@pytest.mark.parametrize(
    ("model", "training", "parallel", "table", "line"), READ, ids=[c[4] for c in READ]
)
def test_the_same_setting_where_it_is_read_is_not_named(
    model: str, training: str, parallel: str, table: str, line: str, tmp_path: Path
) -> None:
    without, given, named = _with_and_without(tmp_path, model, training, parallel, table, line)
    assert given != without
    assert named == []


def test_routing_groups_with_a_group_top_k_are_not_named(tmp_path: Path) -> None:
    # with moe_router_group_topk Megatron routes by group (moe_utils.py:868 d98e8a64); inside one
    # node of 8 GPUs that changes no estimate, so only the naming is asserted here
    training = "moe_router_group_topk = 2\n"
    _, _, named = _with_and_without(
        tmp_path, QWEN3_MOE, training, TP1 + "ep = 8\n", "training", "moe_router_num_groups = 4"
    )
    assert named == []
