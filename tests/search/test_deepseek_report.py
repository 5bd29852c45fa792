"""Issue 21's acceptance test for the DeepSeek-V3 report as a plan: on that job (2,048 H800, its
batch, sequence and FP8 recipe; examples/deepseek-v3-h800.toml without its [parallel] table),
`suggest`'s first layout is at least as fast as DeepSeek's own layout as the example writes it
(tp 1, pp 16, ep 64, its recompute, with Megatron's fine-grained offloading to fit).

Oracle: the same model's estimate of the example plan; the search is certified exact over its
space.

It failed (strict xfail) while the example's fine-grained offloading was charged a whole PCIe 5
link per GPU: the example's layout splits 61 layers over pp 16 x vpp 2 with a Megatron pipeline
layout string (uneven chunks), which the default search does not generate, and nothing in its
space beat the example's 1,450 tokens/s/GPU. Two H800 share each PCIe switch's uplink to the CPU
(planner/model/host_link.py), so the example's transfers take twice as long: it predicts about
960, and suggest's first (tp 1, pp 16, cp 2, ep 16, no offloading) about 1,330; since the default
search takes the layout string's free form up to vpp 2 (`splits.FREE_FORM_VPP`), its first is
tp 1, pp 16 x vpp 2, cp 2, ep 32 with EP overlap, about 1,560.

Asked for interleaving (`suggest --vpp 2`, `splits.free_form`), the search takes uneven
interleaved splits in the layout string's free form, and there it reaches the example's own split
(four layers on every rank but the last, which holds one with the MTP layer and the heads) at a
speed no lower than the example's: the second test. The default search takes that form up to vpp
2 only, for its speed (every degree would triple its time on this model)."""

from __future__ import annotations

from pathlib import Path

import jobs
import pytest

from planner.inputs.plan import load_plan
from planner.model import cost, memory
from planner.search import top_k
from planner.search.space import UNBOUNDED, Bound, Space
from planner.search.splits import FREE_FORM_VPP, free_form

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepseek-v3-h800.toml"


def test_suggest_ranks_a_layout_at_least_as_fast_as_deepseeks_own_first() -> None:
    plan = load_plan(EXAMPLE)
    own = plan.require_layout()
    assert memory.estimate(plan.job, own).fits  # the example fits (issue 21)
    own_speed = cost.estimate(plan.job, own).tokens_per_s_per_gpu
    best = top_k.search(plan.job, top_k=1).candidates[0]
    assert best.memory.fits
    assert best.performance.tokens_per_s_per_gpu >= own_speed, (best.layout.describe(), own_speed)


def test_asked_for_interleaving_suggest_reaches_the_examples_split_and_speed() -> None:
    plan = load_plan(EXAMPLE)
    own = plan.require_layout()
    own_speed = cost.estimate(plan.job, own).tokens_per_s_per_gpu
    best = top_k.search(plan.job, Space(vpp=Bound(2, 2)), top_k=1).candidates[0]
    assert best.memory.fits
    assert best.performance.tokens_per_s_per_gpu >= own_speed, (best.layout.describe(), own_speed)
    # the example's layout string puts 4 layers on ranks 0-14 (E + 2 + 2, then 2 + 2) and 1 on
    # rank 15 (t, then m L): 15 x 4 + 1 = 61
    assert best.layout.stage_layers(61) == (4,) * 15 + (1,)
    assert best.layout.stage_layers(61) == own.stage_layers(61)


def test_a_vpp_range_from_1_reaches_what_its_part_from_2_does() -> None:
    """`--vpp 1-2` holds every layout of `--vpp 2`, so its certified first is no slower (oracle:
    the search over the narrower space; a round-trip fuzzer's DeepSeek-V3 on 256 H800 at batch
    1,024 found `--vpp 1-2` first at 17.58 s against `--vpp 2`'s 17.46 s: the layout string's
    free form was taken only where the range started above 1)."""
    job = load_plan(EXAMPLE).job
    wide = top_k.search(job, Space(vpp=Bound(1, 2)), top_k=1).candidates[0]
    narrow = top_k.search(job, Space(vpp=Bound(2, 2)), top_k=1).candidates[0]
    assert wide.performance.step_time_s <= narrow.performance.step_time_s * (1 + 1e-12)


def test_the_default_search_holds_what_a_vpp_bound_to_its_free_form_does() -> None:
    """Unbounded, the search takes the layout string's free form up to FREE_FORM_VPP (6), so it
    holds every layout of `--vpp 1-6` and its first is that search's (oracle: that search; an
    optimality fuzzer found the default first 12% slower on DeepSeek-V3 at 2,048 H800 and 16% on
    Kimi K2 at 512, both 61 layers, which no other form interleaves at pp 16, when the free form
    stopped at vpp 1; and, at vpp 2, 10% slower than `--vpp 3` on DeepSeek-V3 at 256 H100)."""
    job = load_plan(EXAMPLE).job
    default = top_k.search(job, top_k=1).candidates[0]
    bounded = top_k.search(job, Space(vpp=Bound(1, FREE_FORM_VPP)), top_k=1).candidates[0]
    assert default.performance.step_time_s == pytest.approx(bounded.performance.step_time_s)
    # 61 layers in pp 16 x vpp 2 or 3: no even, first/last or accounted split; the free form
    # only (vpp 3 led until the output projection kept its 16-bit input under FP8, 3adf927,
    # which lets vpp 2 fit; the 256-GPU case below holds the default to a search pinned at vpp 3)
    lay = default.layout
    assert (lay.pp, lay.vpp) == (bounded.layout.pp, bounded.layout.vpp)
    assert lay.pp == 16 and lay.vpp > 1 and lay.pipeline_layers is not None
    small = jobs.job("deepseek-v3", "h100-sxm-80gb", 256, 2048, 256)
    first = top_k.search(small, top_k=1).candidates[0]
    pinned = top_k.search(small, Space(vpp=Bound(3, 3)), top_k=1).candidates[0]
    assert first.performance.step_time_s <= pinned.performance.step_time_s * (1 + 1e-12)


def test_a_vpp_bound_from_2_without_a_top_holds_no_more_free_form_than_the_default() -> None:
    """`--vpp 2-` is inside the default (`--vpp 1-`), so its free-form degrees are too (an
    optimality fuzzer's: `--vpp 2-` took every degree and ranked 17.16 s first on DeepSeek-V3
    at 256 H800, under the default's 17.46 s); a bound with a top takes the free form to it."""
    assert free_form(Space(vpp=Bound(2, UNBOUNDED))) == free_form(Space()) == FREE_FORM_VPP
    assert free_form(Space(vpp=Bound(1, 4))) == 4
    assert free_form(Space(vpp=Bound(1, 4), uneven=False)) == 0
