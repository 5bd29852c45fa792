"""Sliding-window attention (ModelArch.window_size, window_attn_skip_freq; Megatron --window-size,
--window-attn-skip-freq): which layers, the key tiles each query tile computes, the attention
kernel's time, the memory (unchanged under flash attention) and the launch flags read back.

Oracles: Megatron-Core's `is_layer_window_attention` (transformer/utils.py @d98e8a64: layer
numbers from 1, an int N makes every N-th layer whole), a brute-force count of each query tile's
key tiles, and the kernel model of planner.model.attention by hand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import attention, attention_time, layer_time, memory


def _windowed(base: str, window: int | None, freq: object = None) -> ModelArch:
    return catalog.get_model(base).model_copy(
        update={"window_size": window, "window_attn_skip_freq": freq}
    )


def _job(arch: ModelArch, seq: int = 8192) -> Job:
    return replace(job("llama3.1-8b", "h100-sxm-80gb", 8, seq, 64), arch=arch)


def test_which_layers_are_windowed_as_megatron_says() -> None:
    # int N: layer numbers 1..L, whole where number % N == 0; a list: its 1s; None: every layer
    a = _windowed("llama3.1-8b", 127, 4)
    assert [a.is_windowed(i) for i in range(8)] == [True, True, True, False] * 2
    b = _windowed("llama3.1-8b", 127, tuple([0, 1] * 16))
    assert [b.is_windowed(i) for i in range(4)] == [False, True, False, True]
    c = _windowed("llama3.1-8b", 4095)
    assert all(c.is_windowed(i) for i in range(32))
    assert a.kind_counts([range(0, 8)]) == (2, 6)  # DENSE, DENSE_WINDOW
    assert not catalog.get_model("llama3.1-8b").is_windowed(0)


def test_bad_windows_are_refused() -> None:
    base = catalog.get_model("llama3.1-8b").model_dump()
    with pytest.raises(ValueError, match="window_attn_skip_freq needs window_size"):
        ModelArch.model_validate({**base, "window_attn_skip_freq": 2})
    with pytest.raises(ValueError, match="3 entries but num_layers is 32"):
        ModelArch.model_validate({**base, "window_size": 4, "window_attn_skip_freq": [1, 0, 1]})


def test_a_windowed_layers_attention_by_hand() -> None:
    # Llama 3.1 8B shapes, s = 8192, w = 127: each 128-query tile visits its own key tile and the
    # one before (the first tile only its own): (63 x 2 + 1) / 64 tiles of 128 = 254 keys a query
    # against (8192 + 128) / 2 = 4160 without the window; the rate at a span of 256 keys against
    # 8192; bf16 on H100, the matmuls bind either way
    j = _job(_windowed("llama3.1-8b", 127, 2))
    gpu = layer_time.gpu_of(j)
    e = layer_time.ATTENTION_EFFICIENCY
    full = attention_time.core_attention(j, gpu, 8192.0, 8192, 1, e)
    win = attention_time.core_attention(j, gpu, 8192.0, 8192, 1, e, window=127)
    assert attention.computed_keys(8192, 127) == (254.0, 256.0)
    fe_full = attention.kernel_fractions(j.cluster.gpu.name, 8192, 128)[0]
    fe_win = attention.kernel_fractions(j.cluster.gpu.name, 256, 128)[0]
    assert win.fwd / full.fwd == pytest.approx(254 / 4160 * fe_full / fe_win, rel=1e-9)
    # whole tiles and a short span: a 128-token window still costs a fifth of 8k tokens' attention
    assert 0.15 < win.fwd / full.fwd < 0.25


def _tiles_brute(seq: int, window: int | None, b: int = 128) -> int:
    """Key tiles the kernel computes, counted: (query tile, key tile) pairs holding any unmasked
    (query q, key k): k <= q and, with a window, k >= q - window."""
    count = 0
    for qt in range(-(-seq // b)):
        for kt in range(qt + 1):
            for q in range(qt * b, min((qt + 1) * b, seq)):
                lo = 0 if window is None else max(q - window, 0)
                if lo <= min((kt + 1) * b - 1, q) and kt * b <= q:  # [lo, q] meets the key tile
                    count += 1
                    break
    return count


@pytest.mark.parametrize(
    ("seq", "window"),
    [(1024, None), (1024, 0), (1024, 1), (1024, 127), (1024, 128), (1024, 129), (2048, 1023)],
)
def test_computed_keys_count_the_whole_tiles(seq: int, window: int | None) -> None:
    # brute force: the tiles counted over every (query tile, key tile) pair, 128 keys each,
    # averaged over the seq / 128 query tiles
    keys, _ = attention.computed_keys(seq, window)
    assert keys == pytest.approx(128 * _tiles_brute(seq, window) / (seq // 128), rel=1e-12)


def test_the_window_shortens_the_layers_it_is_on_and_keeps_memory() -> None:
    lay = Layout(dp=8)
    plain, windowed = _job(catalog.get_model("llama3.1-8b")), _job(_windowed("llama3.1-8b", 127))
    gpu = layer_time.gpu_of(plain)
    dense = layer_time.layer_time(plain, lay, gpu, plain.arch.kinds[0])
    kind = windowed.arch.kinds[-1]
    assert kind.window
    short = layer_time.layer_time(windowed, lay, gpu, kind)
    assert short.fwd < dense.fwd and short.bwd < dense.bwd
    # flash attention keeps no s x s scores: the same bytes with or without the window
    assert memory.estimate(windowed, lay).peak == memory.estimate(plain, lay).peak


def test_a_copy_computes_its_own_layer_tables() -> None:
    # pydantic's model_copy copies the instance dict, where cached properties live: a copy with
    # another depth or window must not carry the original's per-layer kinds (brute force: the
    # copy's tables equal those of the same model built from scratch)
    arch = catalog.get_model("gpt-oss-20b")
    assert len(arch.layer_kinds) == 24 and arch.kind_prefix  # cache them
    for update in ({"num_layers": 6}, {"window_size": None, "window_attn_skip_freq": None}):
        copy = arch.model_copy(update=update)
        fresh = ModelArch.model_validate({**arch.model_dump(), **update})
        assert copy.layer_kinds == fresh.layer_kinds and copy.kinds == fresh.kinds
        assert copy.kind_prefix == fresh.kind_prefix
