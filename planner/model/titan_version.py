"""The torchtitan versions planner's launch targets write for, where what torchtitan keeps for
the backward differs between them: e347b1e5, the job TOML's (`planner.inputs.torchtitan.
TORCHTITAN_COMMIT`), and b5bcd76c, the Python configurations' (`planner.emit.torchtitan_module`).
One plan launches with either target, so an estimate does not know which runs it: the model's
functions take `version` None (unknown) and count the larger of the two figures
(`per_op_saved.saves_all_to_all`, `moe_activations.router_copy_bytes`)."""

from __future__ import annotations

from typing import Literal

TitanVersion = Literal["e347b1e5", "b5bcd76c"]
"""A torchtitan version planner models (the module docstring)."""
