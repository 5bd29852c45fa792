"""A torchtitan job config TOML read as e347b1e5 runs it: `[validation] enable` adds the validation
forward's peak beside the states (planner.model.titan_validation), `debug.deterministic` leaves
PyTorch's NaN fill of empty tensors on (planner.model.determinism), and
`parallelism.context_parallel_rotate_method` never reaches training (a note).

Oracles: torchtitan e347b1e5 validate.py:158-166, :250-255 (no_grad, the whole validation batch
through the model, then the loss), train.py:550 (zero_grad at the next step) and :684-689
(validation after the step), components/loss.py:20-27 (cross_entropy on pred.float()),
job_config.py:960-966 (validation local_batch_size 8, seq_len 2048); distributed/utils.py:114-124
(use_deterministic_algorithms, no fill_uninitialized_memory = False, which b5bcd76c
distributed/utils.py:201-206 adds); distributed/utils.py:200-216 and validate.py:207-213 (the
only set_rotate_method). Hand arithmetic on Llama 3.1 8B: hidden 4096, FFN 14336, vocabulary
128256.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from jobs import job

from planner.inputs import torchtitan_config
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan
from planner.model import determinism, memory, titan_validation

BASE = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""


def _load(tmp_path: Path, extra: str) -> Plan:
    path = tmp_path / "job.toml"
    path.write_text(BASE + extra)
    return torchtitan_config.load(path, "h100-sxm-80gb", 8)


def test_validation_holds_the_whole_batch_of_logits() -> None:
    """Validation batch 8 x 8192 = 65536 tokens, tp 1, eager loss: the loss holds 10 B a logit
    (bf16 logits 2, fp32 upcast 4, fp32 log-softmax 4): 10 x 65536 x 128256 = 84,053,852,160 B,
    with the final norm's output 2 x 65536 x 4096 = 536,870,912 B; a layer holds 2 x (2 x 65536
    x 4096 + 3 x 65536 x 14336) = 6,710,886,400 B, less."""
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 8, framework="torchtitan")
    titan = j.titan.model_copy(update={"validation_batch": 8, "validation_seq_len": 8192})
    j = replace(j, torchtitan=titan)
    got = titan_validation.validation_bytes(j, Layout(dp=8), True)
    assert got == 84_053_852_160 + 536_870_912
    assert titan_validation.validation_bytes(j, Layout(dp=8), False) == 6_710_886_400


def test_torchtitans_own_8b_toml_with_validation_does_not_fit(tmp_path: Path) -> None:
    """torchtitan's llama3_8b.toml with [validation] enable, seq_len 8192: the loss alone holds
    84,053,852,160 B = 78.3 GiB (test above), over the 77.25 GiB an H100 gives with 3% kept
    free, whatever the states; without validation the plan fits (its training peak is far
    below: selective per-op checkpointing, one 8192-token sequence)."""
    on = _load(tmp_path, "[validation]\nenable = true\nseq_len = 8192\n")
    assert on.job.titan.validation_batch == 8  # job_config.py:960's default
    assert on.job.titan.validation_seq_len == 8192
    assert on.layout is not None
    rep = memory.estimate(on.job, on.layout)
    assert not rep.fits and rep.worst.at_validation
    off = _load(tmp_path, "[validation]\nenable = false\nseq_len = 8192\n")
    assert off.job.titan.validation_batch == 0
    assert off.layout is not None and memory.estimate(off.job, off.layout).fits


def test_an_e347b1e5_deterministic_job_fills_its_allocations(tmp_path: Path) -> None:
    """e347b1e5 leaves fill_uninitialized_memory on: a TOML's deterministic job is charged the
    fills (DETERMINISTIC_ISSUE on its host issue); compiled, inductor's own buffers skip the
    fill (pytorch/pytorch issue 174386): not charged; b5bcd76c's turns it off (a plan's
    torchtitan job without deterministic_fill)."""
    plan = _load(tmp_path, "[debug]\ndeterministic = true\n")
    assert plan.job.deterministic and plan.job.titan.deterministic_fill
    assert determinism.fills(plan.job)
    assert determinism.issue_factor(plan.job) == determinism.DETERMINISTIC_ISSUE
    assert determinism.attention_bwd_factor(plan.job) == 1.0  # Transformer Engine's only
    compiled = _load(tmp_path, "[debug]\ndeterministic = true\n[compile]\nenable = true\n")
    assert compiled.job.titan.deterministic_fill and not determinism.fills(compiled.job)
    off = plan.job.titan.model_copy(update={"deterministic_fill": False})
    later = replace(plan.job, torchtitan=off)
    assert not determinism.fills(later)


def test_the_rotate_method_is_noted_not_planned(tmp_path: Path) -> None:
    """alltoall never reaches e347b1e5's training: the plan is the all-gather's, with a note."""
    text = "context_parallel_degree = 8\ncontext_parallel_rotate_method = "
    cp = BASE.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1")
    path = tmp_path / "cp.toml"
    path.write_text(cp.replace("[parallelism]\n", f'[parallelism]\n{text}"alltoall"\n'))
    plan = torchtitan_config.load(path, "h100-sxm-80gb", 8)
    notes = dict(plan.inert)
    assert "set_rotate_method" in notes["parallelism.context_parallel_rotate_method"]
    path.write_text(cp.replace("[parallelism]\n", f'[parallelism]\n{text}"allgather"\n'))
    assert not torchtitan_config.load(path, "h100-sxm-80gb", 8).inert


def test_a_moe_layer_holds_every_routed_copy_it_receives_at_any_ep() -> None:
    # Qwen3-30B-A3B, validation 8 x 4,096 on a rank without the loss: the layer's forward holds
    # the residual in and out (2 T h) and the experts' three [rows, expert_ffn] tensors, rows
    # = T x topk routed copies (each rank receives as many as it sends, on average: the
    # training path's k x local x load, planner.model.moe_activations), in bf16; ep changes
    # none of it. T = 32,768: 2 x (2 x 32,768 x 2,048 + 3 x 262,144 x 768) bytes = 1.375 GiB.
    j = job("qwen3-30b-a3b", "h100-sxm-80gb", 16, 4096, 16, framework="torchtitan")
    titan = j.titan.model_copy(update={"validation_batch": 8, "validation_seq_len": 4096})
    j = replace(j, torchtitan=titan)
    a = j.arch
    t = 8 * 4096
    want = 2 * (2 * t * a.hidden_size + 3 * t * a.moe_router_topk * a.expert_ffn)
    assert (a.hidden_size, a.moe_router_topk, a.expert_ffn) == (2048, 8, 768)
    for ep in (1, 8):
        got = titan_validation.validation_bytes(j, Layout(dp=16, ep=ep), False)
        assert got == pytest.approx(want), ep
