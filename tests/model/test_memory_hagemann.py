"""The memory model against every flash-attention-2 layout Hagemann et al. 2023 measured.

Oracle: benchmarks/data/hagemann_layouts.csv (read by benchmarks/hagemann.py), the measured
outcomes (trained / out of memory) of 458 layouts of 13B and 30B models on 80 GB A100s
(arXiv:2311.05610; see benchmarks/hagemann.py for the settings). Issue target: no out-of-memory
layout judged "fits", at most 10% of those that trained judged "does not fit".
benchmarks/fit_memory.py measured 0 / 280 and 11 / 178 with the constants in
planner/model/loss_activations.py and shard.py; the test holds the issue's targets. The what-if
pipeline split (hagemann.balanced_item_split) is checked against a brute-force search of every cut.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace

import pytest
from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import hagemann

from planner.inputs import catalog
from planner.model import memory, params


def test_classification_of_measured_layouts() -> None:
    rows = list(hagemann.rows())
    ok = [r for r in rows if r.outcome == "ok"]
    oom = [r for r in rows if r.outcome == "oom"]
    assert (len(ok), len(oom)) == (178, 280)
    oom_judged_fits = [r for r in oom if memory.estimate(r.job, r.layout).fits]
    ok_judged_not = [r for r in ok if not memory.estimate(r.job, r.layout).fits]
    assert len(ok_judged_not) <= 0.10 * len(ok)
    assert oom_judged_fits == []


def test_fused_norm_and_parallel_loss_save_memory() -> None:
    # the same layout with Megatron's fused norms and vocab-parallel loss needs less memory
    row = next(r for r in hagemann.rows() if r.layout.tp == 4 and r.layout.pp == 2)
    base = memory.estimate(row.job, row.layout).peak
    fused = replace(
        row.job,
        fused_norm=True,
        cross_entropy="fused",
        fused_swiglu=True,
        sp_keeps_gathered_input=False,
    )
    assert memory.estimate(fused, row.layout).peak < base


@pytest.mark.parametrize("model", ["llama-13b", "llama-30b"])
@pytest.mark.parametrize("pp", [2, 3, 4])
def test_balanced_split_is_the_lightest_heaviest_stage(model: str, pp: int) -> None:
    # oracle: every way to cut the L + 3 items (embedding, layers, final norm, head) into pp
    # contiguous non-empty stages, by brute force; the balanced split's heaviest stage must be
    # the lightest any of them achieves, and its layers must add up to L
    arch = catalog.get_model(f"hagemann-{model}")
    layer = sum(params.layer_params(arch, 0))
    weights = [
        params.embedding_params(arch),
        *[layer] * arch.num_layers,
        params.final_norm_params(arch),
        params.output_params(arch),
    ]
    prefix = [0, *itertools.accumulate(weights)]
    best = min(
        max(prefix[b] - prefix[a] for a, b in itertools.pairwise((0, *cuts, len(weights))))
        for cuts in itertools.combinations(range(1, len(weights)), pp - 1)
    )
    split = hagemann.balanced_item_split(arch, pp)
    assert split is not None and sum(split) == arch.num_layers
    # stage r holds split[r] layers, plus the embedding on the first and norm + head on the last
    loads = [n * layer for n in split]
    loads[0] += weights[0]
    loads[-1] += weights[-2] + weights[-1]
    assert max(loads) == best
