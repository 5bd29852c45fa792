"""torchao's tensorwise Float8 under torch.compile (torchtitan [torchtitan] compile): the amax pass
is fused into the operand's producer, so its quantisation moves 2 bytes per element less
(`gemm.COMPILED_AMAX_SAVING`).

Oracles: hand byte counts (tensorwise: amax read 2, cast read 2, FP8 write and its transpose
1 + 1 = 6; compiled 4; Blackwell writes no transpose, one byte less either way); delayed scaling
has no amax pass to fuse.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import layer_time
from planner.model.gemm import quant_bytes


def test_quantisation_bytes_by_hand() -> None:
    assert quant_bytes("tensorwise", False) == 6.0
    assert quant_bytes("tensorwise", False, compiled=True) == 4.0
    assert quant_bytes("tensorwise", True, compiled=True) == 3.0
    assert quant_bytes("delayed", False, compiled=True) == quant_bytes("delayed", False)


def test_a_compiled_torchtitan_float8_layer_streams_less() -> None:
    base = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision="fp8")
    base = replace(base, framework="torchtitan", fp8_recipe="tensorwise")
    lay = Layout(dp=8, micro_batch_size=2)
    kind = base.arch.kinds[0]
    gpu = layer_time.gpu_of(base)

    def step(compiled: bool, precision: str = "fp8") -> float:
        j = replace(base, torchtitan=TorchtitanSection(compile=compiled), precision=precision)
        one = layer_time.layer_time(j, lay, gpu, kind)
        return one.fwd + one.bwd

    assert step(True) < step(False)
    # in bf16 nothing is quantised: compiling changes nothing here (the fused knobs are the job's)
    assert step(True, "bf16") == pytest.approx(step(False, "bf16"), rel=1e-12)


def test_rowwise_recipes_by_hand() -> None:
    # rowwise: each of the two orientations a GEMM operand takes is quantised on its own, amax
    # read 2 + cast read 2 + FP8 write 1 = 5 each, 10; compiled, each amax pass fused: 6.
    # rowwise_with_gw_hp keeps the weight gradient in bf16: one orientation, 5 (compiled 3).
    # Per-row scales run along one axis, so Blackwell writes both orientations anyway.
    assert quant_bytes("rowwise", False) == 10.0
    assert quant_bytes("rowwise", False, compiled=True) == 6.0
    assert quant_bytes("rowwise", True, compiled=True) == 6.0
    assert quant_bytes("rowwise_with_gw_hp", False) == 5.0
    assert quant_bytes("rowwise_with_gw_hp", False, compiled=True) == 3.0


def test_every_torchtitan_float8_recipe_is_timed_in_order() -> None:
    """The recipes torchtitan's rules accept all time (a rowwise plan crashed `explain` with a
    KeyError before). Compiled (eager, tensorwise and rowwise move the same bytes:
    tests/model/test_titan_eager_float8.py), ordered by construction: rowwise quantises twice
    what tensorwise does
    (10 against 6 bytes an element), and rowwise_with_gw_hp runs the weight-gradient GEMMs at the
    bf16 rate (H100: its FP8 ceiling is ~1.8 x the bf16 one) for 5 bytes less: slower than
    rowwise only because of those GEMMs (with them at the FP8 rate it would be faster)."""
    base = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision="fp8")
    lay = Layout(dp=8, micro_batch_size=2)
    kind = base.arch.kinds[0]
    gpu = layer_time.gpu_of(base)

    def step(recipe: str) -> float:
        j = replace(base, framework="torchtitan", fp8_recipe=recipe)
        j = replace(j, torchtitan=TorchtitanSection(compile=True))
        one = layer_time.layer_time(j, lay, gpu, kind)
        return one.fwd + one.bwd

    tensorwise, rowwise, gw_hp = (step(r) for r in ("tensorwise", "rowwise", "rowwise_with_gw_hp"))
    assert tensorwise < rowwise < gw_hp
