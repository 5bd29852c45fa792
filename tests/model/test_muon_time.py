"""Muon's optimizer step time (planner.model.muon_time): the Newton-Schulz iterations over the
decoder's matrices, who runs them, and what that does to a step.

Oracles: hand arithmetic from Llama 3.1 8B's shapes (hidden 4096, 32 heads of 128, 8 KV groups,
SwiGLU width 14,336, 32 layers) and the iteration's three GEMMs (A = X X^T, B = b A + c A A,
X = a X + B X on an m x n matrix, m <= n: 4 m^2 n + 2 m^3 FLOPs), as Emerging-Optimizers'
`newton_schulz` runs them; the layer-wise distributed optimizer deals the matrices out to the
data-parallel ranks (Megatron-LM d98e8a64 layer_wise_optimizer.py)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace

import pytest
from jobs import job
from test_memory_muon import LINE
from test_memory_muon import plan as muon_plan

from planner.inputs import catalog, megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import cost, muon_time
from planner.model.layer_time import gpu_of

H, F, KV = 4096, 14_336, 8 * 128


def llama(n: int = 8, **kw: object) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", n, 8192, 64, **kw)


def test_a_llama_layer_orthogonalises_q_k_v_apart_and_fc1_whole() -> None:
    dense, expert = muon_time.matrices(llama().arch, DENSE, 1)
    # Q 4096 x 4096, K and V 4096 x 1024 each, the output projection, fc1 (gate and up as one
    # 4096 x 28,672) and fc2 (14,336 x 4096); no experts
    want = [(H, H, H, H, 1), (H, KV, H, KV, 2), (H, H, H, H, 1), (H, 2 * F, H, 2 * F, 1)]
    want.append((F, H, F, H, 1))
    assert sorted(dense) == sorted(want) and expert == []


def test_the_iteration_counts_three_gemms_of_the_short_side() -> None:
    # fc2: m = 4096, n = 14,336: 5 x (4 x 4096^2 x 14,336 + 2 x 4096^3) = 5.50e12
    assert muon_time.ns_flops(F, H) == pytest.approx(5 * (4 * H**2 * F + 2 * H**3))
    assert muon_time.ns_flops(F, H) == muon_time.ns_flops(H, F)
    assert muon_time.ns_flops(F, H) == pytest.approx(5.497e12, rel=1e-3)


def _optimizer_s(lay: Layout, **kw: object) -> float:
    j = llama(lay.num_gpus, optimizer="muon", **kw)
    return cost.estimate(j, lay).breakdown.optimizer


def test_a_non_distributed_step_costs_every_rank_the_whole_model_at_the_gemm_rate() -> None:
    # per layer 5 x (6 x 4096^3 [Q] + 2 x (4 x 1024^2 x 4096 + 2 x 1024^3) [K, V]
    # + 6 x 4096^3 [proj] + 4 x 4096^2 x 28,672 + 2 x 4096^3 [fc1] + 5.50e12 / 5 [fc2])
    # = 5 x (4.12e11 + 3.87e10 + 4.12e11 + 2.062e12 + 1.100e12) = 2.01e13; 32 layers: 6.44e14
    # FLOPs on each of the 8 ranks
    per_layer = 5 * (
        6 * H**3
        + 2 * (4 * KV**2 * H + 2 * KV**3)
        + 6 * H**3
        + 4 * H**2 * 2 * F
        + 2 * H**3
        + 4 * H**2 * F
        + 2 * H**3
    )
    flops = 32 * per_layer
    assert flops == pytest.approx(6.44e14, rel=0.01)
    lay = Layout(tp=1, dp=8, micro_batch_size=1, zero_stage=0)
    adam = cost.estimate(llama(), lay).breakdown.optimizer
    ns = _optimizer_s(lay) - adam
    peak = gpu_of(llama()).peak_bf16
    # no faster than the bf16 peak, no slower than a third of it (large GEMMs)
    assert flops / peak < ns < flops / (peak / 3)


def test_the_distributed_optimizer_shares_the_iterations_over_data_parallel_ranks() -> None:
    alone = Layout(tp=1, dp=8, micro_batch_size=1, zero_stage=0)
    shared = replace(alone, zero_stage=1)
    base = cost.estimate(llama(), shared).breakdown.optimizer
    full = _optimizer_s(alone) - cost.estimate(llama(), alone).breakdown.optimizer
    # 32 x 6 = 192 matrices over 8 ranks: an eighth of the work each, within the largest
    # matrix's share of imbalance that the model does not count (it takes total / dp)
    assert _optimizer_s(shared) - base == pytest.approx(full / 8, rel=0.02)


def test_tensor_parallelism_duplicates_the_iterations_and_adds_the_gather() -> None:
    tp1 = Layout(tp=1, dp=8, micro_batch_size=1, zero_stage=0)
    tp2 = Layout(tp=2, dp=4, micro_batch_size=1, sequence_parallel=True, zero_stage=0)
    n1 = _optimizer_s(tp1) - cost.estimate(llama(), tp1).breakdown.optimizer
    n2 = _optimizer_s(tp2) - cost.estimate(llama(), tp2).breakdown.optimizer
    # --muon-tp-mode duplicated: each TP rank orthogonalises the whole matrix, so tp 2 costs
    # at least what tp 1 does (plus each matrix's fp32 all-gather over NVLink)
    assert n2 > n1


def test_small_matrices_cost_the_host_its_kernels() -> None:
    # the functional tests' MoE model (tests/model/test_memory_muon.py: h 512, 12 layers, 8
    # experts, ep 8): 12 x (Q, K, V, proj, router) + one local expert's fc1 and fc2 = 84
    # matrices, each microseconds on the GPU: the host's 84 x 30 kernels x 25 us
    p = muon_plan("--optimizer muon")
    assert p.layout is not None
    j, lay = p.job, p.layout
    counts = j.arch.kind_counts((range(12),))
    t = muon_time.step_time(j, lay, counts, gpu_of(j))
    assert t == pytest.approx(84 * 30 * 25e-6, rel=0.05)
    # shared out by the distributed optimizer: ceil(60 / 8) dense matrices and, with one expert
    # per rank (expert data-parallel 1), all 24 expert ones: 32 x 30 x 25 us
    shared = replace(lay, zero_stage=1)
    assert muon_time.step_time(j, shared, counts, gpu_of(j)) == pytest.approx(
        32 * 30 * 25e-6, rel=0.05
    )
    # Adam trains without it
    assert muon_time.step_time(replace(j, optimizer="adam"), lay, counts, gpu_of(j)) == 0


def test_the_reader_reads_muons_knobs_and_refuses_bad_values() -> None:
    line = LINE + "--optimizer muon "
    job = muon_plan(
        "--optimizer muon --muon-num-ns-steps 7 --muon-tp-mode blockwise --muon-no-split-qkv "
        "--muon-fp32-matmul-prec high"
    ).job
    assert (job.muon_ns_steps, job.muon_tp_mode, job.muon_split_qkv) == (7, "blockwise", False)
    assert job.muon_matmul_precision == "high"
    # the plan writer writes them back, and the plan reads back the same job
    p = muon_plan(
        "--optimizer muon --muon-num-ns-steps 7 --muon-tp-mode blockwise --muon-no-split-qkv "
        "--muon-fp32-matmul-prec high"
    )
    assert p.layout is not None
    text = plan_writer.render(p.job, p.layout, p.model_ref or {}, ["t"])
    assert 'muon_tp_mode = "blockwise"' in text and "muon_ns_steps = 7" in text
    again = parse_plan(tomllib.loads(text)).job
    knobs = ("muon_ns_steps", "muon_tp_mode", "muon_split_qkv", "muon_matmul_precision")
    assert [getattr(again, k) for k in knobs] == [7, "blockwise", False, "high"]
    defaults = muon_plan("--optimizer muon").job
    assert (defaults.muon_ns_steps, defaults.muon_tp_mode) == (5, "duplicated")
    assert defaults.muon_split_qkv and defaults.muon_matmul_precision == "medium"
    for bad, needle in (
        ("--muon-num-ns-steps 0", "--muon-num-ns-steps: expected at least 1 (got 0)"),
        ("--muon-num-ns-steps x", "--muon-num-ns-steps: expected an integer (got 'x')"),
        # the choices in the source's order (arguments.py:2651, d98e8a64)
        ("--muon-tp-mode rowwise", "--muon-tp-mode: expected one of blockwise, duplicated"),
        ("--muon-fp32-matmul-prec highest", "--muon-fp32-matmul-prec: expected one of low"),
    ):
        with pytest.raises(InputError, match=re.escape(needle)):
            megatron_args.read(line + bad, "h100-sxm-80gb", 8, "t", 50_257)


def test_the_knobs_scale_the_gpu_work_as_the_iteration_says() -> None:
    # one fc2 of Llama 3.1 8B (14,336 x 4096): large GEMMs, so the time follows the FLOPs
    gpu = gpu_of(llama())
    fc2 = (F, H, F / 2, H, 1)  # whole, and tp 2's row-parallel shard
    base = muon_time.ns_gpu_time(llama(optimizer="muon"), fc2, gpu)
    # twice the iterations, twice the time
    ten = muon_time.ns_gpu_time(llama(optimizer="muon", muon_ns_steps=10), fc2, gpu)
    assert ten == pytest.approx(2 * base, rel=1e-9)
    # TF32 runs at half the bf16 peak: a little under twice the time (the roofline's memory part
    # keeps its ridge)
    tf32 = muon_time.ns_gpu_time(llama(optimizer="muon", muon_matmul_precision="high"), fc2, gpu)
    assert 1.8 * base < tf32 <= 2 * base
    # blockwise orthogonalises the 7,168 x 4096 shard: 5 x (4 x 4096^2 x 7168 + 2 x 4096^3)
    # over 5 x (4 x 4096^2 x 14,336 + 2 x 4096^3) = 0.5625 of the work
    block = muon_time.ns_gpu_time(llama(optimizer="muon", muon_tp_mode="blockwise"), fc2, gpu)
    assert block / base == pytest.approx(0.5625, rel=0.03)
    # distributed: X X^T and B X on the shard, A A whole: (2 + 2) x 4096^2 x 7168 + 2 x 4096^3
    # over the whole's: the same 0.5625 here (the short side is not split)
    dist = muon_time.ns_gpu_time(llama(optimizer="muon", muon_tp_mode="distributed"), fc2, gpu)
    assert dist / base == pytest.approx(0.5625, rel=0.03)


def test_without_the_qkv_split_q_k_v_are_one_matrix() -> None:
    dense, _ = muon_time.matrices(llama().arch, DENSE, 1, split_qkv=False)
    assert (H, H + 2 * KV, H, H + 2 * KV, 1) in dense and len(dense) == 4


def test_fp32_newton_schulz_runs_at_the_fp32_peak() -> None:
    # highest precision: fp32 GEMMs on the CUDA cores, H100's 67 TFLOP/s against 989 bf16
    # (stas00/ml-engineering's table, the catalog's source): a large fc2 takes up to
    # 989 / 67 = 14.8x the bf16 time; less by the share of the bf16 GEMMs' time that is their
    # memory term (4096-wide GEMMs on H100: intensity ~1365 against a ridge of ~295 FLOP/byte,
    # ~15%), which at the fp32 rate vanishes
    gpu = gpu_of(llama())
    fc2 = (F, H, F, H, 1)
    base = muon_time.ns_gpu_time(llama(optimizer="muon"), fc2, gpu)
    fp32 = muon_time.ns_gpu_time(llama(optimizer="muon", muon_matmul_precision="highest"), fc2, gpu)
    assert 0.8 * 989 / 67 < fp32 / base <= 989 / 67


def test_mla_experts_and_mamba_give_their_own_matrices() -> None:
    # DeepSeek-V3 (hidden 7168; MLA: q_lora 1536, kv_lora 512, 128 heads of 128 + 64 rope, v
    # 128; 256 experts of 2048 gated, one shared): on ep 8 a MoE layer holds 256 / 8 = 32 local
    # experts' fc1 (7168 x 4096) and fc2 (2048 x 7168), MLA's five projections (q down
    # 7168 x 1536, q up 1536 x 128 x 192, kv down 7168 x 576, kv up 512 x 128 x 256, output
    # 16384 x 7168), the shared expert's two and the router (7168 x 256)
    arch = catalog.get_model("deepseek-v3")
    moe = next(k for k in arch.kinds if k.moe)
    dense, expert = muon_time.matrices(arch, moe, 8)
    assert sorted(m[:2] + m[4:] for m in expert) == [(2048, 7168, 32), (7168, 4096, 32)]
    whole = [m[:2] + m[4:] for m in dense]
    assert (7168, 1536, 1) in whole and (1536, 128 * 192, 1) in whole
    assert (512, 128 * 256, 1) in whole and (128 * 128, 7168, 1) in whole
    assert (7168, 256, 1) in whole and len(dense) == 8
    # a Mamba mixer keeps only its out_proj on Muon (Megatron sets use_muon False on in_proj):
    # Nemotron 3 Nano's mixer, 64 heads x 64 = 4096 wide, into hidden 2688
    hybrid = catalog.get_model("nemotron3-nano-30b-a3b")
    mamba = next(k for k in hybrid.kinds if k.mixer == "mamba")
    assert muon_time.matrices(hybrid, mamba, 1) == ([(4096, 2688, 4096, 2688, 1)], [])
