"""The linear mixers' context-parallel all-to-alls, one per tensor as Megatron runs them, and the
output all-to-all that gdn_norm_out's recompute runs again.

Oracles (Megatron-LM d98e8a64), with the hand arithmetic in the comments:
- Mamba: megatron/core/ssm/mamba_context_parallel.py:162, :165, :187, :190, :193 run
  `_all_to_all_cp2hp` on z, x, B, C and dt one at a time, :208 `_all_to_all_hp2cp` on the
  scan's output (called from mamba_mixer.py:512, :728): six all-to-alls a forward, each an
  `_AllToAll` (tensor_parallel/mappings.py:424) whose backward runs one more on the gradient.
- Gated delta net: gated_delta_net/common.py:819-866 `a2a_cp_to_hp` sends qkvzba in one
  all-to-all (heads pre-permuted), :869-900 `a2a_hp_to_cp` the norm's output: two a forward.
- gdn_norm_out: gated_delta_net/gdn.py:266-276 checkpoints `_gated_norm_and_a2a`
  (common.py:347-368, ending in `a2a_hp_to_cp`) in a CheckpointWithoutOutput, so the backward
  re-runs the norm and the output's all-to-all.
- The link (the catalog's H100 NVLink tier, 360 GB/s and 2 us a step, read from the placed
  group) and an all-to-all over n ranks: (n - 1) / n of the bytes at the link's rate plus n - 1
  latency steps (`comms.all_to_all`).
"""

from __future__ import annotations

import pytest
from jobs import job
from test_gdn import TINY as GDN_TINY
from test_mamba import TINY

from planner.inputs.hybrid import GDN
from planner.inputs.layout import Layout
from planner.model import comms, gdn, mamba, recompute_time
from planner.model.gemm import Gpu
from planner.model.recompute_time import Pieces
from planner.model.stage_time import layout_times


def test_mamba_sends_z_x_b_c_dt_and_y_each_in_its_own_all_to_all() -> None:
    # TINY: d 128, H 8, g 2, n 8; tp 1, cp 4: g / tp = 2 < 4, B and C repeated to 4 groups,
    # 32 wide each; 2 bytes a value over 10 tokens: z, x 2560, B, C 640, dt 160, y 2560
    assert mamba.context_parallel_a2as(TINY, 10, 1, 4) == (2560, 2560, 640, 640, 160, 2560)
    # the total is the old zxBCdt + y: 2 x 10 x 456
    assert mamba.context_parallel_bytes(TINY, 10, 1, 4) == (9120, 9120)


def test_gdn_sends_qkvzba_and_the_output_in_two_all_to_alls() -> None:
    # TINY: in_proj width 328, vd 128; 10 tokens at 2 bytes: 6560 and 2560
    assert gdn.context_parallel_a2as(GDN_TINY, 10, 1, 2) == (6560, 2560)


def test_nano_cp8_pays_six_all_to_all_latencies_each_way() -> None:
    # Nemotron 3 Nano (d 4096, H 64, g 8, n 128), seq 8192, tp 1, cp 8 inside one node: 1024
    # tokens a rank; g / tp = 8 = cp, no repeat: B, C 1024 wide; bytes 2 x 1024 x w:
    # z, x, y 8,388,608; B, C 2,097,152; dt 131,072; 29,491,200 in all
    j = job("nemotron3-nano-30b-a3b", "h100-sxm-80gb", 64, 8192, 512)
    lay = Layout(tp=1, pp=1, dp=8, cp=8, ep=8)
    grp = comms.place(j.cluster, 1, 8)
    assert grp.outer is None and grp.size == 8
    bw, lat = grp.inner.bandwidth, grp.inner.latency
    assert (bw, lat) == (360e9, 2e-6)
    # a pass: 7/8 x 29,491,200 / 360e9 = 71.68 us, plus 6 all-to-alls x 7 steps x 2 us = 84 us:
    # 155.68 us (one all-to-all on the summed bytes: 71.68 + 14 = 85.68); forward + backward
    per_pass = 7 / 8 * 29_491_200 / bw + 6 * 7 * lat
    assert per_pass == pytest.approx(155.68e-6)
    times = layout_times(j, lay)
    cps = [x.cp for k, x in zip(j.arch.kinds, times.layers, strict=True) if k.mixer == "mamba"]
    assert cps and cps[0] == pytest.approx(2 * per_pass)
    # full recompute runs the forward twice: three passes
    full = layout_times(j, Layout(tp=1, pp=1, dp=8, cp=8, ep=8, recompute="full"))
    cps = [x.cp for k, x in zip(j.arch.kinds, full.layers, strict=True) if k.mixer == "mamba"]
    assert cps[0] == pytest.approx(3 * per_pass)


