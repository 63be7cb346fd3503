"""The seeded mutation fuzzer (tests/fuzz/fuzzlib.py) over every input kind:
MLIR bytecode and portable artifacts (several versions), serialized
executables, attributes nested in dictionaries, .npz arguments, and the C
API's argument structs (tests/fuzz/capi_fuzz.py). Each case runs in a
subprocess (batched; a crash is re-run alone); any signal, hang or untyped
exception fails.

Default run: a few dozen cases per kind. Long run (>= 10,000 cases per kind):
``python -m pytest -m slow tests/test_hardening_fuzz.py`` or
``python tests/fuzz/fuzzlib.py --run 10000``.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import fuzzlib  # noqa: E402


def _check(kind, n, seed, batch):
    r = fuzzlib.run_cases(kind, fuzzlib.generate(kind, n, seed), batch=batch)
    assert r.cases == n
    assert not r.findings, "\n".join(f"case {f.index}: {f.what[:400]}" for f in r.findings)
    return r


# Cases per kind in the default run (seeded, so the same cases every run):
# as many as take a few seconds of one worker process.
SHORT = {"module": 25, "executable": 25, "attr": 100, "npz": 100, "capi": 400}


@pytest.mark.parametrize("kind", fuzzlib.KINDS)
def test_fuzz_short(kind):
    _check(kind, SHORT[kind], seed=1000, batch=SHORT[kind])


@pytest.mark.slow
@pytest.mark.parametrize("kind", fuzzlib.KINDS)
def test_fuzz_long(kind):
    r = _check(kind, 10_000, seed=1, batch=500)
    print(f"{kind}: {r.cases} cases, {r.ok} ok, {r.errors} typed errors, {r.seconds:.0f} s")


CORPUS = Path(__file__).resolve().parent / "hardening_corpus"


def test_capi_reproducers_get_errors_not_crashes():
    """Each C API case the fuzzer found (tests/hardening_corpus/capi_*.json: a
    segfault, an abort, an INTERNAL error or an invalid call accepted) now
    gets a clean error: INVALID_ARGUMENT or the code the header documents
    (PJRT_Error_Message returns void: nothing to check but that it returns)."""
    paths = sorted(CORPUS.glob("capi_*.json"))
    assert len(paths) >= 18
    r = fuzzlib.run_cases("capi", [p.read_bytes() for p in paths], batch=len(paths))
    assert not r.findings, "\n".join(f"{paths[f.index].name}: {f.what[:300]}"
                                      for f in r.findings)
    assert r.cases == len(paths) and r.errors == len(paths) - 1  # all but Error_Message
