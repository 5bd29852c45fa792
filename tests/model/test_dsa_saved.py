"""What TileLang's sparse MLA and the dense indexer loss leave alive for the backward, by hand, on
DeepSeek-V3.2's attention shape (tests/model/test_dsa.py's: 128 heads, 576-wide absorbed query
and latent key, indexer 64 heads of 128, top 2,048).

Oracle: Megatron-LM d98e8a64 megatron/core/transformer/experimental_attention_variant/:
- ops/tilelang_dsa.py:798 `query.permute(1, 0, 2, 3).contiguous()` and :803 the key's alike
  (a view of a [s, 1, ...] tensor, a copy when mbs > 1), :802 `F.pad` to 16 heads (a copy where a
  rank has fewer); ops/sparse_mla.py:69 `ctx.save_for_backward(q, kv, indices, valid_heads)`;
- absorbed_mla.py:906 `discard_output_and_register_recompute` (tensor_parallel/random.py:993-996
  `untyped_storage().resize_(0)`: the checkpoint's outputs and every view of them freed, copies
  not);
- dsa.py:1835 / :1856 the CP all-gather and reorder of the key (a new tensor), :1981-1990 the
  indexer key's; :2013-2020 the loss's reference path on `query.detach()`, `key.detach()`, saved
  with the indexer's q, weights and k at :944.
The byte counts are written out in the comments, independently of planner.model.dsa.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from planner.inputs.arch import ModelArch
from planner.inputs.plan import parse_plan
from planner.model import dsa
from planner.model.shard import Shard

ZOO = Path(__file__).resolve().parents[2] / "model_zoo" / "deepseek-v3.toml"


def _arch() -> ModelArch:
    """DeepSeek-V3's zoo model with DSv3.2's indexer (64 heads of 128, top 2,048)."""
    table = tomllib.loads(ZOO.read_text())
    table.update(dsa_indexer_n_heads=64, dsa_indexer_head_dim=128, dsa_indexer_topk=2048)
    table["name"] = "deepseek-v3-dsa"  # no longer the zoo's model (plan_resolve refuses that name)
    doc = {
        "model": table,
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 8, "dsa_kernel_backend": "tilelang"},
        "parallel": {"tp": 8, "sequence_parallel": True, "micro_batch_size": 1},
    }
    return parse_plan(doc, ZOO).job.arch


REBUILT = {"recompute": "core_attn", "modules": frozenset({"mla_up_proj"})}


def _tl(tp: int = 8, mbs: int = 1, cp: int = 1, seq: int = 4096, **kw: Any) -> Shard:
    """A TileLang shard of one micro-batch: t = seq / cp x mbs local queries."""
    heads = max(128 // tp, 16)
    return Shard(
        tokens=seq // cp * mbs,
        tp=tp,
        micro_batch_size=mbs,
        seq_per_cp_rank=seq // cp,
        seq_length=seq,
        dsa_kernels="tilelang",
        dsa_heads=heads,
        **kw,
    )


def test_the_padded_query_outlives_mla_up_proj() -> None:
    # tp 16: 8 heads a rank, padded to 16 (tilelang_dsa.py:802): the padded copy is saved,
    # 2 x 4096 x 16 x 576 = 75,497,472 beyond W_uv's input (2 x 8 x 4096 x 512) and the mask
    part, whole = dsa.block_bytes(_arch(), _tl(tp=16, **REBUILT))
    assert part == 2 * 8 * 4096 * 512 + 16 * 4096 + 75_497_472
    assert whole == 4 * 4096 * 2048  # the key is still the checkpoint's (a view)


def test_a_micro_batch_of_two_copies_the_query_and_the_key() -> None:
    # mbs 2 at tp 8: t = 8,192; the batch-major copies: query 2 x 8192 x 16 x 576 = 150,994,944,
    # key 2 x 4096 x 2 x 576 = 9,437,184
    part, whole = dsa.block_bytes(_arch(), _tl(mbs=2, **REBUILT))
    assert part == 2 * 16 * 8192 * 512 + 16 * 8192 + 150_994_944
    assert whole == 4 * 8192 * 2048 + 9_437_184


def test_the_cp_gathered_key_outlives_mla_up_proj() -> None:
    # cp 2 of an 8,192 sequence: t = 4,096 local queries, the key gathered to s = 8,192 rows:
    # 2 x 8192 x 576 = 9,437,184 (the query, local and unpadded, is still a view)
    part, whole = dsa.block_bytes(_arch(), _tl(cp=2, seq=8192, **REBUILT))
    assert part == 2 * 16 * 4096 * 512 + 16 * 4096
    assert whole == 4 * 4096 * 2048 + 9_437_184


def test_the_dense_loss_keeps_the_unpadded_query_beside_the_padded_copy() -> None:
    # dense loss (tilelang, no sparse loss), no recompute, tp 16: query.detach() (8 heads,
    # 2 x 4096 x 8 x 576 = 37,748,736) beside SparseMLA's 16-head copy (75,497,472)
    off = dsa.block_bytes(_arch(), _tl(tp=16))[0]
    # (without the loss: q_nope 2 x 8 x 4096 x 128, W_uv's input 2 x 8 x 4096 x 512, the copy,
    # the head mask 16 x 4096; the attention's own 8-head query dies after the pad)
    assert off == 2 * 8 * 4096 * (128 + 512) + 2 * 4096 * 16 * 576 + 16 * 4096
    part, _ = dsa.block_bytes(_arch(), _tl(tp=16, dsa_loss="dense"))
    assert part - off == 37_748_736
    # unpadded (tp 8, mbs 1) the loss's query is the kernel's view: nothing more
    assert dsa.block_bytes(_arch(), _tl(dsa_loss="dense"))[0] == dsa.block_bytes(_arch(), _tl())[0]
    # under mla_up_proj the loss's view is freed with the checkpoint's outputs: only the copy
    rebuilt = dsa.block_bytes(_arch(), _tl(tp=16, dsa_loss="dense", **REBUILT))[0]
    assert rebuilt == 2 * 8 * 4096 * 512 + 16 * 4096 + 75_497_472


def test_the_dense_loss_keeps_the_gathered_indexer_key_under_cp() -> None:
    # cp 2 of 8,192: the loss saves k gathered to 8,192 rows (dsa.py:1990, :944), 2 x 8192 x 128
    # = 2,097,152, not 2 x 4096 x 128; everything else on the 4,096 local queries:
    # inputs 2 x 4096 x (7168 + 1536 + 128), q 2 x 4096 x 64 x 128, weights 2 x 4096 x 64,
    # int64 top k 8 x 4096 x 2048
    off = dsa.block_bytes(_arch(), _tl(cp=2, seq=8192))[1]
    on = dsa.block_bytes(_arch(), _tl(cp=2, seq=8192, dsa_loss="dense"))[1]
    t = 4096
    expect = 2 * t * (7168 + 1536 + 128) + 2 * t * 64 * 128 + 2 * t * 64 + 8 * t * 2048
    assert on - off == expect + 2 * 8192 * 128