def test_qwen3_next_cp4_pays_two_all_to_all_latencies_each_way() -> None:
    # Qwen3-Next 80B (qk 16 x 128 = 2048, vd 32 x 128 = 4096, n_v 32: in_proj 2 x 2048 +
    # 2 x 4096 + 64 = 12352), seq 32768, tp 2, cp 4 (stride 2, inside a node of 8): 8192 tokens;
    # bytes 2 x 8192 x (12352 + 4096) / 2 = 134,742,016 in two all-to-alls of 3 steps each
    j = job("qwen3-next-80b-a3b", "h100-sxm-80gb", 64, 32768, 64)
    times = layout_times(j, Layout(tp=2, pp=1, dp=8, cp=4, ep=8))
    per_pass = 0.75 * 134_742_016 / 360e9 + 2 * 3 * 2e-6
    cps = [x.cp for k, x in zip(j.arch.kinds, times.layers, strict=True) if k.mixer == "gdn"]
    assert cps and cps[0] == pytest.approx(2 * per_pass)


def _norm_out(cp: int, precision: str = "bf16") -> float:
    j = job("qwen3-next-80b-a3b", "h100-sxm-80gb", 64, 32768, 64, precision=precision)
    lay = Layout(tp=2, pp=1, dp=64 // (2 * cp), cp=cp, ep=8, recompute="selective")
    gpu = Gpu(peak_bf16=1e15, peak_linear=1e15, hbm=1e12, ridge=300, e_bf16=0.8, e_linear=0.8)
    p = Pieces(parts=(), times=(), casts=(), attn_fwd=0.0, tokens=32768 / cp, load=1.0)
    return recompute_time.module_time(j, lay, gpu, GDN, p, "gdn_norm_out")


def test_gdn_norm_out_recompute_runs_the_output_all_to_all_again() -> None:
    # Qwen3-Next 80B: 32 value heads of 128, vd 4096; tp 2: 2048 a GPU. seq 32768, cp 4: 8192
    # tokens. The norm reads two and writes one: 3 x 8192 x 2048 x 2 bytes at 1e12 B/s
    norm = 3 * 8192 * 2048 * 2 / 1e12
    assert _norm_out(1) == pytest.approx(3 * 32768 * 2048 * 2 / 1e12)  # no CP: the norm only
    # the output all-to-all: 2 x 8192 x 2048 = 33,554,432 bytes over 4 ranks of one node:
    # 3/4 x 33,554,432 / 360e9 = 69.905 us + 3 steps x 2 us = 75.905 us
    a2a = 0.75 * 33_554_432 / 360e9 + 3 * 2e-6
    assert a2a == pytest.approx(75.905e-6, rel=1e-4)
    assert _norm_out(4) == pytest.approx(norm + a2a)
    # fp32 training moves 4 bytes a value: twice the bytes, the same latency; the norm's too
    a2a32 = 0.75 * 2 * 33_554_432 / 360e9 + 3 * 2e-6
    assert _norm_out(4, "fp32") == pytest.approx(2 * norm + a2a32)
