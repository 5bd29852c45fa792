"""Calibration: a cluster's own Megatron-LM logs turned into refitted model constants.

`measured` reads each run of a log (its plan from the printed arguments, its median step time
and per-stage peak allocated memory); `fit` refits the constants of
`planner.model.calibratable` to the runs (those `selection` says the runs determine) and
estimates the error left by leave-one-out; `profile` writes and reads the TOML file that
carries the result to every command (`--calibration`).

May import `planner.search` (Megatron's rules, to check a log's layout), `planner.ops`,
`planner.model` and `planner.inputs`; nothing here prints or parses options.
"""
