"""The linear-time mixers' saved activations in fp32 training, the Mamba-2 mixer's B and C under
context parallelism when the groups run out, and what a recomputed M layer holds while its
backward runs.

Oracles, by hand in the comments (the tiny configs of tests/model/test_mamba.py and
test_gdn.py):
- fp32 (planner.model.fp32's rule, from Megatron-LM d98e8a64: with fp32 parameters every value
  bf16 training keeps in 16 bits is 4 bytes, the linear layers' inputs too; what bf16 keeps in
  fp32 stays 4, a dropout mask 1): the Mamba mixer's gated norm rstd (mamba_ssm's
  _layer_norm_fwd, fp32) and the gated delta net's L2-norm rstd, g cumsum and norm rstd (FLA)
  stay 4 bytes.
- CP: Megatron-LM d98e8a64 megatron/core/ssm/mamba_context_parallel.py:119-125: where the
  groups on a TP rank (g / tp) are fewer than cp, ngroups_local_tpcp = 1 and each group is
  repeated cp / (g / tp) times before the all-to-all (:171-190), so every CP rank's zxBCdt holds
  n per token of the whole sequence for B and for C.
- full recompute: Megatron's CheckpointFunction.backward (tensor_parallel/random.py) rebuilds
  the layer, then runs its backward: the rebuilt layer is alive beside the scan's working set.
"""

from __future__ import annotations

import pytest
from jobs import job
from test_gdn import TINY as GDN_TINY
from test_mamba import TINY

from planner.inputs.hybrid import GDN, MAMBA
from planner.inputs.layout import Layout
from planner.model import activations as act
from planner.model import gdn, mamba, stage_activations
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard

T = 512


def fp32_shard(**kw: object) -> Shard:
    return Shard(tokens=T, seq_per_cp_rank=T, value_bytes=4.0, linear_bytes=4.0, **kw)  # type: ignore[arg-type]


def test_fp32_mamba_layer_by_hand() -> None:
    # h 64, d 128, g 2, n 8, H 8. Replicated: norm input 4h + in_proj's input 4h + mask h = 576;
    # split by tp: zxBCdt 4 x 296 = 1184, out_x 4d = 512, the norm's input 4d = 512 and rstd
    # 4g = 8, out_proj's input 4d = 512: 2728. Total 3304 per token (bf16: 1688)
    assert act.layer_bytes(TINY, MAMBA, fp32_shard()) == pytest.approx(T * 3304)


def test_fp32_gdn_layer_by_hand() -> None:
    # h 64, n_k 2, n_v 4, d_k 16, d_v 32 (qk 32, vd 128, in_proj 328, conv 192). Replicated 576
    # as above; split: qkvzba 4 x 328 = 1312 (the conv's input a view of it, no copy:
    # test_gdn.py), the L2 norm's output 8 qk = 256 and rstd 8 n_k = 16 (fp32), q and k
    # 8 n_v d_k = 512, v 4 vd = 512, g 4 n_v = 16 (fp32), beta 4 n_v = 16, A 4 x 64 x n_v =
    # 1024, the output 4 vd = 512 and the norm's rstd 16 (fp32), the norm's output 512, the
    # gate's copy 512, out_proj's input 512: 5728. Total 6304 per token
    assert act.layer_bytes(GDN_TINY, GDN, fp32_shard()) == pytest.approx(T * 6304)
    # gdn_norm_out drops the norm's output 512, its rstd 16, out_proj's input 512: 5264
    norm_out = fp32_shard(recompute="core_attn", modules=frozenset({"gdn_norm_out"}))
    assert act.layer_bytes(GDN_TINY, GDN, norm_out) == pytest.approx(T * 5264)


def test_fp32_backward_working_sets_by_hand() -> None:
    # Mamba (test_mamba.py's lines): xBC, dzxbcdt, dxBC, dout_x and dt's clone 4 x (160 + 296
    # + 160 + 128 + 8) = 3008; fp32 dA_cumsum and dt 8H = 64; the fp32 states, their fp32
    # gradients and _state_passing_bwd's fp32 dstates (states_dtype fp32: nothing converted,
    # ssd_state_passing.py:242) 12 x d n / Q = 96; C B^T 4 Q g = 1024: 4192 per token
    assert mamba.backward_working(TINY, 100, 1, value_bytes=4.0) == pytest.approx(100 * 4192)
    # GDN (test_gdn.py's lines): its 1832 bf16 bytes a token less the fp32 dg, dg2 (32) are 900
    # values, 4 bytes each in fp32: 3600, and dg, dg2 stay 32: 3632
    assert gdn.backward_working(GDN_TINY, 100, 1, value_bytes=4.0) == pytest.approx(100 * 3632)


@pytest.mark.parametrize(
    ("tp", "cp", "groups"),
    [(1, 1, 2), (1, 2, 2), (2, 1, 2), (1, 4, 4), (2, 2, 4), (2, 4, 8)],
)
def test_cp_repeats_the_groups_when_they_run_out(tp: int, cp: int, groups: int) -> None:
    # g 2: g / tp groups a TP rank; below cp each is repeated cp / (g / tp) times and a CP rank
    # holds one group for the whole sequence (s = cp T): per local token and TP rank cp n for
    # B and for C, i.e. tp x cp groups over the TP group
    assert mamba.groups(TINY, tp, cp) == groups


