"""Where the tests' fixtures live."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"
PLANS = DATA / "plans"
HF = DATA / "hf"
GOLDEN = TESTS / "golden"
BENCHMARKS = REPO / "benchmarks"
EXAMPLES = REPO / "examples"
