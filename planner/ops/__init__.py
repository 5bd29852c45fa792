"""Operations: what a step time means for a training run: days, GPU-hours, cost and energy for a
token budget (`operations`), checkpoints, failures and goodput (`resilience`), and every figure
they assume, with its source (`assumptions`: failure rate, restart time, storage bandwidth,
node power, PUE).

May import `planner.model` and `planner.inputs`; nothing here prints, parses options or searches.
"""