def test_cp_mamba_layer_and_all_to_all_by_hand() -> None:
    # tp 1, cp 4, T local tokens (s = 4T): zxBCdt 2 x (2d + 2 x 4 x n + H) = 2 x (256 + 64 + 8)
    # = 656 a token (cp 1: 592); out_x, the norm's input, rstd, out_proj's input 776; the
    # replicated 320: 1752 per token (cp 1: 1688)
    sh = Shard(tokens=T, seq_per_cp_rank=T, seq_length=4 * T)
    assert act.layer_bytes(TINY, MAMBA, sh) == pytest.approx(T * 1752)
    # cp 2: g / tp = 2 groups cover the 2 CP ranks, nothing repeated
    sh2 = Shard(tokens=T, seq_per_cp_rank=T, seq_length=2 * T)
    assert act.layer_bytes(TINY, MAMBA, sh2) == pytest.approx(T * 1688)
    # the all-to-alls send zxBCdt (B and C repeated first) and the output, 2 bytes each:
    # 2 T (328 + 128) each way
    assert mamba.context_parallel_bytes(TINY, T, 1, 4) == (2.0 * T * 456, 2.0 * T * 456)


def test_nemotron_h_cp_zxbcdt_as_megatron_shards_it() -> None:
    # Nemotron-H 56B (d 16384, H 256, g 8, n 256), seq 32768, tp 8, cp 4: g / tp = 1 < 4, so a
    # rank's zxBCdt is [s, 2d / (tp cp) + 2 x 1 x n + H / (tp cp)] = 32768 x (1024 + 512 + 8)
    # bf16: 96.5 MiB (the unrepeated width would give 72.5)
    arch = job("nemotronh-56b", "h100-sxm-80gb", 64, 32768, 64).arch
    local = 32768 // 4
    zxbcdt = 2 * local * mamba.zxbcdt_width(arch, 8, 4) / 8
    assert zxbcdt == 2 * 32768 * (1024 + 512 + 8)
    assert zxbcdt / 2**20 == pytest.approx(96.5)


def test_a_recomputed_m_layer_is_rebuilt_beside_its_scans_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nemotron-H 56B (h 8192, d 16384, g 8, n 256, in_proj W 37120), bf16, seq 8192, tp 8 with
    # SP, pp 4, full uniform recompute of one layer; rank 0 (no loss). Per token over the TP
    # group: an M layer whole keeps norm input 2h + in_proj's input 2h + mask h = 40960 and
    # zxBCdt 2W 74240 + out_x, the norm's input, out_proj's input 3 x 2d = 98304 + rstd 4g 32:
    # 213536 (the largest kind: an MLP keeps 40960 + 4 x 32768 = 172032); the scan's backward
    # 588800 (test_mamba.py's Nemotron-H count). Both split by 8 over 8192 tokens, held
    # together.
    j = job("nemotronh-56b", "h100-sxm-80gb", 64, 8192, 64)
    lay = Layout(tp=8, pp=4, dp=2, sequence_parallel=True, recompute="full")
    sh, chunks = shard(j, lay), lay.chunk_layers(j.arch.num_layers)[0]
    per = per_layer(j.arch, sh)
    # without 1F1B's blocking exchange, which the working set would otherwise only be compared
    # with (`early_receives.transient`: held between ops, never beside the backward)
    monkeypatch.setattr(stage_activations, "transient", lambda *a: 0)
    acts = stage_activations.stage_activations(j, lay, 0, chunks, sh, per)
    monkeypatch.setattr(stage_activations, "mixer_working", lambda *a: 0.0)
    monkeypatch.setattr(stage_activations, "recompute_working", lambda *a: 0.0)
    stored = stage_activations.stage_activations(j, lay, 0, chunks, sh, per)
    assert acts - stored == pytest.approx(8192 * (213536 + 588800) / 8)


def test_cp_all_to_all_moves_fp32_values_in_fp32_training(monkeypatch: pytest.MonkeyPatch) -> None:
    # the mixers count 16-bit values (`mamba.context_parallel_a2as`); fp32 training moves each
    # in 4 bytes (fp32.value_bytes): Nemotron-H 56B, tp 8, cp 2, 8192 tokens (4096 a CP rank)
    from planner.model import comms, cost, layer_traffic

    lay = Layout(tp=8, pp=1, dp=4, cp=2, sequence_parallel=True, recompute="full")
    sent: dict[str, list[float]] = {}
    real = comms.all_to_all
    for precision in ("bf16", "fp32"):
        seen: list[float] = []

        def spy(nbytes: float, *a: object, _seen: list[float] = seen, **k: object) -> float:
            _seen.append(nbytes)
            return real(nbytes, *a, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(layer_traffic.comms, "all_to_all", spy)
        cost.estimate(job("nemotronh-56b", "h100-sxm-80gb", 64, 8192, 64, precision=precision), lay)
        sent[precision] = seen
    arch = job("nemotronh-56b", "h100-sxm-80gb", 64, 8192, 64).arch
    # the largest of the six all-to-alls (z, x or y: 2 x 4096 x 16384 / 8 = 16,777,216)
    bf16 = max(mamba.context_parallel_a2as(arch, 4096, 8, 2))
    assert bf16 == 16_777_216
    assert max(sent["bf16"]) == pytest.approx(bf16)
    assert max(sent["fp32"]) == pytest.approx(2 * bf16)
