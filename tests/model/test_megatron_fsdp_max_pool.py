"""Megatron-FSDP's max pool (--megatron-fsdp-max-pool-double-buffer, plan field
parallel.fsdp_max_pool): `planner.model.megatron_fsdp_pool.max_pooled` and its place in the step.

Oracles: NVIDIA/Megatron-LM d98e8a64, megatron/core/distributed/fsdp/src/megatron_fsdp/
(pgb: param_and_grad_buffer.py):
- pgb:2524-2532: with fsdp_double_buffer, MaxPoolAllocator where the DDP config's
  megatron_fsdp_max_pool_double_buffer is set, else FixedPoolAllocator; two buffers each
  (UB_BUFFER_NUM, :2526); training.py:2632-2634 copies the argument of that name into the DDP
  config; arguments.py:1172-1176 turns --use-nccl-ub into the double buffer only, :1179-1181
  the max-pool flag into the double buffer too;
- pgb:980-1023: per unit and dtype, its buckets sorted from the largest, the k-th at offset k,
  each offset sized to the largest bucket there; :1071-1072 every unit allocates from the pool;
  :1154-1161 and utils.py:777-795 one named buffer per (buffer, dtype, offset), grown to the
  largest request; utils.py:798-803 one global buffer, shared by every model chunk;
- pgb:676-698, :842-848: the fixed pool, for comparison (test_megatron_fsdp_buffers.py).
The expected figures are hand arithmetic on DeepSeek-V2-Lite's shapes, written out below.
"""

from __future__ import annotations

import json

import pytest
from paths import TESTS
from test_megatron_fsdp_buffers import LINE

from planner.emit import bridge_ddp, megatron
from planner.inputs import megatron_args, plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan
from planner.model import megatron_fsdp, megatron_fsdp_pool
from planner.model.megatron_fsdp_bytes import uniform


def _fixed(units: list, prices: list) -> float:
    """One chunk's fixed gradient pool and its backup allocator's units (`pool` + `apart`)."""
    pooled = megatron_fsdp_pool.pool(units, prices, "grad")[1]
    return 2 * pooled + megatron_fsdp_pool.apart(units, prices, "grad")


def test_every_unit_pooled_each_offset_as_large_as_any_units() -> None:
    # DeepSeek-V2-Lite's shape (test_megatron_fsdp_buffers.py): one dense unit of 81 beside 26
    # MoE units of (dense 31, experts 34), one dtype, 1 B. Sorted from the largest, the MoE
    # units' buckets are (34, 31) and the dense unit's (81): offset 0 max(81, 34) = 81, offset 1
    # 31; two buffers: 2 x (81 + 31) = 224. The fixed pool: 2 x (31 + 34) + 81 = 211.
    units = [(81.0, 0.0)] + 26 * [(31.0, 34.0)]
    one = [uniform(1.0, 1.0)] * len(units)
    assert megatron_fsdp_pool.max_pooled(units, one, "grad") == 224.0
    assert _fixed(units, one) == 211.0
    # expert groups of one rank: their buckets are views, never requested (priced 0), yet they
    # keep offset 0 (the sort is by size, pgb:991-993): offset 0 still the dense unit's 81,
    # offset 1 31: 224 again. The fixed pool: 2 x 31 + 81 = 143.
    views = [uniform(1.0, 1.0)] + 26 * [uniform(1.0, 1.0)._replace(grad=(1.0, 0.0))]
    assert megatron_fsdp_pool.max_pooled(units, views, "grad") == 224.0
    assert _fixed(units, views) == 143.0


def test_each_dtype_has_its_own_offsets() -> None:
    # pgb:987-1004: offsets are kept per dtype. The dense unit's parameters in bf16 (2 B), the
    # MoE units' in FP8 (uint8, 1 B): bf16 [81 x 2], float8 [34, 31] x 1: 2 x (162 + 65) = 454
    # (one dtype would give 2 x (max(162, 34) + 31) = 386). The gradients, one dtype at 2 B:
    # 2 x (81 + 31) x 2 = 448.
    units = [(81.0, 0.0)] + 26 * [(31.0, 34.0)]
    prices = [uniform(2.0, 2.0)] + 26 * [uniform(2.0, 1.0)]
    assert megatron_fsdp_pool.max_pooled(units, prices, "pool") == 454.0
    assert megatron_fsdp_pool.max_pooled(units, prices, "grad") == 448.0


