"""Megatron-LM launches of hybrid Mamba stacks: pretrain_hybrid.py with --hybrid-layer-pattern, the
pipeline split written as the pattern's '|' segments, and read back by `planner check
--megatron-args`.

Oracle: Megatron-LM d98e8a64 (megatron/training/arguments.py validate_args, "Hybrid layer
pattern": the pattern's '|' segments are the pipeline split, segments / pp the virtual stages, and
the layout string, the account-for flags and the virtual-stage flags are refused beside it;
pretrain_hybrid.py builds the HybridModel), and the zoo's Nemotron 3 Nano pattern split by hand
(52 layers: "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME")."""

from __future__ import annotations

import pytest
from megatron_plans import assert_same, flags, make_plan, round_trip

from planner.emit import bridge, k8s, slurm, torchrun
from planner.inputs import catalog
from planner.inputs.errors import InputError

NANO = "nemotron3-nano-30b-a3b"
PATTERN = catalog.get_model(NANO).hybrid_layer_pattern or ""
REFUSED_BESIDE_THE_PATTERN = (
    "--num-layers",
    "--pipeline-model-parallel-layout",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--mtp-num-layers",
)


def nano(parallel: dict[str, object], num_gpus: int = 32) -> dict[str, list[str]]:
    base = {"tp": 2, "ep": 8, "sequence_parallel": True, "zero_stage": 1}
    return flags(make_plan(NANO, num_gpus, {**base, **parallel}, global_batch_size=256))


def test_pp_1_writes_the_pattern_as_it_is_with_the_mamba_sizes() -> None:
    f = nano({"pp": 1}, num_gpus=16)
    assert f["--hybrid-layer-pattern"] == [PATTERN]
    # the zoo's Mamba mixer: 64 heads of 64, state 128, 8 groups
    assert [f[k] for k in ("--mamba-num-heads", "--mamba-head-dim")] == [["64"], ["64"]]
    assert [f[k] for k in ("--mamba-state-dim", "--mamba-num-groups")] == [["128"], ["8"]]
    assert not set(REFUSED_BESIDE_THE_PATTERN) & set(f)


def test_virtual_stages_become_pattern_segments() -> None:
    # pp 2 x vpp 2: 4 segments of 13 layers, in layer order (rank 0, rank 1, rank 0, rank 1)
    f = nano({"pp": 2, "vpp": 2})
    want = "|".join(PATTERN[i : i + 13] for i in range(0, 52, 13))
    assert want == "MEMEM*EMEMEM*|EMEMEM*EMEMEM|*EMEMEM*EMEME|MEM*EMEMEMEME"
    assert f["--hybrid-layer-pattern"] == [want]
    assert f["--pipeline-model-parallel-size"] == ["2"]
    assert not set(REFUSED_BESIDE_THE_PATTERN) & set(f)


def test_uneven_and_layout_splits_move_the_pipes() -> None:
    # pipeline_layers 16 / 12 / 12 / 12 on pp 4: segments of those lengths
    f = nano({"pp": 4, "pipeline_layers": [16, 12, 12, 12]}, num_gpus=64)
    segments = f["--hybrid-layer-pattern"][0].split("|")
    assert [len(s) for s in segments] == [16, 12, 12, 12] and "".join(segments) == PATTERN
    # a layout string with the embedding and loss in stages of their own: "E|t*26|t*26|L" on
    # pp 2 x vpp 2 puts no layer in the first and the last segment
    f = nano({"pp": 2, "pipeline_model_parallel_layout": "E|t*26|t*26|L"})
    assert f["--hybrid-layer-pattern"] == ["|" + PATTERN[:26] + "|" + PATTERN[26:] + "|"]


@pytest.mark.parametrize(
    "parallel",
    [{"pp": 2, "vpp": 2}, {"pp": 4, "pipeline_layers": [16, 12, 12, 12]}, {"pp": 1}],
    ids=["vpp", "uneven", "pp1"],
)
def test_read_back_gives_the_same_split_and_memory(parallel: dict[str, object]) -> None:
    base = {"tp": 2, "ep": 8, "sequence_parallel": True, "zero_stage": 1}
    num_gpus = 16 * parallel["pp"]  # type: ignore[operator]
    plan = make_plan(NANO, num_gpus, {**base, **parallel}, global_batch_size=256)
    assert_same(plan, round_trip(plan))


def test_mtp_depths_follow_the_pipes() -> None:
    # a hybrid stack with one MTP depth ("/*E"): the depth goes after the last segment, and
    # Megatron infers --mtp-num-layers from it
    arch = catalog.get_model(NANO)
    model = arch.model_dump(exclude_defaults=True, exclude={"display_name"})
    model.update(hybrid_layer_pattern=PATTERN + "/*E", mtp_num_layers=1, name=f"{NANO}-mtp")
    base = {"tp": 2, "ep": 8, "sequence_parallel": True, "zero_stage": 1, "pp": 2}
    plan = make_plan(model, 32, base, global_batch_size=256)
    f = flags(plan)
    assert f["--hybrid-layer-pattern"] == [PATTERN[:26] + "|" + PATTERN[26:] + "/*E"]
    assert "--mtp-num-layers" not in f
    assert_same(plan, round_trip(plan))


def test_launch_scripts_run_pretrain_hybrid() -> None:
    base = {"tp": 2, "ep": 8, "sequence_parallel": True, "zero_stage": 1, "pp": 1}
    hybrid = make_plan(NANO, 16, base, global_batch_size=256)
    dense = make_plan("llama3.1-8b", 16, {"tp": 2, "pp": 1}, global_batch_size=256)
    for render in (torchrun.render, slurm.render, k8s.render):
        assert "pretrain_hybrid.py" in render(hybrid, "job"), render.__module__
        assert "pretrain_hybrid.py" not in render(dense, "job"), render.__module__
        assert "pretrain_gpt.py" in render(dense, "job"), render.__module__


def test_bridge_takes_even_splits_without_virtual_stages_only() -> None:
    # Megatron-Bridge 067f987d hybrid_provider.py asserts no virtual pipeline stages; an even
    # split needs no pattern pipes (Megatron-Core splits the layers evenly)
    base = {"tp": 2, "ep": 8, "sequence_parallel": True, "zero_stage": 1}
    even = make_plan(NANO, 32, {**base, "pp": 2}, global_batch_size=256)
    text = bridge.render(even, "job")
    assert "pipeline_model_parallel_size: 2" in text
    assert "pipeline_model_parallel_layout: null" in text
    for parallel in ({"pp": 2, "vpp": 2}, {"pp": 4, "pipeline_layers": [16, 12, 12, 12]}):
        num_gpus = 16 * parallel["pp"]  # type: ignore[operator]
        plan = make_plan(NANO, num_gpus, {**base, **parallel}, global_batch_size=256)
        with pytest.raises(InputError, match="--hybrid-layer-pattern carries any split") as e:
            bridge.render(plan, "job")
        # the refused split in words: 2 x 2 virtual stages of 52 / 4 = 13 layers; 4 ranks of
        # 16 and 12 layers
        words = "2 ranks x 2 virtual stages of 13 layers" if "vpp" in parallel else "of 12 and 16"
        assert words in str(e.value), str(e.value)
        assert "--vpp 1 --no-uneven" in str(e.value)
