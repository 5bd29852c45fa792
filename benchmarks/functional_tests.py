"""Megatron-LM's own functional-test command lines through `planner check --megatron-args`.

    python benchmarks/functional_tests.py            # every case, then the memory table
    python benchmarks/functional_tests.py --failures # only the cases that are not read

Data: benchmarks/data/megatron_functional_tests/ (NVIDIA/Megatron-LM d98e8a64,
tests/functional_tests/test_cases/*/*/model_config.yaml; see its README). Each case's MODEL_ARGS
(a flat word list, after the recipe's training script, which decides the default tokenizer) goes
through what `check --megatron-args` does: the reader (`planner.inputs.megatron_args.read`),
`parse_plan`, Megatron's rules (`check_plan`), then memory and step time. Where the tokenizer's
size is in its file and planner does not know the file's name, the benchmark passes `--vocab-size`
as a user would (VOCAB_GIVEN, sourced).
It runs on each platform the case's CI recipes name, with that platform's GPU count (nodes x the
processes torchrun starts per node): dgx_h100 -> h100-sxm-80gb, dgx_a100 -> a100-sxm-80gb,
dgx_gb200 -> gb200-nvl72; a case in no recipe runs on its golden files' platforms (else H100), on
8 GPUs or the fewest nodes of 8 its model-parallel groups need (said so;
benchmarks/functional_platforms.py). Verdicts: "read" (exit 0, fits), "exit 1" (read; does not
fit), "exit 2" (the message), or "CRASH" (an exception that is not bad input: a bug). The read
rate is given over all cases and over the lines of models planner represents (the reader refuses
NeMo-style and empty lines by name: OUTSIDE). The case's environment variables (model_config.yaml
ENV_VARS, which the runner exports before it expands MODEL_ARGS) are substituted into the line.
The NeMo cases (`nemo llm pretrain` overrides) are read with their recipe's `nemo_model` as the
line's `--factory`.

Then, for the usable cases (digest 5-f; held-out cases have no golden values here) whose golden
values hold mem-max-allocated-bytes (first runs; the resumed `_2nd` runs repeat the same
configuration): the predicted `allocated` of the LAST pipeline stage (the golden values come from
the last rank) against the measured peak (the max over the recorded steps).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_platforms import DEFAULT, golden_target, targets
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_unread import memory_notes
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.search.rules import check_plan

DATA = Path(__file__).resolve().parent / "data" / "megatron_functional_tests"

VOCAB_GIVEN = {
    "tokenizer.model": 32_000,
}
"""`planner check --vocab-size N` as a user would give it, for tokenizers whose size is in the
tokenizer file (which planner does not open), keyed by the end of the --tokenizer-model path.
tokenizer.model (Llama2Tokenizer, the Mixtral release cases): Mixtral's SentencePiece vocabulary
of 32,000 (Hugging Face mistralai/Mixtral-8x7B-v0.1 config.json vocab_size); a generic name,
which planner cannot know. The tokenizers with a public name the lines use (Nemotron-4's
nemotron_2_256k.model, llava-hf/llava-1.5-7b-hf, nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16) are
planner's own knowledge (planner.inputs.megatron_vocab.KNOWN_TOKENIZER_MODELS): given nothing."""


OUTSIDE = ("NeMo-style", "no Megatron-LM flags")
"""Words of the reader's refusals of lines that are not of a model planner represents."""


@dataclass(frozen=True)
class Verdict:
    code: int | str  # 0, 1, 2 or "CRASH"
    message: str = ""
    plan: Plan | None = None
    report: memory.MemoryReport | None = None
    vocab_given: int | None = None
    not_modelled: tuple[str, ...] = ()

    @property
    def read(self) -> bool:
        return self.code in (0, 1)

    def describe(self) -> str:
        given = f" with --vocab-size {self.vocab_given}" if self.vocab_given else ""
        if self.code == 0:
            return f"read{given}"
        if self.code == 1:
            return f"exit 1 (read{given}; does not fit)"
        first = self.message.splitlines()[0] if self.message else ""
        return f"exit 2: {first}" if self.code == 2 else f"CRASH: {first}"


def command_line(case: dict[str, Any]) -> list[str]:
    """The words the runner passes: the training script (when every recipe names the same one;
    it decides the default tokenizer), then MODEL_ARGS. A NeMo recipe's script, `nemo llm
    pretrain -y --factory {nemo_model}`, gets the recipe's nemo_model (which names the model)."""
    runs = case["recipe_runs"]
    scripts = {(r.get("training_script"), r.get("nemo_model")) for r in runs}
    script, nemo_model = scripts.pop() if len(scripts) == 1 else (None, None)
    head = [script] if script and script.endswith(".py") else []
    if script and "{nemo_model}" in script and nemo_model:
        head = shlex.split(script.format(nemo_model=nemo_model))
    env = case.get("env_vars") or {}
    return head + [
        _ENV.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in case["model_args"]
    ]


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A ${NAME} placeholder of the case's line."""


