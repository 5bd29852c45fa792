"""explain's note on the CPU-offloaded optimizer with the plan's Adam moments in bf16
(`training.optimizer_state_dtype`, Megatron --exp-avg-dtype / --exp-avg-sq-dtype bf16).

Oracles: Megatron-LM d98e8a64: the host optimizer is torch AdamW (optimizer/__init__.py:11) built
with lr, weight decay, betas, eps and nothing of the moments' dtype (:517-544), on fp32 copies
of the parameters (param_update_in_fp32, cpu_offloading hybrid_optimizer.py:277-280), and torch
AdamW's moments are zeros_like its parameter: fp32 on the host whatever the plan says. Without
--optimizer-cpu-offload the flags reach Transformer Engine's FusedAdam: 2 + 2 bytes of moments
and the fp32 master's 2-byte remainder, 6 bytes a parameter (the fp32 plan's Adam: 4 + 4 + 4 =
12). Hand arithmetic: Llama 3.1 70B at tp 4 pp 2, stage 0: 40 layers of 855,638,016 matrix
and 16,384 norm parameters (q, o 8192^2; k, v 8192 x 1024; three 8192 x 28672 MLP matrices) and
the word embedding of 128,512 rows (128,256 padded to a multiple of 128 x tp) x 8192:
40 x (855,638,016 / 4 + 16,384) + 128,512 x 8192 / 4 = 8,820,228,096 a GPU, over ZeRO-1's dp 8
1,102,528,512. Moving the whole optimizer to the host frees its GPU bytes at the peak (stage 0):
12 x 1,102,528,512 B = 12.32 GiB (fp32 moments), 6 x = 6.16 GiB (bf16). The host holds 16 bytes
a parameter (fp32 master, two fp32 moments, fp32 gradient buffer) before the pinned blocks'
round-up, which is under twice the 8 pinned bytes: between 16.4 and 24.6 GiB, the same for
both plans."""

from __future__ import annotations

import re
from dataclasses import replace

from jobs import job

from planner.cli import explain_notes
from planner.inputs.layout import Layout
from planner.model import cost

LAYOUT = Layout(tp=4, pp=2, dp=8, sequence_parallel=True, zero_stage=1)
BASE = replace(job("llama3.1-70b", "h100-sxm-80gb", 64, 4096, 256), optimizer_offload_fraction=1.0)
SHARD = (40 * (855_638_016 // 4 + 16_384) + 128_512 * 8192 // 4) // 8
GIB = 2**30


def _note(dtype: str) -> str:
    j = replace(BASE, optimizer_state_dtype=dtype)
    text = explain_notes.optimizer_offload_text(j, LAYOUT, cost.estimate(j, LAYOUT))
    assert text is not None
    return text


def _figures(text: str) -> tuple[float, float]:
    host = re.search(r"([\d.]+) GiB of pinned host memory", text)
    freed = re.search(r"frees ([\d.]+) GiB at the peak", text)
    assert host and freed, text
    return float(host.group(1)), float(freed.group(1))


def test_shard_by_hand() -> None:
    assert SHARD == 1_102_528_512


def test_bf16_moments_free_what_the_gpu_adam_would_hold_in_bf16() -> None:
    host32, freed32 = _figures(_note("fp32"))
    host16, freed16 = _figures(_note("bf16"))
    assert freed32 == round(12 * SHARD / GIB, 1)  # 12.3
    assert freed16 == round(6 * SHARD / GIB, 1)  # 6.2
    assert host16 == host32
    assert 16 * SHARD / GIB <= host16 <= 24 * SHARD / GIB


def test_bf16_note_says_the_host_moments_are_fp32() -> None:
    text = _note("bf16")
    assert "moments in fp32" in text
    assert text.endswith("against the optimizer on the GPU with bf16 moments")
    assert "moments in fp32" not in _note("fp32")
