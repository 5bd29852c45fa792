"""What recompute keeps and re-runs beyond the matmuls: the collectives' outputs torchtitan's
per-op policy saves, the all-gathers its replay re-runs, the module Megatron's selective
recompute rebuilds in the backward, and the norms its layernorm module re-runs.

Oracles: pytorch/torchtitan b5bcd76c distributed/activation_checkpoint.py:61-63 (`comm_ops`:
reduce_scatter_tensor and all_to_all_single MUST_SAVE; no all-gather) and e347b1e5
models/llama3/infra/parallelize.py:43, :223-239 (wo and w2 row-parallel to Shard(1), the
attention's and the MLP's inputs gathered to Replicate), distributed/expert_parallel.py:138, :175
(dispatch and combine through all_to_all_single_autograd, whose forward calls the
`_c10d_functional::all_to_all_single` op: pytorch torch/csrc/distributed/c10d/Functional.cpp
`AllToAllSingle::forward`); Megatron-LM d98e8a64 tensor_parallel/random.py:591-687
(`CheckpointFunction.backward` replays the forward before its backward frees it),
transformer_layer.py:475-479, :521-527 (a norm is recomputed only where it is not an IdentityOp)
and models/gpt/gpt_layer_specs.py:134, :157 (the TE spec's dense layer fuses its pre-MLP norm
into fc1; an MoE layer keeps a separate one); hand arithmetic in comments."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.model import activations as act
from planner.model import comms, layer_kept, layer_time, recompute_time
from planner.model import stage_activations as sa
from planner.model.shard import Shard

LLAMA8 = catalog.get_model("llama3.1-8b")
TITAN: dict[str, object] = {"framework": "torchtitan", "selective_recompute": "per_op"}


def test_per_op_keeps_the_reduce_scatter_outputs_under_tp() -> None:
    # Llama-3.1-8B, T tokens, tp 4 with SP; bytes per token (test_activations'
    # test_per_op_checkpointing_keeps_every_other_matmul_output at t = 4, the layer input now
    # split by SP): layer input 8192 / 4, attention output and log-sum-exp 8320 / 4, wq wv w1
    # 38912 / 4, w2's partial output 8192; and the two reduce-scatter outputs (wo's, w2's),
    # 2 x 2h / 4 = 16384 / 4
    T, t = 4096, 4
    sh = Shard(tokens=T, tp=t, sequence_parallel=True, recompute="per_op", seq_per_cp_rank=T)
    per_token = (8192 + 8320 + 38912 + 16384) / t + 8192
    assert act.layer_bytes(LLAMA8, False, sh) == pytest.approx(per_token * T)


def test_per_op_keeps_the_expert_all_to_all_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    # DeepSeek-V2-Lite (h 2048, top-6, 26 MoE layers of 27) on torchtitan, ep 4, pp 1: one
    # micro-batch in flight, each MoE layer keeps the dispatched rows at the routing load and
    # the combined rows, bf16: 2 x 6 x T x (load + 1) x 2048 bytes
    j = job("deepseek-v2-lite", "h100-sxm-80gb", 8, 4096, 32, **TITAN)
    lay = Layout(tp=1, pp=1, dp=8, ep=4, micro_batch_size=1, recompute="selective")
    sh = sa.shard(j, lay)
    assert sh.recompute == "per_op"
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    per = sa.per_layer(j.arch, sh)
    got = sa.stage_activations(j, lay, 0, chunks, sh, per)
    monkeypatch.setattr(layer_kept, "all_to_all_bytes", lambda *a: 0.0)  # (`with_a2a` reads it)
    before = sa.stage_activations(j, lay, 0, chunks, sh, per)
    T = 4096
    assert got - before == pytest.approx(26 * 2 * 6 * T * (sh.moe_load + 1) * 2048)


def test_selective_working_set_holds_the_rebuilt_mlp(monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama 2 13B (h 5120, ffn 13824, SwiGLU), tp 2 with SP, no dropout, recompute_modules mlp,
    # rank 0 of pp 2 (no loss): the backward rebuilds one MLP whole but its input, on top of what
    # the layers keep: its norm's input and fc1's input 2h + 2h, fc1's output 2 x 2 ffn and the
    # activation's 2 ffn, less the input it kept, 2h; over tp:
    # (2 x 5120 + 6 x 13824) x 4096 / 2 = 190,840,832 bytes (0.178 GiB)
    j = job(
        "llama2-13b", "h100-sxm-80gb", 16, 4096, 64, hidden_dropout=False, attention_dropout=False
    )
    lay = Layout(
        tp=2, pp=2, dp=4, sequence_parallel=True, recompute="selective", recompute_modules=("mlp",)
    )
    sh = sa.shard(j, lay)
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    per = sa.per_layer(j.arch, sh)
    # without 1F1B's blocking exchange, which the working set would otherwise only be compared
    # with (`early_receives.transient`: held between ops, never beside the backward)
    monkeypatch.setattr(sa, "transient", lambda *a: 0)
    got = sa.stage_activations(j, lay, 0, chunks, sh, per)
    monkeypatch.setattr(sa, "rebuilt_bytes", lambda *a: 0.0, raising=False)
    before = sa.stage_activations(j, lay, 0, chunks, sh, per)
    assert got - before == pytest.approx(190_840_832)


def test_per_op_replay_regathers_each_blocks_input() -> None:
    # torchtitan, Llama-3.1-8B, tp 4 with SP: the per-op replay re-runs the attention's and the
    # MLP's input all-gathers (not saved), not the reduce-scatters (saved): two all-gathers of
    # the layer's T x h bf16 activations over the TP group beyond the layer without recompute
    j = job("llama3.1-8b", "h100-sxm-80gb", 16, 8192, 32, **TITAN)
    lay = Layout(tp=4, pp=2, dp=2, sequence_parallel=True, recompute="selective")
    gpu = layer_time.gpu_of(j)
    per_op = layer_time.layer_time(j, lay, gpu, DENSE)
    none = layer_time.layer_time(j, lay.with_(recompute="none"), gpu, DENSE)
    gather = comms.all_gather(8192 * 4096 * 2, comms.place(j.cluster, 1, 4))
    assert per_op.tp - none.tp == pytest.approx(2 * gather)


def test_layernorm_module_re_runs_only_separate_norms() -> None:
    # Transformer Engine's dense layer fuses both norms into linear_qkv and linear_fc1
    # (IdentityOps: nothing re-run); MLA keeps its input norm and an MoE layer its pre-MLP norm
    # separate (a norm: read and write h per token, T / tp tokens under SP, 2 bytes, at the
    # GPU's HBM rate), the norms whose outputs the memory side drops for the module
    # (activations' MLA blocks, moe_activations.moe_bytes)
    lay = Layout(tp=2, pp=1, dp=4, ep=4, sequence_parallel=True, recompute="selective")
    pieces = recompute_time.Pieces((), (), (), 0.0, 4096.0, 1.0)
    llama = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 32)
    gpu = layer_time.gpu_of(llama)
    assert recompute_time.module_time(llama, lay, gpu, DENSE, pieces, "layernorm") == 0.0
    j = job("deepseek-v2-lite", "h100-sxm-80gb", 8, 4096, 32)
    norm = 4096 / 2 * 2048 * 2 * 2 / gpu.hbm
    for kind in j.arch.kinds:  # DeepSeek-V2-Lite: MLA in every layer, MoE in all but the first
        got = recompute_time.module_time(j, lay, gpu, kind, pieces, "layernorm")
        assert got == pytest.approx((1 + kind.moe) * norm)
