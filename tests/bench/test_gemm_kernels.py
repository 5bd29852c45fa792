"""planner's linear-GEMM model against Transformer Engine's measured GEMMs (gemm_kernels.py).

Oracle: Transformer Engine's GEMM profiling tutorial (benchmarks/data/te_gemm: the 12 GEMMs of one
layer, hidden 4096, FFN 16384, 15,872 tokens, timed on a B300 in bf16, FP8 tensorwise and delayed
scaling, MXFP8 and NVFP4, the kernels alone and with Transformer Engine's quantisation). None of
these rows fitted anything: GEMM_EFFICIENCY_MAX and FP8_CEILING_FRACTION come from step times and
the MAMF table, the quantisation bytes from counting each recipe's passes.
"""

from __future__ import annotations

from benchmarks import gemm_kernels


def test_the_gemm_kernels_alone_are_within_a_tenth() -> None:
    # per layer (fprop + dgrad + wgrad), pre-quantised operands: predicted / measured 0.928 bf16,
    # 1.074 tensorwise FP8, 1.021 MXFP8, 0.960 NVFP4 (2026-12-04). The harness's two runs of the
    # same bf16 kernels (autocast and pre-quantised modes: torch.matmul both) differ by 2.7%
    ratios = gemm_kernels.layer_ratios(gemm_kernels.load())
    pre = {recipe: r for (mode, recipe), r in ratios.items() if mode == "prequantized"}
    assert set(pre) == {"bf16", "tensorwise", "mxfp8", "nvfp4"}
    assert all(abs(r - 1) < 0.10 for r in pre.values()), pre


def test_with_quantisation_the_fp8_recipes_are_within_a_tenth() -> None:
    # autocast (each call quantises its input and weight): 0.953 bf16, 1.012 tensorwise, 1.087
    # delayed, 0.990 MXFP8. NVFP4 0.868: its quantisation (two amax passes, the Hadamard
    # transform of the wgrad operands, both orientations) costs 6.9 bytes per element at the
    # modelled HBM rate where planner counts 5.1 (the measured autocast less pre-quantised
    # time); within 15%, and predicted fast, not slow
    ratios = gemm_kernels.layer_ratios(gemm_kernels.load())
    auto = {recipe: r for (mode, recipe), r in ratios.items() if mode == "autocast"}
    assert set(auto) == set(gemm_kernels.RECIPES)
    assert all(abs(auto[r] - 1) < 0.10 for r in ("bf16", "tensorwise", "delayed", "mxfp8")), auto
    assert 0.85 < auto["nvfp4"] < 1.0


def test_fp8_halves_less_of_the_layer_than_its_peak_promises() -> None:
    # B300's FP8 peak is 2x its bf16 one; the measured autocast layer is 1.39x (tensorwise) and
    # 1.42x (MXFP8) faster than bf16, and the model's within 8% of each: quantisation and the
    # GEMMs' fixed share keep FP8 far from 2x
    rows = gemm_kernels.load()
    measured: dict[str, float] = {}
    for r in rows:
        if r.mode == "autocast" and r.op == "sum":
            measured[r.recipe] = measured.get(r.recipe, 0.0) + r.ms
    shapes = [s for p in gemm_kernels.PASSES.values() for s in p]
    gpu = "b300-sxm-270gb"

    def layer(recipe: str) -> float:
        return gemm_kernels.predicted_ms(gpu, recipe, "autocast", tuple(shapes))

    for recipe in ("tensorwise", "mxfp8"):
        seen = measured["bf16"] / measured[recipe]
        assert 1.3 < seen < 1.5
        assert abs(layer("bf16") / layer(recipe) / seen - 1) < 0.08
