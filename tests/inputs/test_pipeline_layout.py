"""planner.inputs.pipeline_layout and the stages of a Layout.

Oracles: Megatron-LM's own examples of its layout grammar (docs/user-guide/features/
pipeline_parallel_layout.md and the `parse_str_to_list` docstring at d98e8a64: DeepSeek-V3's
"Et*3|(tt|)*29,m|L" on pp 16), its split rules written out by hand (interleaved chunks in layer
order, the account-for switches taking a layer's place), and the round trip string -> stages ->
string."""

from __future__ import annotations

import pytest

from planner.inputs.layout import Layout
from planner.inputs.pipeline_layout import MAX_CHARS, compact, parse, problems, stages_of

DEEPSEEK = "Et*3|(tt|)*29,m|L"


def test_deepseek_layout_as_megatron_documents_it() -> None:
    # pp 16 x vpp 2 = 32 stages: rank 0 chunk 0 embedding + 3 layers; 29 stages of 2 layers;
    # stage 30 (rank 14, chunk 1) the MTP layer; stage 31 (rank 15, chunk 1) the loss
    stages = parse(DEEPSEEK)
    assert stages is not None and len(stages) == 32
    assert stages[0] == "Ettt" and stages[1:30] == ("tt",) * 29
    assert stages[30:] == ("m", "L")
    assert problems(stages, 16, 61, 1) is None  # 3 + 29 x 2 = 61 decoder layers
    lay = Layout(pp=16, vpp=2, pipeline_layout=stages)
    assert lay.mtp_rank(61, 1) == 14
    # rank 0: chunk 0 holds layers 0-2, chunk 1 (stage 16) layers 3 + 2 x 15 = 33, 34
    assert lay.chunk_layers(61)[0] == (range(0, 3), range(33, 35))
    assert lay.chunk_layers(61)[15] == (range(31, 33), range(61, 61))
    assert lay.stage_layers(61) == (5, *[4] * 13, 2, 2)


def test_grammar_unrolls_groups_then_symbols_and_ignores_commas() -> None:
    # the parse_str_to_list docstring: "Ettt|(tt|)*29,m|L" -> [E,t,t,t] + [t,t] x 29 + [m], [L]
    assert parse("Ettt|(tt|)*29,m|L") == parse(DEEPSEEK)
    assert parse("E||t|L") == ("E", "", "t", "L")  # empty stages are allowed
    assert parse("(ab)*3") is None  # only E, t, m, L
    assert parse("Et*2|tL") == ("Ett", "tL")


def test_a_repeat_past_the_limit_is_refused_before_it_is_made() -> None:
    """A fuzzer's t*99999999999 asked for 100 GB (and a longer count overflowed an index): a
    layout expands to MAX_CHARS characters at most, refused before the repeat is unrolled."""
    assert parse("Et*99999999999|t*16L") is None
    assert parse("Et*99999999999999999999|t*16L") is None
    assert parse("(tt|)*99999999999") is None
    most = MAX_CHARS - 3  # E, | and L beside the layers
    assert parse(f"Et*{most}|L") == ("E" + "t" * most, "L")
    assert parse(f"Et*{most + 1}|L") is None  # one character too many


@pytest.mark.parametrize(
    ("text", "pp", "layers", "mtp", "says"),
    [
        ("Et|tL", 4, 2, 0, "not a multiple of pipeline_model_parallel_size (4)"),
        ("tE|tL", 2, 2, 0, "must start with the embedding"),
        ("Et|Lt", 2, 2, 0, "must end with the loss"),
        ("Et|tL", 2, 3, 0, "holds 2 decoder layers (t) but num_layers is 3"),
        ("Et|mtL", 2, 2, 1, "decoder layer (t) after an MTP layer"),
        # pp 2, vpp 2: stage 2 is rank 0's last chunk
        ("Et|t|m|L", 2, 2, 1, "not on rank 0"),
        # pp 2, vpp 3: stage 3 is rank 1's chunk 1 of 0-2
        ("Et|t||m||L", 2, 2, 1, "rank's last chunk"),
        ("Et|t|m|mL", 2, 2, 2, "several stages"),
    ],
)
def test_problems_are_megatrons_asserts(
    text: str, pp: int, layers: int, mtp: int, says: str
) -> None:
    stages = parse(text)
    assert stages is not None
    why = problems(stages, pp, layers, mtp)
    assert why is not None and says in why


def test_compact_round_trips() -> None:
    for text in (DEEPSEEK, "E||t|L", "Et*7|t*9|t*7|t*9L"):
        stages = parse(text)
        assert stages is not None and parse(compact(stages)) == stages
    assert compact(("Et", "tt", "tt", "tmL")) == "Et|(t*2|)*2tmL"


def test_even_interleaved_split_in_layer_order() -> None:
    # 8 layers, pp 2, vpp 2: chunks of 2; stage k on rank k % 2 (Megatron's own example in
    # transformer_block.get_num_layers_to_build: rank 0 [0, 1] [4, 5], rank 1 [2, 3] [6, 7])
    lay = Layout(pp=2, vpp=2)
    assert lay.stages(8) == ("Ett", "tt", "tt", "ttL")
    assert lay.chunk_layers(8) == ((range(0, 2), range(4, 6)), (range(2, 4), range(6, 8)))


def test_account_for_embedding_and_loss_take_a_layers_place() -> None:
    # 30 layers + embedding + loss = 32 items over pp 4 x vpp 2 = 8 stages of 4: the first
    # stage builds 3 decoder layers, the last 3, the others 4
    lay = Layout(
        pp=4,
        vpp=2,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    assert [s.count("t") for s in lay.stages(30)] == [3, 4, 4, 4, 4, 4, 4, 3]
    assert lay.stage_layers(30) == (7, 8, 8, 7)


def test_ordinary_splits_put_mtp_before_the_loss() -> None:
    assert stages_of([[2], [2]], 1) == ("Ett", "ttmL")
    assert stages_of([[1, 1], [1, 1]], 1, mtp_rank=1) == ("Et", "t", "t", "tmL")
    assert Layout(pp=2).mtp_rank(4, 1) == 1
    assert Layout(pp=2).mtp_rank(4, 0) is None
