"""--cp-comm-type on a Megatron-LM line: the plan's [parallel] cp_comm_type.

Oracles: Megatron-LM d98e8a64's parser (nargs='+', default ["p2p"]: one value for every layer or
one per layer, TransformerConfig asserting "Length of cp_comm_type ... should equal to the total
number of transformer layers") and Transformer Engine's attn_forward_func_with_cp, which takes
p2p, all_gather, a2a and a2a+p2p as spelt ("Unsupported communication type" otherwise).
The line is tests/jobs.py's TINY_LINE: 12 layers, 8 heads, on 8 H100 at cp 2.
"""

from __future__ import annotations

import pytest
from jobs import TINY_LINE

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

CP2 = " --context-parallel-size 2 --cp-comm-type "


def read(kinds: str) -> megatron_args.Reading:
    return megatron_args.read(TINY_LINE + CP2 + kinds, "h100-sxm-80gb", 8, "run.sh")


@pytest.mark.parametrize("kind", ["p2p", "a2a", "all_gather"])
def test_one_type_for_every_layer(kind: str) -> None:
    r = read(kind)
    assert r.doc["parallel"]["cp_comm_type"] == kind
    assert "--cp-comm-type" not in r.ignored
    layout = parse_plan(r.doc).layout
    assert layout is not None and layout.cp_comm_type == kind


def test_the_help_texts_allgather_is_refused() -> None:
    """Megatron's help lists "allgather"; TE only runs "all_gather"."""
    with pytest.raises(InputError, match=r"run.sh: --cp-comm-type: 'allgather' is not"):
        read("allgather")


def test_a_per_layer_mix_is_its_most_common_type_with_a_note() -> None:
    r = read(" ".join(["a2a"] * 8 + ["p2p"] * 4))  # 12 values, one per layer: 8 a2a
    assert r.doc["parallel"]["cp_comm_type"] == "a2a"
    assert any("per-layer mix" in n and "a2a" in n for n in r.not_modelled)


def test_hierarchical_is_timed_as_the_ring_with_a_note() -> None:
    r = megatron_args.read(
        TINY_LINE + CP2 + "a2a+p2p --hierarchical-context-parallel-sizes 2 1",
        "h100-sxm-80gb",
        8,
        "run.sh",
    )
    assert r.doc["parallel"]["cp_comm_type"] == "p2p"
    assert any("a2a+p2p" in n for n in r.not_modelled)


def test_a_count_neither_one_nor_the_layers_is_refused() -> None:
    with pytest.raises(InputError, match=r"3 values; give one, or one per decoder layer \(12\)"):
        read("a2a a2a p2p")
