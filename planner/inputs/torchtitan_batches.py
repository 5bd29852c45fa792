"""A read torchtitan Python configuration's batches as the tables of a torchtitan TOML (for
`planner.inputs.torchtitan_tables`): the training's micro-batch and step from its token budgets,
and the validator's batch, which b5bcd76c takes from the same budgets.

The validator (pytorch/torchtitan b5bcd76c): `config.validator` is a Validator.Config whose
`enable` (components/validate.py:81, default False) makes the trainer build it (trainer.py:593-617)
with seq_len = training.max_context_length and num_tokens_per_batch =
training.num_tokens_per_microbatch_per_dp_rank (trainer.py:558, :614-615): its data loader yields
batches of the training micro-batch's tokens, one per step of its loop, or under pipelining
num_pp_microbatches of them run through one `pp_schedule.eval` (validate.py:230-300); the loop runs
under torch.no_grad (validate.py:212). That is the e347b1e5 TOML's `[validation] enable` with
local_batch_size the training's per-rank schedule batch and seq_len the context length, which
`planner.model.titan_validation` counts; its `freq` and `steps` decide how often and how long it
runs, not what it holds (each checked as Validator.Config.__post_init__ checks it,
validate.py:40-43 and :102-104: a record built with freq=0 raises there)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.inputs.errors import InputError

Need = Callable[[tuple[str, ...], type | tuple[type, ...]], Any]
"""`torchtitan_tables.Document.need`: a field's value of the kind given, else exit 2."""


def _output(module: Any) -> Any:
    """A stage's module as a TOML names it: b5bcd76c's `lm_head` is e347b1e5's `output`."""
    return "output" if module == "lm_head" else module


def batch_tables(where: str, need: Need, par: dict[str, Any]) -> dict[str, Any]:
    """The `training` table (tokens per micro-batch per DP rank and per step, over the context
    length; under pipelining the schedule's micro-batches, written into `par`) and, where the
    validator is enabled, the `validation` table (module docstring)."""
    tokens = need(("training", "num_tokens_per_microbatch_per_dp_rank"), int)
    seq = need(("training", "max_context_length"), int)
    step = need(("training", "num_tokens_per_train_step"), int)
    count = need(("parallelism", "num_pp_microbatches"), int)
    freq = need(("validator", "freq"), int)
    steps = need(("validator", "steps"), int)
    for field, value, ok, why in (  # TrainingConfig.__post_init__, Trainer.Config's, and
        # Validator.Config's (BaseValidator.Config's freq check first), enabled or not
        ("training.num_tokens_per_microbatch_per_dp_rank", tokens, tokens > 0, "configs.py:55"),
        ("training.num_tokens_per_train_step", step, step == -1 or step > 0, "configs.py:59"),
        ("training.max_context_length", seq, seq > 0, "configs.py:61"),
        ("parallelism.num_pp_microbatches", count, count > 0, "trainer.py:124-128"),
        ("validator.freq", freq, freq > 0, "components/validate.py:40-43"),
        ("validator.steps", steps, steps == -1 or steps > 0, "components/validate.py:102-104"),
    ):
        if not ok:
            raise InputError(
                f"{where}: config.{field}: {value}: torchtitan raises unless it is "
                f"positive{' (or -1)' if 'step' in field else ''} ({why})"
            )
    if tokens % seq or (step != -1 and step % seq):
        raise InputError(
            f"{where}: config.training: planner plans whole sequences: "
            f"num_tokens_per_microbatch_per_dp_rank {tokens} and num_tokens_per_train_step "
            f"{step} must be multiples of max_context_length {seq}"
        )
    mbs = tokens // seq
    local = mbs
    if par["pipeline_parallel_degree"] > 1:
        local *= count
        par["pipeline_parallel_microbatch_size"] = mbs
        parts = need(("parallelism", "module_fqns_per_model_part"), (list, type(None)))
        if parts is not None:
            par["module_fqns_per_model_part"] = [
                [_output(m) for m in part] if isinstance(part, list) else part for part in parts
            ]
    tables: dict[str, Any] = {
        "training": {
            "seq_len": seq,
            "local_batch_size": local,
            "global_batch_size": -1 if step == -1 else step // seq,
        }
    }
    if need(("validator", "enable"), bool):
        tables["validation"] = {"enable": True, "local_batch_size": local, "seq_len": seq}
    return tables