def vocab_given(words: list[str]) -> int | None:
    if "--tokenizer-model" not in words:
        return None
    model = words[words.index("--tokenizer-model") + 1]
    for name, size in VOCAB_GIVEN.items():
        if model.endswith(name):
            return size
    return None


def evaluate(words: list[str], gpu: str, num_gpus: int | None, where: str) -> Verdict:
    """What `planner check --megatron-args` would answer for these words (num_gpus None: the
    default count, grown to what the layout needs)."""
    return evaluate_text(shlex.join(words), gpu, num_gpus, where, vocab_given(words))


def evaluate_text(
    text: str,
    gpu: str,
    num_gpus: int | None,
    where: str,
    vocab: int | None,
    nemo_model: str | None = None,
) -> Verdict:
    """`evaluate` of a file's text as `check --megatron-args FILE [--vocab-size V]
    [--nemo-model M]` reads it (a command line, a script or a test configuration)."""
    try:
        if num_gpus is None:
            doc = megatron_args.to_plan(text, gpu, DEFAULT[1], where, vocab, nemo_model)
            num_gpus = needed_gpus(doc)
        reading = megatron_args.read(text, gpu, num_gpus, where, vocab, nemo_model)
        plan = check_plan(parse_plan(reading.doc, Path(where)))
        layout = plan.require_layout()
        rep = memory.estimate(plan.job, layout)
        cost.estimate(plan.job, layout)
    except InputError as e:
        return Verdict(2, str(e), vocab_given=vocab)
    except Exception as e:  # a bug, not bad input: counted and shown
        return Verdict("CRASH", f"{type(e).__name__}: {e}", vocab_given=vocab)
    code = 0 if rep.fits else 1
    return Verdict(code, "", plan, rep, vocab, reading.not_modelled)


def needed_gpus(doc: dict[str, Any]) -> int:
    """DEFAULT's 8 GPUs, or the fewest whole nodes of 8 that hold the line's model-parallel
    groups (tp x pp x cp, and etp x ep x pp for the experts)."""
    par = doc["parallel"]
    tp, pp, cp, ep = (par.get(k, 1) for k in ("tp", "pp", "cp", "ep"))
    etp = par.get("etp") or tp
    return math.lcm(DEFAULT[1], tp * pp * cp, etp * ep * pp)


def load_cases() -> list[dict[str, Any]]:
    return json.loads((DATA / "command_lines.json").read_text())["cases"]


def verdict_table(cases: list[dict[str, Any]], only_failures: bool) -> dict[tuple, Verdict]:
    cache: dict[tuple, Verdict] = {}
    per_family: dict[str, Counter[str]] = defaultdict(Counter)
    causes: Counter[str] = Counter()
    runs = Counter[str]()
    vocab = Counter[bool]()
    modelled = Counter[str]()
    print("Verdict per case and platform (GPU count from the CI recipes)")
    for case in cases:
        words = command_line(case)
        case_read, outside = True, False
        for t in targets(case):
            key = (case["name"], t.gpu, t.num_gpus)
            v = cache.get(key) or evaluate(words, t.gpu, t.num_gpus or None, case["name"])
            cache[key] = v
            vocab[v.vocab_given is not None and v.read] += 1
            runs["read" if v.read else "not"] += 1
            case_read &= v.read
            outside |= any(w in v.message for w in OUTSIDE)
            if not v.read:
                causes[_cause(v)] += 1
            if only_failures and v.read:
                continue
            note = f"  [{t.note}]" if t.note else ""
            n = t.num_gpus or (v.plan.job.cluster.num_gpus if v.plan else DEFAULT[1])
            print(f"  {case['name']:78s} {t.platform:10s} {n:3d}  {v.describe()}{note}")
        per_family[case["family"]]["read" if case_read else "not"] += 1
        modelled["outside" if outside else "read" if case_read else "not"] += 1
    total = Counter[str]()
    print("\nRead rate (a case counts as read when every platform run exits 0 or 1)")
    for fam in sorted(per_family, key=lambda f: -sum(per_family[f].values())):
        c = per_family[fam]
        total.update(c)
        n = c["read"] + c["not"]
        print(f"  {fam:18s} {c['read']:4d} / {n:4d}  {c['read'] / n:6.1%}")
    n = total["read"] + total["not"]
    print(f"  {'all cases':18s} {total['read']:4d} / {n:4d}  {total['read'] / n:6.1%}")
    m = runs["read"] + runs["not"]
    print(f"  {'all runs':18s} {runs['read']:4d} / {m:4d}  {runs['read'] / m:6.1%}")
    k = modelled["read"] + modelled["not"]
    print(
        f"  {'modelled kinds':18s} {modelled['read']:4d} / {k:4d}  {modelled['read'] / k:6.1%}"
        f"  (without the {modelled['outside']} lines of models planner does not represent)"
    )
    print(f"  (runs read with a --vocab-size the tokenizer file implies: {vocab[True]})")
    if causes:
        print("\nRuns not read, by message (values stripped)")
        for cause, k in causes.most_common():
            print(f"  {k:4d}  {cause}")
    return cache