def _lite(ep: int, **parallel: object) -> tuple:
    plan = parse_plan(
        {
            "model": {"name": "deepseek-v2-lite"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
            "training": {
                "seq_length": 4096,
                "global_batch_size": 64,
                "precision": "bf16",
                "main_grad_dtype": "bf16",
            },
            "parallel": {"tp": 1, "pp": 1, "ep": ep, "micro_batch_size": 1, "zero_stage": 3}
            | parallel,
        }
    )
    job, lay = plan.job, plan.require_layout()
    return job, lay, lay.chunk_layers(job.arch.num_layers)[0]


# DeepSeek-V2-Lite (h 2,048, 16 heads, MLA without a q LoRA: q 2,048 x 16 x 192, kv_a 2,048 x
# (512 + 64), its norm 512, kv_b 512 x 16 x 256, o 16 x 128 x 2,048 = 13,763,072; two norms of
# 2,048): the dense layer adds an MLP of 3 x 2,048 x 10,944 = 67,239,936, 81,007,104 in all; an
# MoE layer a router of 64 x 2,048, two shared experts of 3 x 2,048 x 1,408 = 17,301,504, its
# dense group 31,199,744, and 64 experts of 3 x 2,048 x 1,408 = 553,648,128. Buckets padded
# (`megatron_fsdp.padded`) to dp 16 x h = 32,768: dense unit 2,473 x 32,768, MoE dense group
# 953 x 32,768; the experts at ep 8 (69,206,016 = 16,896 x 2 x 2,048) need none. Output side:
# 102,400 x 2,048 + 2,048 = 209,717,248, padded to 6,401 x 32,768, from the backup allocator
# (over the 40M default bucket: split, the larger end counted, `megatron_fsdp`).
DENSE, MOE_DENSE = 2_473 * 32_768, 953 * 32_768
EXPERTS_EP8, EXPERTS_EP16 = 553_648_128 // 8, 553_648_128 // 16
TAIL = 6_401 * 32_768


@pytest.mark.parametrize("ep", [8, 16])
def test_deepseek_v2_lite_max_pool_by_hand(ep: int) -> None:
    """bf16 gradients and parameters (2 B). Max pool, at ep 8 (expert dp 2) and ep 16 (expert
    dp 1: the experts' buckets are views): offset 0 the dense unit's DENSE (above the experts'
    69.2M / 34.6M), offset 1 MOE_DENSE; two buffers for the gradients and two for the
    parameters: 2 x 2 x (DENSE + MOE_DENSE) x 2 B, beside the output side's bucket, and nothing
    more at the step. Before (the fixed pool): at ep 8 2 x (MOE_DENSE + EXPERTS) + DENSE apart,
    each way (1.55 GB, over); at ep 16 2 x MOE_DENSE + DENSE each way (0.99 GB, under)."""
    job, lay, chunks = _lite(ep, fsdp_double_buffer=True, fsdp_max_pool=True)
    assert (lay.dense_dp, lay.expert_dp) == (16, 16 // ep)
    pools = 2 * 2 * (DENSE + MOE_DENSE) * 2
    transient, _ = megatron_fsdp.transient_and_resident(job, lay, 0, chunks)
    assert transient == pytest.approx(pools + TAIL * 2)
    assert megatron_fsdp.step_bytes(job, lay, 0, chunks) == pytest.approx(pools)
    # the same layout on the fixed pool, as test_megatron_fsdp_buffers counts it
    job, lay, chunks = _lite(ep, fsdp_double_buffer=True)
    experts = EXPERTS_EP8 if ep == 8 else 0
    fixed = 2 * (2 * (MOE_DENSE + experts) + DENSE) * 2
    transient, _ = megatron_fsdp.transient_and_resident(job, lay, 0, chunks)
    assert transient == pytest.approx(fixed + TAIL * 2)
    assert EXPERTS_EP16 < DENSE  # offset 0 is the dense unit's at either ep


@pytest.mark.parametrize(
    ("extra", "max_pool"),
    [
        ("--megatron-fsdp-max-pool-double-buffer", True),
        ("--fsdp-double-buffer", False),
        ("--use-nccl-ub", False),  # arguments.py:1172-1176: the double buffer, the fixed pool
    ],
)
def test_read_from_the_line_written_back_and_launched(extra: str, max_pool: bool) -> None:
    """The line's flag selects the allocator (pgb:2528-2532); the plan writes it back, the
    Megatron target launches it beside --fsdp-double-buffer, and the Bridge target sets
    ddp.megatron_fsdp_max_pool_double_buffer either way, a field of Bridge 067f987d's DDP config
    (tests/data/megatron_bridge_config_schema.json; recipes/qwen_vl/h100/qwen35_vl.py:1257 sets
    it)."""
    plan = parse_plan(megatron_args.to_plan(f"{LINE}{extra}", "h100-sxm-80gb", 8))
    lay = plan.require_layout()
    assert (lay.fsdp_double_buffer, lay.fsdp_max_pool) == (True, max_pool)
    args = megatron.arguments(plan)
    flags = {a[0] for a in (*args.parallel, *args.training)}
    assert "--fsdp-double-buffer" in flags
    assert ("--megatron-fsdp-max-pool-double-buffer" in flags) is max_pool
    assert bridge_ddp.ddp_table(plan)["megatron_fsdp_max_pool_double_buffer"] is max_pool
    schema = json.loads((TESTS / "data" / "megatron_bridge_config_schema.json").read_text())
    assert "megatron_fsdp_max_pool_double_buffer" in json.dumps(schema)
    written = plan_writer.parallel_table(plan.job, lay)
    assert written.get("fsdp_max_pool", False) is max_pool


def test_refused_without_the_double_buffer_and_under_v2() -> None:
    """The max pool is the double buffer's allocator (pgb:2524-2532): a plan with it alone
    exits 2 naming the field; Megatron-FSDP v2 raises on it (mcore_fsdp_adapter.py:702-703)."""
    with pytest.raises(InputError, match=r"parallel\.fsdp_max_pool: true without fsdp_double"):
        _lite(8, fsdp_max_pool=True)
    with pytest.raises(InputError, match="--megatron-fsdp-version 2"):
        v2 = LINE.replace("--use-distributed-optimizer ", "")  # v2 refuses it (args:1124-1126)
        megatron_args.to_plan(
            f"{v2}--megatron-fsdp-max-pool-double-buffer --megatron-fsdp-version 2",
            "h100-sxm-80gb",
            8,
        )


def test_named_inert_below_zero2() -> None:
    # plain DDP / the distributed optimizer run at ZeRO 0 / 1: no Megatron-FSDP buffers
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 64},
            "parallel": {
                "tp": 2,
                "zero_stage": 1,
                "fsdp_double_buffer": True,
                "fsdp_max_pool": True,
            },
        }
    )
    named = [field for field, _ in plan.inert]
    assert "parallel.fsdp_max_pool" in named and "parallel.fsdp_double_buffer" in named


def test_the_fixed_pool_is_shared_by_the_chunks() -> None:
    # every model chunk's FixedPoolAllocator names the same two buffers per dtype in the one
    # global memory buffer (pgb:855-863, utils.py:777-795), which grow to the largest request:
    # chunks pooling units of 10 and of 20 elements hold 2 x 20 gradients and 2 x 20 parameters,
    # not one chunk's own 2 x 10 or 2 x 20
    small, large = [(10.0, 0.0)] * 3, [(20.0, 0.0)] * 3
    one = [uniform(1.0, 1.0)] * 3
    assert megatron_fsdp_pool.fixed_pools([small, large], [one, one]) == 2 * 20 + 2 * 20
    # parameters of another dtype (bytes an element) are another named tensor: both held
    fp8 = [uniform(1.0, 0.5)] * 3
    assert megatron_fsdp_pool.fixed_pools([small, large], [one, fp8]) == 40 + (2 * 10 + 2 * 10)
