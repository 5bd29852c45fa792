"""The lightning indexer's own sequence-parallel all-gathers over TP, timed beside MLA's latent
gathers, on DeepSeek-V3.2's shape (hidden 7,168, q_lora_rank 1,536) at tp 8.

Oracle: Megatron-LM d98e8a64 megatron/core/transformer/experimental_attention_variant/dsa.py:
1273-1275 (`forward_before_topk`: with sequence parallelism and TP > 1, x and qr are each
`gather_from_sequence_parallel_region`-ed), :1887-1888 (both detached: no backward traffic);
absorbed_mla.py:847-852 (a checkpointed core attention takes x and qr as inputs and re-runs the
indexer in its backward). Bytes by hand: 4,096 tokens x (7,168 + 1,536) x 2 (bf16) =
71,303,168 a forward, priced by the same all-gather (`comms.all_gather`) as every TP gather.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import comms, dsa_comm, gemm_shapes, layer_tp

ZOO = Path(__file__).resolve().parents[2] / "model_zoo" / "deepseek-v3.toml"
BYTES = 4096 * (7168 + 1536) * 2  # 71,303,168
LAY = Layout(tp=8, dp=1, sequence_parallel=True, micro_batch_size=1)


def _job(dsa: bool = True) -> Job:
    table = tomllib.loads(ZOO.read_text())
    if dsa:
        table.update(dsa_indexer_n_heads=64, dsa_indexer_head_dim=128, dsa_indexer_topk=2048)
        table["name"] = "deepseek-v3-dsa"  # no longer the zoo's model (plan_resolve)
    doc = {
        "model": table,
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 8, "dsa_kernel_backend": "tilelang"},
        "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
    }
    return parse_plan(doc, ZOO).job


def test_the_indexer_gathers_its_input_and_q_latent_forward_only() -> None:
    job = _job()
    assert gemm_shapes.dsa_indexer_gathered_width(job.arch) == 7168 + 1536
    one = comms.all_gather(BYTES, comms.place(job.cluster, 1, 8))
    assert one > 0
    assert dsa_comm.indexer_gathers(job, LAY, DENSE, 4096, 1, ()) == one
    # a checkpointed core attention (and full recompute) gathers again
    assert dsa_comm.indexer_gathers(job, LAY, DENSE, 4096, 1, ("core_attn",)) == 2 * one
    assert dsa_comm.indexer_gathers(job, LAY, DENSE, 4096, 2, ()) == 2 * one
    # mla_up_proj's checkpoint does not hold the indexer
    assert dsa_comm.indexer_gathers(job, LAY, DENSE, 4096, 1, ("mla_up_proj",)) == one
    # no sequence parallelism (the input is whole already) or no DSA: nothing
    whole = Layout(tp=8, dp=1, sequence_parallel=False, micro_batch_size=1)
    assert dsa_comm.indexer_gathers(job, whole, DENSE, 4096, 1, ()) == 0.0
    assert dsa_comm.indexer_gathers(_job(dsa=False), LAY, DENSE, 4096, 1, ()) == 0.0


def test_the_layer_tp_charges_carry_the_indexer_gathers() -> None:
    # the same GEMMs with and without the indexer: the layer's shown, traffic and plain TP seconds
    # differ by the indexer's forward gathers alone (nothing of it hides under a GEMM)
    with_dsa, without = _job(), _job(dsa=False)
    shapes = gemm_shapes.linear_gemms(with_dsa.arch, 4096, 8, 1, 1, DENSE)
    gemms = (shapes, [1e-4] * len(shapes))
    one = comms.all_gather(BYTES, comms.place(with_dsa.cluster, 1, 8))
    for modules, passes in (((), 1), (("core_attn",), 2)):
        a = layer_tp.tp_charges(with_dsa, LAY, DENSE, gemms, 4096, 1, modules)
        b = layer_tp.tp_charges(without, LAY, DENSE, gemms, 4096, 1, modules)
        assert a[1] == b[1]  # hidden: unchanged
        for x, y in ((a[0], b[0]), (a[2], b[2]), (a[3], b[3])):
            assert abs(x - y - passes * one) < 1e-12