def _cause(v: Verdict) -> str:
    """A message without the case name and the values, to group failures by cause."""
    first = v.message.splitlines()[0] if v.message else ""
    parts = first.split(": ")
    text = ": ".join(parts[1:]) if len(parts) > 1 else first
    return f"{v.code}: {text[:110]}"


def measured_peak(record: dict[str, Any]) -> float | None:
    values = record["metrics"].get("mem-max-allocated-bytes", {}).get("values") or []
    nums = [float(x) for x in values if x is not None]
    return max(nums) if nums else None


def memory_table(cases: list[dict[str, Any]], cache: dict[tuple, Verdict]) -> None:
    by_name = {c["name"]: c for c in cases}
    golden = json.loads((DATA / "golden_values.json").read_text())["files"]
    rows = []
    skipped = Counter[str]()
    print("\nPredicted allocated memory of the last pipeline stage vs the measured peak")
    print("(mem-max-allocated-bytes, max over the recorded steps; first runs of usable cases;")
    print(" * = GPU kind or count assumed; (n?) = count unknown, row left out of the summary)")
    print(f"  {'case':74s} {'file':34s} {'n':>4s} {'meas GiB':>8s} {'pred GiB':>8s} {'error':>7s}")
    for rec in golden:
        if rec["run"] != "first run":
            continue
        meas = measured_peak(rec)
        if meas is None:
            continue
        case = by_name.get(rec["case"])
        if case is None:  # a test folder without model_config.yaml
            skipped["no command line"] += 1
            continue
        assert case["usable_for_calibration"], rec["case"]  # golden_values.json holds no other
        g = golden_target(rec, case)
        t = g.target
        key = (case["name"], t.gpu, t.num_gpus)
        v = cache.get(key) or evaluate(command_line(case), t.gpu, t.num_gpus or None, case["name"])
        cache[key] = v
        label = rec["file"].removeprefix("golden_values_").removesuffix(".json")
        label += "*" if t.note else ""
        n = t.num_gpus or (v.plan.job.cluster.num_gpus if v.plan else DEFAULT[1])
        count = f"{n:3d}" + (" " if g.count_known else "?")
        if v.report is None:
            skipped["not read"] += 1
            print(f"  {case['name']:74s} {label:34s} {count} {meas / GIB:8.2f}   not read")
            continue
        pred = v.report.stages[-1].allocated
        err = pred / meas - 1
        if g.count_known:
            rows.append((err, case["name"], label, bool(memory_notes(v.not_modelled))))
        else:
            skipped["GPU count unknown"] += 1
        print(
            f"  {case['name']:74s} {label:34s} {count} {meas / GIB:8.2f} "
            f"{pred / GIB:8.2f} {err:+7.1%}"
        )
    if not rows:
        return
    left = ", ".join(f"{k} {v}" for k, v in skipped.items())
    print(f"\n  left out of the summary: {left}")
    print(summary("all rows", [e for e, *_ in rows]))
    clean = [e for e, _, _, noted in rows if not noted]
    print(summary("rows without a 'not modelled' note on memory", clean))
    rows.sort()
    print("  most under-estimated (! = the reading has a 'not modelled' note on memory):")
    for e, name, label, noted in rows[:12]:
        print(f"    {e:+7.1%}  {name} ({label}){' !' if noted else ''}")
    print("  most over-estimated:")
    for e, name, label, noted in rows[-6:][::-1]:
        print(f"    {e:+7.1%}  {name} ({label}){' !' if noted else ''}")


def summary(title: str, errs: list[float]) -> str:
    if not errs:
        return f"  {title}: none"
    under = sum(e < -0.10 for e in errs)
    over = sum(e > 0.10 for e in errs)
    return (
        f"  {title}: {len(errs)}; median error {statistics.median(errs):+.1%}, median |error| "
        f"{statistics.median(abs(e) for e in errs):.1%}; under by more than 10%: {under} "
        f"({under / len(errs):.0%}); over by more than 10%: {over} ({over / len(errs):.0%})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--failures", action="store_true", help="list only the runs not read")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory table")
    args = ap.parse_args()
    start = time.perf_counter()
    cases = load_cases()
    cache = verdict_table(cases, args.failures)
    if not args.no_memory:
        memory_table(cases, cache)
    print(f"\n({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
