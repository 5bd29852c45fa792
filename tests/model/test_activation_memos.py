"""The memos the search's memory estimates read (DeepSeek-V3's suggest: a layout's shard, the
MoE working set and the per-kind tables, asked thousands of times on the same inputs): each
returns what computing it afresh returns, and is asked by what it reads alone.

Oracles: the builders themselves (`layout_shard.make_shard`, `moe_working`'s own arithmetic,
`params.kind_params` / `replicated_params` per kind), called directly: a brute force of one.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.model import moe_working as mw
from planner.model import params
from planner.model.layout_shard import make_shard
from planner.model.stage_activations import per_layer, shard

JOB = job("deepseek-v3", "h800-sxm-80gb", 2048, 4096, 15360)
LAY = Layout(tp=2, pp=16, dp=64, ep=64, etp=1, sequence_parallel=True, micro_batch_size=1)


def test_a_shard_is_built_once_for_every_zero_stage_and_tp_overlap() -> None:
    # nothing a shard holds reads the ZeRO stage or the TP overlap (make_shard reads neither):
    # the memory estimates of a base's four ZeRO stages, with and without the overlap, share it
    first = shard(JOB, LAY)
    assert first == make_shard(JOB, LAY)
    for z in (0, 1, 2, 3):
        for overlap in (False, True):
            assert shard(JOB, LAY.with_(zero_stage=z, tp_comm_overlap=overlap)) is first
    # what it does read still tells layouts apart
    other = LAY.with_(micro_batch_size=2)
    assert shard(JOB, other) == make_shard(JOB, other) != first


@pytest.mark.parametrize("overlap", [False, True])
def test_the_moe_working_set_is_what_its_arithmetic_gives(overlap: bool) -> None:
    lay = LAY.with_(ep_comm_overlap=overlap)
    sh = shard(JOB, lay)
    full = per_layer(JOB.arch, sh).full
    direct = mw._moe_working(  # the builder: the oracle
        JOB.arch, sh, mw._dispatcher(lay), lay.ep, overlap, full
    )
    assert mw.moe_working(JOB.arch, sh, lay, full) == direct
    assert mw.moe_working(JOB.arch, sh, lay, full) == direct  # from the memo


def test_the_per_kind_tables_do_not_hash_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # functools.cache hashed the whole pydantic model on every call; the tables are kept per
    # model by identity, and hold each kind's parameters
    arch = JOB.arch.model_copy()
    monkeypatch.setattr(ModelArch, "__hash__", lambda self: pytest.fail("hashed the model"))
    assert params.kind_table(arch) == tuple(params.kind_params(arch, k) for k in arch.kinds)
    assert params.replicated_table(arch) == tuple(
        params.replicated_params(arch, k) for k in arch.kinds
    )
    assert params.kind_table(arch) is params.kind_table(arch)
    assert per_layer(arch, shard(JOB, LAY)) == per_layer(JOB.arch, shard(JOB, LAY))
