"""The `[parallel]` table of a NeMo 2.0 `nemo llm pretrain` line (`planner.inputs.nemo_args`): the
recipe's degrees and the keys of `nemo_keys.PARALLEL` / `PARALLEL_SWITCHES`, the pipeline's p2p
exchange, CPU offloading, and the settings a line cannot turn on in NeMo.

What NeMo runs is read, not what Megatron-LM's validate_args would make of the same fields: NeMo
hands ModelParallelConfig / TransformerConfig to Megatron-Core as the line and the recipe leave
them (NVIDIA/NeMo 8cfedd72; Megatron-Core lines at Megatron-LM d98e8a64)."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.nemo_keys import NONE_WORDS, PARALLEL, PARALLEL_SWITCHES, NemoLine
from planner.inputs.nemo_recipes import Recipe

DEGREES = frozenset({"tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size"})
"""The [parallel] fields `parallel_table` reads as numbers (the others the plan's checks type)."""


def parallel_table(line: NemoLine, recipe: Recipe, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tp": recipe.tp,
        "pp": recipe.pp,
        "cp": recipe.cp,
        "ep": recipe.ep,
        "micro_batch_size": recipe.micro_batch_size,
    }
    vpp: Any = recipe.vpp
    for key, name in PARALLEL.items():
        if key in line.values:
            value = line.get(key)
            number = isinstance(value, int) and not isinstance(value, bool)
            if name in DEGREES and value is not None and not number:  # compared below
                raise line.fail(key, "expected an integer")
            if name == "vpp":
                vpp = value
            elif value is not None:
                out[name] = value
    if out["pp"] == 1:
        vpp = None  # NeMo's _validate_config drops vpp without pipeline parallelism
    out["vpp"] = 1 if vpp is None else vpp
    for side in ("embedding", "loss"):  # the recipe's, unless the line sets it
        key = f"trainer.strategy.account_for_{side}_in_pipeline_split"
        if line.flag(key, recipe.accounted):
            out[f"account_for_{side}_in_pipeline_split"] = True
    sp = line.flag("trainer.strategy.sequence_parallel", recipe.sp)
    for key, name in PARALLEL_SWITCHES.items():
        value = line.flag(key)
        if value is not None:
            out[name] = value
    out["sequence_parallel"] = bool(sp) and out["tp"] > 1  # NeMo turns it off at tp = 1
    distributed = line.flag("optim.config.use_distributed_optimizer", True)
    out["zero_stage"] = 1 if distributed else 0
    one_bucket(line, out, notes)
    tp_comm_overlap(line)
    recompute_choices(line)
    full_recompute(line, out)
    cpu_offloading(line, out, notes)
    p2p_overlap(line, out)
    return out


GRAD, GATHER = (
    "trainer.strategy.ddp.overlap_grad_reduce",
    "trainer.strategy.ddp.overlap_param_gather",
)


def one_bucket(line: NemoLine, out: dict[str, Any], notes: list[str]) -> None:
    """The DDP overlaps as Megatron-Core runs them under NeMo, which does not run Megatron-LM's
    validate_args (whose arguments.py:1028 refuses the parameter gather's overlap without the
    gradient reduction's): the recipes' DDP config overlaps both (llama3_8b.py:119-120), and
    Megatron-Core asserts only the distributed optimizer or the gather's overlap
    (param_and_grad_buffer.py:397 @d98e8a64). With overlap_grad_reduce off it makes each model
    chunk's parameters one bucket (bucket_size None, distributed_data_parallel.py:135-137), whose
    all-gather the chunk's first forward pre-hook dispatches and waits for at once
    (param_and_grad_buffer.py:557-561): the gather is exposed whole, as planner prices it with
    overlap_param_gather off, which the plan then says."""
    if out.get("overlap_grad_reduce", True) or not out.get("overlap_param_gather", True):
        return
    if out["zero_stage"] == 0:  # nothing sharded to gather (the plan's rule reads it so too)
        return
    out["overlap_param_gather"] = False
    whose = "the line's" if GATHER in line.values else "the recipe's"
    notes.append(
        f"{GRAD}=False with {GATHER}=True ({whose}): Megatron-Core then keeps each model chunk's "
        "parameters in one DDP bucket (distributed_data_parallel.py:135-137 @d98e8a64), whose "
        "all-gather the first layer's forward waits for whole (param_and_grad_buffer.py:557-561): "
        "priced as overlap_param_gather off"
    )


RECOMPUTE_CHOICES = {
    "model.config.recompute_granularity": ("full", "selective"),  # transformer_config.py:532
    "model.config.recompute_method": ("uniform", "block"),  # transformer_config.py:543
}
"""TransformerConfig's Optional[Literal[...]] recompute fields (Megatron-LM d98e8a64) and their
choices."""


def recompute_choices(line: NemoLine) -> None:
    """The recompute granularity and method as NeMo-Run parses them for TransformerConfig's
    Optional[Literal] fields (NVIDIA/NeMo-Run 0c491271 cli_parser.py; NeMo 8cfedd72 passes the
    config on as parsed): a bare none or null, any case, is None (parse_union :929-930), no
    recompute where the recipe sets none (no recipe planner reads does: `nemo_recipes`); a
    choice, quoted or not, is itself (parse_literal :991-997); any other value NeMo-Run refuses
    (LiteralParseError :998-1002), and a string outside the choices would make Megatron-Core's
    TransformerConfig raise (transformer_config.py:1901-1906; the method's :1908-1912, with a
    granularity). A quoted 'none' is such a value: `value_of` reads it as the text none, which
    the plan would take for no recompute."""
    for key, choices in RECOMPUTE_CHOICES.items():
        value = line.get(key)
        if key in line.values and value is not None and value not in choices:
            quoted = (
                "a quoted none is that text, not None: " if str(value).lower() in NONE_WORDS else ""
            )
            raise line.fail(
                key,
                f"{quoted}expected {' or '.join(choices)}, or a bare none / null for None: "
                "NeMo-Run parses TransformerConfig's Optional[Literal] so and refuses any other "
                "value (cli_parser.py:929-930, :991-1002 @NeMo-Run 0c491271), and Megatron-Core "
                "raises on a string outside them (transformer_config.py:1901-1912 @d98e8a64)",
            )


def full_recompute(line: NemoLine, out: dict[str, Any]) -> None:
    """Full recompute as Megatron-Core's TransformerConfig takes it: with a recompute_method
    and a recompute_num_layers, else its __post_init__ raises (d98e8a64
    transformer_config.py:1908-1925); no recipe planner reads sets either (`nemo_recipes`), so
    a line turning full recompute on names both."""
    if out.get("recompute") != "full":
        return
    for field in ("recompute_method", "recompute_num_layers"):
        if out.get(field) is None:
            raise line.fail(
                "model.config.recompute_granularity",
                f"full recompute needs model.config.{field} too: Megatron-Core's "
                "TransformerConfig raises without it (transformer_config.py:1908-1925 @d98e8a64)",
            )


def tp_comm_overlap(line: NemoLine) -> None:
    """model.config.tp_comm_overlap=True is refused: NeMo creates Transformer Engine's
    userbuffers only in MegatronCommOverlapCallback (megatron_comm_overlap.py:290-327, at
    on_fit_start :331-334), which the recipes add only under performance_mode (e.g.
    llama3_70b.py:198, :230-243) and a line cannot add (factory arguments and
    trainer.callbacks are not overrides planner reads); the layers Megatron-Core then builds
    ask Transformer Engine for buffers nobody made."""
    key = "model.config.tp_comm_overlap"
    if line.flag(key):
        raise line.fail(
            key,
            "NeMo makes Transformer Engine's userbuffers only in MegatronCommOverlapCallback "
            "(megatron_comm_overlap.py:290-334, NeMo 8cfedd72), which a line cannot add (the "
            "recipes add it under performance_mode); without them the overlapped layers fail "
            "at their first step. Plan the overlap as a plan file (parallel.tp_comm_overlap)",
        )


def cpu_offloading(line: NemoLine, out: dict[str, Any], notes: list[str]) -> None:
    """model.config.cpu_offloading_num_layers, read only with model.config.cpu_offloading=True:
    Megatron-Core offloads with the switch alone (model_parallel_config.py:458 defaults it off;
    transformer_block.py:305-318 hands it to the offload context as its `enabled`); only
    Megatron-LM's arguments.py:1950-1951 turns it on from the count, which NeMo does not run."""
    on_key, count_key = "model.config.cpu_offloading", "model.config.cpu_offloading_num_layers"
    on = line.flag(on_key, False)
    count = line.get(count_key)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise line.fail(count_key, "expected a whole number of layers")
    if on and count:
        out["cpu_offloading_num_layers"] = count
    elif on:
        notes.append(
            f"{on_key}=True offloads no layer: cpu_offloading_num_layers is 0 "
            "(model_parallel_config.py:461)"
        )
    elif count:
        notes.append(
            f"{count_key}={count}: NeMo offloads nothing without {on_key}=True (Megatron-Core "
            "model_parallel_config.py:458, transformer_block.py:305-318; only Megatron-LM's "
            "arguments.py:1950-1951 turns it on from the count): read as no offloading"
        )


OVERLAP, BATCH = "model.config.overlap_p2p_comm", "model.config.batch_p2p_comm"


def p2p_overlap(line: NemoLine, out: dict[str, Any]) -> None:
    """`parallel.overlap_p2p_comm` from ModelParallelConfig's switches as NeMo runs them: off
    unless the line turns it on, also with interleaving (model_parallel_config.py:385 defaults
    the overlap off and :390 batch_p2p_comm on; only MegatronCommOverlapCallback turns it on at
    vpp > 1, megatron_comm_overlap.py:153-157, which the recipes add only under performance_mode
    and a line cannot add). The interleaved schedule raises with both on (schedules.py
    :1086-1087), the non-interleaved one with the overlap on (:2182-2184). Off, each exchange is
    waited for before the compute goes on, batched or not (p2p_communication.py:416), as
    planner prices it off.

    Off at vpp > 1 and pp 2 is refused. Batched (the default), each rank posts its two sends to
    the one other rank as send_prev then send_next and its two receives as recv_prev then
    recv_next (p2p_communication.py:22-57); NCCL runs a group's calls to the same peer in order,
    so the activation lands in the gradient's buffer and back: the run trains on swapped tensors
    (Megatron-LM's arguments.py:1000-1009 asserts pp > 2 for this). Unbatched, Megatron-Core
    orders them by rank parity over two communicators (:65-75) and the run is sound, but
    planner's layout has no unbatched blocking exchange (`Layout.overlap_p2p_comm` off is
    Megatron-LM's batched one, whose rule `search.rules.p2p_overlap` refuses pp 2)."""
    given = OVERLAP in line.values
    overlap = line.flag(OVERLAP, False)
    batch = line.flag(BATCH)
    if overlap and out["pp"] > 1 and out["vpp"] == 1:
        why = "Megatron-Core's non-interleaved schedule raises on it (schedules.py:2182-2184)"
        raise line.fail(OVERLAP, f"{why}: give it with vpp > 1 alone")
    if overlap and out["vpp"] > 1 and batch is not False:
        why = "the interleaved schedule raises beside batch_p2p_comm, on by default"
        cite = "model_parallel_config.py:390, schedules.py:1086-1087 @d98e8a64"
        raise line.fail(OVERLAP, f"{why} ({cite}): add {BATCH}=False")
    if not overlap and out["vpp"] > 1 and out["pp"] == 2:
        named = OVERLAP if given else BATCH if BATCH in line.values else None
        if named is None:
            raise InputError(f"{line.where}: {OVERLAP} not given: {_pp2_reason(True)}")
        raise line.fail(named, _pp2_reason(batch is not False))
    if given or out["vpp"] > 1:
        out["overlap_p2p_comm"] = overlap


def _pp2_reason(batched: bool) -> str:
    turn_on = f"turn the overlap on ({OVERLAP}=True {BATCH}=False) or use pp > 2"
    if batched:
        return (
            "at pp 2 with vpp > 1 and the p2p overlap off (NeMo's default, "
            "model_parallel_config.py:385) each batched exchange sends an activation and a "
            "gradient to the same rank, which NCCL matches in order against receives posted the "
            "other way round (p2p_communication.py:22-57 @d98e8a64): the tensors are swapped "
            "(Megatron-LM's arguments.py:1000-1009 refuses it for this); " + turn_on
        )
    return (
        "NeMo runs it unbatched (p2p_communication.py:65-75 @d98e8a64), but planner's plans "
        "have only Megatron-LM's batched blocking exchange, refused at pp 2 "
        "(arguments.py:1000-1009); " + turn_on
    )
