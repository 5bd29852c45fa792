"""Which layers torchtitan's every-N-th-layer activation checkpointing wraps, per pipeline rank
and chunk (planner.inputs.titan_every_layers).

Oracle: the source loop at pytorch/torchtitan e347b1e5, worked by hand.
distributed/activation_checkpoint.py:24 keeps one module-global `_layer_sac_count`; :37-40 add 1
per transformer block, then wrap it where the count % N == 0; :238-247 visit each model part's
`layers` in order; pipeline_parallel.py:136-142 call parallelize_fn (so apply_ac) on the rank's
model parts in `_get_stage_indices()` order (:451-473: r, r + pp, ... looped; r, 2 pp - 1 - r
in a V). So the count runs over the rank's chunks in order: the rank's j-th block (1-based) is
wrapped where j % N == 0. torchtitan's default split of Llama 3.1 8B's 32 layers
(`generate_llm_fqn_per_model_part`, 32 + 2 effective layers, the first and last stage one less):
8 stages of 5 5 4 4 4 4 4 4 less the embedding and the output: 4 5 4 4 4 4 4 3 layers, from layer
0, 4, 9, 13, 17, 21, 25, 29; 4 stages of 9 9 8 8: 8 9 8 7 layers, from 0, 8, 17, 25.
"""

from __future__ import annotations

import tomllib

import pytest
from plan_text import titan_job

from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.inputs.titan_every_layers import (
    block_ranges,
    counts,
    last_wrapped,
    rank_wrapped,
    recomputed,
    stand_in,
    wrapped,
)


def titan_layout(pp: int, vpp: int, schedule: str, every: int) -> Layout:
    text = (
        titan_job()
        + f'[parallel]\npp = {pp}\nvpp = {vpp}\nzero_stage = 3\nrecompute = "full"\n'
        + f'[torchtitan]\npipeline_schedule = "{schedule}"\nselective_layer_every = {every}\n'
    )
    return parse_plan(tomllib.loads(text)).require_layout()


def test_the_count_runs_across_a_ranks_chunks() -> None:
    # v = 2 chunks of l = 3 layers, N = 2: the rank's blocks 1..6, wrapped at 2, 4, 6: chunk 0's
    # second (layer 1) and chunk 1's first and third (layers 10 and 12). A counter per chunk
    # would wrap one of each (1 and 11).
    assert wrapped((range(0, 3), range(10, 13)), 2) == ((1,), (10, 12))
    assert recomputed((range(0, 3), range(10, 13)), 2) == (
        range(1, 2),
        range(10, 11),
        range(12, 13),
    )
    # chunk 1's last layer (12) is wrapped; with N = 3 (blocks 3 and 6) both chunks' last are
    assert last_wrapped((range(0, 3), range(10, 13)), 2)
    assert wrapped((range(0, 3), range(10, 13)), 3) == ((2,), (12,))
    # N = 4: block 4 only (chunk 1's first); chunk 0 wraps none
    assert wrapped((range(0, 3), range(10, 13)), 4) == ((), (10,))
    assert not last_wrapped((range(0, 3), range(10, 13)), 4)


def test_interleaved_ranks_by_hand() -> None:
    lay = titan_layout(4, 2, "Interleaved1F1B", 3)
    chunks = lay.chunk_layers(32)
    # stages r and r + 4 on rank r
    assert chunks[0] == (range(0, 4), range(17, 21))
    assert chunks[1] == (range(4, 9), range(21, 25))
    assert chunks[3] == (range(13, 17), range(29, 32))
    # N = 3. Rank 0: blocks 3 (layer 2) and 6 (chunk 1's second, 18). Rank 1: 5 + 4 blocks, 3
    # (layer 6), 6 (chunk 1's first, 21), 9 (its fourth, 24). Rank 3: 4 + 3 blocks, 3 (15), 6 (30).
    got = rank_wrapped(lay, 32, 3)
    assert got[0] == ((2,), (18,))
    assert got[1] == ((6,), (21, 24))
    assert got[3] == ((15,), (30,))
    # rank 1's chunk 1 wraps two: no one count of layers per chunk holds for every chunk
    assert counts(lay, 32, 3) == ((1, 1), (1, 2), (1, 1), (1, 1))


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV"])
def test_v_ranks_by_hand(schedule: str) -> None:
    lay = titan_layout(2, 2, schedule, 2)
    # stages 0 and 3 on rank 0, 1 and 2 on rank 1 (the V), in that order
    assert lay.chunk_layers(32) == (
        (range(0, 8), range(25, 32)),
        (range(8, 17), range(17, 25)),
    )
    # N = 2. Rank 0: 8 + 7 blocks, the even ones: chunk 0's layers 1 3 5 7 (blocks 2-8), then
    # blocks 10 12 14, chunk 1's second, fourth and sixth (26 28 30). Rank 1: 9 + 8 blocks:
    # 9 11 13 15 (blocks 2-8), then blocks 10-16, chunk 1's 1st 3rd 5th 7th (17 19 21 23):
    # chunk 0's 9 blocks end on an odd one, so chunk 1 starts on an even
    assert rank_wrapped(lay, 32, 2) == (
        ((1, 3, 5, 7), (26, 28, 30)),
        ((9, 11, 13, 15), (17, 19, 21, 23)),
    )
    # rank 0's chunk 0 ends on block 8, wrapped; rank 1's chunks end on blocks 9 and 17
    assert last_wrapped(lay.chunk_layers(32)[0], 2)
    assert not last_wrapped(lay.chunk_layers(32)[1], 2)
    # N = 3. Rank 0: blocks 3 6 (layers 2 5), 9 12 15 (chunk 1's 1st 4th 7th: 25 28 31).
    # Rank 1: 3 6 9 (10 13 16), 12 15 (chunk 1's 3rd and 6th: 19 22).
    assert rank_wrapped(lay, 32, 3) == (((2, 5), (25, 28, 31)), ((10, 13, 16), (19, 22)))
    assert counts(lay, 32, 3) == ((2, 3), (3, 2))


def test_the_layout_the_models_run() -> None:
    # block full recompute carrying N (`recompute_every`), and none where no rank holds N layers
    # (17 at most here)
    lay = titan_layout(2, 2, "ZBVZeroBubble", 2)
    assert (lay.recompute, lay.recompute_method, lay.recompute_every) == ("full", "block", 2)
    assert lay.recompute_text() == "full(every 2)"
    assert stand_in(lay, 32, 18).recompute == "none"
    # what the models count as recomputed on rank 1: its every second layer, across its chunks
    chunks = lay.chunk_layers(32)[1]
    assert block_ranges(lay, chunks) == recomputed(chunks, 2)
    assert [r.start for r in block_ranges(lay, chunks)] == [9, 11, 13, 15, 17, 19, 21, 23]
    # Megatron's block: the first k of each chunk
    meg = lay.with_(recompute_every=0, recompute_num_layers=2)
    assert block_ranges(meg, chunks) == (range(8, 10), range(17, 19))
