"""Pipeline splits the search tries (`splits`) and the interleaving degrees that have one
(`vpp_candidates`): how a structure's L decoder layers go over its pp ranks and vpp chunks.

Three of Megatron's forms, and a fourth where the user asks for interleaving:
- even: every virtual stage L / (pp x vpp) layers (None);
- first/last: Megatron's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers,
  the balance of `planner.search.solver` between the first rank's embedding and the last rank's
  output layer over whole layers, every rank's layers a multiple of vpp (a pipeline_layers tuple);
- ACCOUNTED: Megatron's --account-for-embedding-in-pipeline-split and
  --account-for-loss-in-pipeline-split, the embedding and the output layer each counted as a
  layer of the even split: (L + 2) / (pp x vpp) per virtual stage, the first and the last one
  building a decoder layer fewer. Interleaved only (vpp > 1: at vpp 1 its per-rank counts are a
  first/last split, which the solver weighs already), where every virtual stage keeps a decoder
  layer. NVIDIA's Llama 3.1 405B runs take it: 126 + 2 layers on pp 8 x vpp 8, two a stage
  (MLPerf's ASYM_PP_EMBED / ASYM_PP_LOSS, Megatron-Bridge's 405B recipes:
  benchmarks/data/bridge_recipes.md);
- free form, up to vpp FREE_FORM_VPP or the top of the user's vpp bound (`free_form`): the
  solver's balance over whole layers, each rank's layers in vpp chunks as even as they go,
  emitted as --pipeline-model-parallel-layout.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal, Protocol

from planner.inputs.arch import ModelArch
from planner.inputs.plan import Job
from planner.inputs.torchtitan_pipeline import v_stages
from planner.model import params
from planner.search import solver


class _Range(Protocol):
    @property
    def lo(self) -> int: ...

    @property
    def hi(self) -> int: ...

    def bounded_above(self) -> bool: ...


class SplitSpace(Protocol):
    """What the splits read of the search space (`planner.search.space.Space`)."""

    @property
    def uneven(self) -> bool: ...

    @property
    def vpp(self) -> _Range: ...


ACCOUNTED: Literal["accounted"] = "accounted"
"""The split that counts the embedding and the output layer as layers (module docstring)."""

Split = tuple[int, ...] | Literal["accounted"] | None
"""One pipeline split: None (even), each rank's layers (first/last or free form), or ACCOUNTED."""


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def split_fields(split: Split) -> dict[str, Any]:
    """The Layout fields that spell a split."""
    if split == ACCOUNTED:
        return {
            "pipeline_layers": None,
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    return {"pipeline_layers": split}


def accounted_fits(num_layers: int, pp: int, vpp: int) -> bool:
    """Whether the ACCOUNTED split exists at (pp, vpp): interleaved, L + 2 a multiple of
    pp x vpp, and at least two layers a virtual stage (the first and the last keep one)."""
    units = num_layers + 2
    return vpp > 1 and units % (pp * vpp) == 0 and units // (pp * vpp) >= 2


@cache
def last_stage_extra(arch: ModelArch) -> float:
    """The output layer (and MTP) in units of one decoder layer's active parameters: the work the
    last pipeline rank does besides its layers (the loss itself is memory-bound and small). Each
    MTP layer runs one more decoder layer (its active parameters: top-k of the routed experts) and
    one more output layer (`output_time.output_layer_time`)."""
    routed = arch.moe_router_topk / max(arch.num_moe_experts or 1, 1)
    d, e = params.layer_kinds(arch)[1 if arch.is_moe else 0]
    per_layer = (d + routed * e) or 1
    mtp_dense, mtp_expert = params.mtp_layer_params(arch)
    heads = 1 + arch.mtp_num_layers
    out_params = heads * arch.padded_vocab() * arch.hidden_size + mtp_dense + routed * mtp_expert
    return round(out_params / per_layer, 3)


def splits(job: Job, space: SplitSpace, pp: int, vpp: int) -> list[Split]:
    """Pipeline splits to consider: even (None) when it exists; the balanced uneven one, in
    Megatron's first/last form (every rank's layers a multiple of vpp) where that exists, else,
    where the user asks for interleaving (`free_form`), in the layout string's free form: the
    same balance over whole layers, each rank's layers in vpp chunks as even as they go, emitted
    as --pipeline-model-parallel-layout (whose virtual stages may differ or be empty); and
    ACCOUNTED where it exists (`accounted_fits`). Under torchtitan's V placement the output
    layer sits on the first rank beside the embedding (`Layout.v_stages`): the balance weighs
    it there."""
    L = job.arch.num_layers
    out: list[Split] = []
    if L % (pp * vpp) == 0:
        out.append(None)
    if space.uneven and pp > 1:
        extra = last_stage_extra(job.arch)
        # the output layer's rank: the first under torchtitan's V placement (Layout.v_stages)
        ends = (extra, 0.0) if v_stages(job, vpp) else (0.0, extra)
        split = solver.balanced_split(L, pp, vpp, *ends)
        if split is not None and len(set(split)) > 1:
            out.append(split)
        elif split is None and vpp <= free_form(space) and L % (pp * vpp):
            free = solver.balanced_split(L, pp, 1, *ends)  # every rank >= 1 layer
            out += [free] if free is not None else []
        if accounted_fits(L, pp, vpp):
            out.append(ACCOUNTED)
    return out


FREE_FORM_VPP = 6
"""The largest interleaving degree the search gives the layout string's free form unless the
user bounds vpp. Every degree would make each pipeline degree gain up to L / pp interleaving
degrees whose bounds the search computes for every structure. At 2 (until 2026-12-06) bounding
vpp found faster layouts than the unbounded search, by up to 14% (a search fuzz); 6 finds, on
the six jobs measured on 2026-12-06 (2 CPUs, in-process search, `benchmarks/search_speed.py`
has the CLI's), the best layout every degree finds: DeepSeek-V3 on 256 H100 2.58 -> 2.31 s
(vpp 3), gpt-oss-120b on 64 H100 1.685 -> 1.593 s (vpp 5), Qwen3-235B FP8 on 128 H200 1.459
-> 1.393 s (vpp 5), Mixtral 8x22B on 144 A100 3.544 -> 3.334 s (vpp 6), Llama 3.1 405B on
16,384 H100 5.340 -> 5.244 s (vpp 5), DeepSeek-V3 on 2,048 H800 unchanged; the search time
0.51 -> 0.83 s there (every degree: 1.35 s; 4.9 s on the Qwen3 job)."""


def free_form(space: SplitSpace) -> int:
    """The largest interleaving degree whose splits may take the layout string's free form (0:
    none): the top of the user's vpp bound (`suggest --vpp 2`, `2-4`, `1-3`, `-4`; a range from
    1 as far as one from 2, or `--vpp 1-2` could rank a layout of `--vpp 2` below a slower one);
    FREE_FORM_VPP where it has no top, or its bottom where that is higher (`--vpp 1-` is the
    default, and `--vpp 2-` holds no more of the free form than it); none without uneven
    splits."""
    vpp = space.vpp
    if not space.uneven:
        return 0
    return vpp.hi if vpp.bounded_above() else max(vpp.lo, FREE_FORM_VPP)


@cache
def vpp_candidates(num_layers: int, pp: int, uneven: bool, free: int) -> tuple[int, ...]:
    """Interleaving degrees with some split: vpp | L / pp (even), vpp | L with pp x vpp <= L
    (uneven, first/last form), vpp | (L + 2) / pp (uneven, ACCOUNTED), and any vpp up to `free`
    with pp x vpp <= L (`splits` decides)."""
    if pp == 1:
        return (1,)
    free_degrees = set(range(1, min(free, num_layers // pp) + 1))
    even = set(divisors(num_layers // pp)) if num_layers % pp == 0 else set()
    # first/last form: every rank's layers a multiple of vpp, so vpp divides the layers
    odd = {v for v in divisors(num_layers) if v * pp <= num_layers} if uneven else set()
    units = num_layers + 2
    accounted = set()
    if uneven and units % pp == 0:
        accounted = {v for v in divisors(units // pp) if accounted_fits(num_layers, pp, v)}
    return tuple(sorted(even | odd | accounted | free_degrees))
