"""Seeded mutation fuzzing of every input path, each case in a subprocess.

The parent (:func:`run_cases`) sends a batch of cases to one worker process
(``python fuzzlib.py KIND``: length-prefixed cases on stdin) which reports
``<index> <status>`` on stdout after each case. A signal or any other
non-clean exit stops the batch; the case that was running is re-run alone in a
fresh worker to confirm it, and the batch resumes after it. A case is clean
when it succeeds or raises the error type its input path documents
(``InterpreterError`` for modules/attributes, the plugin's ``PjrtError`` for
serialized executables and C API calls, the CLI's ``UserError`` or an
``InterpreterError`` for ``.npz`` arguments); anything else is a finding.

Mutations (:func:`mutate`) are seeded (``random.Random(seed)``), so a failing
case is reproduced from its (kind, seed, index) alone.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds"
KINDS = ("module", "executable", "attr", "npz", "capi")

# --------------------------------------------------------------------------
# Mutations

_INTERESTING = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x40, 0x20, 0x10]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four byte-level mutations of ``data`` (bit flips, interesting
    bytes, varint-sized values, deletions, duplications, truncation)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b.extend(rng.randbytes(rng.randint(1, 8)))
            continue
        i = rng.randrange(len(b))
        op = rng.randrange(8)
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice(_INTERESTING)
        elif op == 2:
            b[i] = rng.randrange(256)
        elif op == 3:
            del b[i:i + rng.randint(1, 16)]
        elif op == 4:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 16)]
        elif op == 5:
            del b[rng.randrange(len(b)):]
        elif op == 6:
            # a large varint-ish value (section lengths, counts, indices)
            b[i:i + 1] = bytes([0xFF] * rng.randint(1, 9) + [0x7F])
        else:
            j = rng.randrange(len(b))
            b[i], b[j] = b[j], b[i]
    return bytes(b)


# --------------------------------------------------------------------------
# Generated inputs (structure-aware, drawn by hypothesis: attributes nested in
# dictionaries and arrays, .npz argument sets of any dtype and shape)


def draw(strategy, n: int, seed: int, encode=None) -> list[bytes]:
    """``n`` distinct examples of ``strategy``, reproducibly from ``seed``
    (hypothesis.seed; generation only: no shrinking, no example database).
    ``encode`` turns an example into the case's bytes (default: UTF-8 text)."""
    import warnings

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import HypothesisWarning
    warnings.filterwarnings("ignore", category=HypothesisWarning)  # repr of big strategies
    encode = encode or (lambda c: c.encode())
    out: dict = {}
    for round_ in range(50):
        @hseed(seed * 1000 + round_)
        @settings(max_examples=max(10, n - len(out)), database=None, derandomize=False,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                  deadline=None)
        @given(strategy)
        def collect(c):
            if len(out) < n:
                out.setdefault(encode(c), None)
        collect()
        if len(out) >= n:
            break
    return list(out)[:n]


# (element type, strategy of one element's text) for dense attributes; values
# outside a type's range and NaN/inf payloads are part of what is drawn.
def _dense_elements():
    from hypothesis import strategies as st

    def hexfloat(bits):
        return st.integers(0, 2 ** bits - 1).map(lambda v: f"0x{v:0{bits // 4}X}")
    fl = st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr)
    return [
        ("f32", st.one_of(fl, hexfloat(32))),
        ("f64", st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr),
                          hexfloat(64))),
        ("f16", hexfloat(16)),
        ("bf16", st.one_of(st.sampled_from(["2.5", "-0.0", "1.0e38"]), hexfloat(16))),
        ("i32", st.integers(-2 ** 31, 2 ** 31).map(str)),
        ("i64", st.integers(-2 ** 63, 2 ** 63 - 1).map(str)),
        ("ui8", st.integers(0, 256).map(str)),
        ("i4", st.integers(-8, 8).map(str)),
        ("i1", st.sampled_from(["true", "false"])),
        ("complex<f32>", st.tuples(st.integers(-3, 3), st.integers(-3, 3)).map(
            lambda t: f"({t[0]}.0,{t[1]}.0)")),
        ("complex<f64>", st.tuples(fl, fl).map(lambda t: f"({t[0]},{t[1]})")),
    ]


def attr_strategy():
    """MLIR attribute text: scalars, strings with escapes, symbol refs,
    dense tensors of every element type (complex ones too: the bindings
    abort on those inside dictionaries), nested in arrays and dictionaries."""
    from hypothesis import strategies as st
    dense = st.sampled_from(_dense_elements()).flatmap(lambda te: st.tuples(
        st.just(te[0]), st.lists(st.integers(0, 3), max_size=2),
        st.lists(te[1], min_size=0, max_size=9)).map(_dense_text))
    # String literals: plain characters, a quote, escapes of bytes that are
    # not UTF-8 (\\FF) or NUL.
    string = st.lists(st.sampled_from(list("ab c_") + ['\\"', "\\t", "\\00", "\\FF", "é"]),
                      max_size=6).map(lambda t: '"' + "".join(t) + '"')
    scalar = st.one_of(
        st.integers(-2 ** 63, 2 ** 63 - 1).map(lambda v: f"{v} : i64"),
        st.integers(-2 ** 40, 2 ** 40).map(lambda v: f"{v} : i32"),
        string,
        st.sampled_from(["unit", "true", "false", "1.5 : f32", "array<i64: 1, 2>",
                         "array<i64>", "@f", "@\"x y\"", "0x7FC00000 : f32",
                         "dense<> : tensor<0xf32>", "#stablehlo<comparison_direction LT>",
                         "i32", "tensor<2xf32>"]),
        dense, dense)
    key = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True), string)
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(key, inner), max_size=3, unique_by=lambda kv: kv[0]).map(
            lambda kvs: "{" + ", ".join(f"{k} = {v}" for k, v in kvs) + "}")),
        max_leaves=10)


def _dense_text(t):
    """``dense<...> : tensor<...>`` of (element type, shape, element texts)."""
    ty, shape, values = t
    n = 1
    for d in shape:
        n *= d
    if not values:
        return f"dense<> : tensor<0x{ty}>"
    if n == len(values) or not shape:
        vals = values[:1] if not shape else values
        body = vals[0] if not shape else _nest(vals, shape)
        dims = "x".join(str(d) for d in shape)
        return f"dense<{body}> : tensor<{dims + 'x' if dims else ''}{ty}>"
    # A count that does not match the shape: a splat, or a parse error.
    return f"dense<[{', '.join(values)}]> : tensor<{'x'.join(map(str, shape)) or '1'}x{ty}>"


def _nest(values, shape):
    """Element texts nested in brackets by ``shape`` (row-major)."""
    if len(shape) == 1:
        return "[" + ", ".join(values) + "]"
    step = len(values) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nest(values[i * step:(i + 1) * step], shape[1:])
                           for i in range(shape[0])) + "]"


def npz_strategy():
    """.npz bytes of 0-4 arrays of any dtype (object, string, structured,
    bfloat16 included) and small shape, positional or named."""
    import io

    import ml_dtypes
    import numpy as np
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.int64,
                              np.int8, np.uint64, np.bool_, np.complex64,
                              np.dtype("U3"), np.dtype("S2"),
                              np.dtype([("a", np.int32), ("b", np.float32)])])
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    array = dtypes.flatmap(lambda dt: hnp.arrays(dt, shapes))
    # bfloat16 (hypothesis has no strategy for it): any 16-bit pattern.
    bf16 = hnp.arrays(np.uint16, shapes).map(lambda a: a.view(ml_dtypes.bfloat16))
    obj = st.just(np.array([1, "x", None], dtype=object))
    arrays = st.lists(st.one_of(array, array, array, bf16, obj), max_size=4)

    def save(t):
        items, named = t
        buf = io.BytesIO()
        if named:
            np.savez(buf, **{f"k{i}": a for i, a in enumerate(items)})
        else:
            np.savez(buf, *items)
        return buf.getvalue()
    return st.tuples(arrays, st.booleans()).map(save)


def attr_module(attr: str, where: str = "backend") -> str:
    """A module carrying ``attr`` on a custom call (its backend_config,
    frontend attributes or a plain attribute: the unknown target is refused
    after the attributes are read) or on an add the interpreter runs
    ("add": a discardable attribute must not stop a program from running)."""
    if where == "add":
        return ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                f"  %0 = stablehlo.add %a, %a {{x = {attr}}} : tensor<2xf32>\n"
                "  return %0 : tensor<2xf32>\n}\n")
    if where == "backend":
        attrs = f"mhlo.backend_config = {attr}, api_version = 4 : i32"
    elif where == "frontend":
        attrs = f"mhlo.frontend_attributes = {{a = {attr}}}"
    else:
        attrs = f"x = {attr}"
    return ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
            f"  %0 = stablehlo.custom_call @t(%a) {{{attrs}}} : (tensor<2xf32>) -> tensor<2xf32>\n"
            "  return %0 : tensor<2xf32>\n}\n")


# --------------------------------------------------------------------------
# Workers: one per kind, run inside the subprocess


def _work_module(data: bytes):
    import stablehlo_interpreter as shi
    try:
        shi.compile(data)
    except shi.InterpreterError:
        return "err"
    return "ok"


def _work_attr(data: bytes):
    return _work_module(data)


def _work_executable(data: bytes):
    from stablehlo_pjrt.error import PjrtError
    from stablehlo_pjrt.executable import CompileOptions, compile_program, parse_serialized
    try:
        fmt, options, code = parse_serialized(data)
        compile_program(code, fmt, CompileOptions(options))
    except PjrtError:
        return "err"
    return "ok"


_NPZ_FUNC = None


def _work_npz(data: bytes):
    import tempfile

    import stablehlo_interpreter as shi
    from stablehlo_interpreter import cli
    global _NPZ_FUNC
    if _NPZ_FUNC is None:
        _NPZ_FUNC = shi.compile(NPZ_MODULE).function()
    with tempfile.NamedTemporaryFile(suffix=".npz") as f:
        f.write(data)
        f.flush()
        try:
            cli.load_args(f.name, _NPZ_FUNC)
        except (cli.UserError, shi.InterpreterError):
            return "err"
    return "ok"


NPZ_MODULE = """
func.func @main(%a: tensor<2x3xf32>, %b: tensor<i32>) -> tensor<2x3xf32> {
  return %a : tensor<2x3xf32>
}
"""


def _work_capi(data: bytes):
    import capi_fuzz  # tests/fuzz, next to this file (the worker's sys.path[0])
    return capi_fuzz.work(data)


WORKERS = {"module": _work_module, "attr": _work_attr, "executable": _work_executable,
           "npz": _work_npz, "capi": _work_capi}


def _read_cases(stream):
    while True:
        head = stream.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        yield stream.read(n)


def worker_main(kind: str) -> int:
    work = WORKERS[kind]
    out = sys.stdout
    for i, case in enumerate(_read_cases(sys.stdin.buffer)):
        out.write(f"{i} start\n")
        out.flush()
        try:
            status = work(case)
        except Exception as e:  # a non-clean result: report it, keep going
            status = "unclean " + f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        out.write(f"{i} {status}\n")
        out.flush()
    return 0


# --------------------------------------------------------------------------
# Parent side


@dataclass
class Finding:
    kind: str
    index: int
    what: str
    data: bytes


@dataclass
class Result:
    kind: str
    cases: int = 0
    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    findings: list = field(default_factory=list)


def _pack(cases):
    return b"".join(struct.pack("<Q", len(c)) + c for c in cases)


def _run_batch(kind, cases, case_timeout):
    """Run ``cases`` in one worker. Returns (returncode, stderr tail,
    statuses by index, index of a case started but not finished or None,
    whether that case hung: took longer than ``case_timeout`` seconds)."""
    import selectors
    import tempfile
    # The bytecode reader's hangs on hostile input are cut by the isolation
    # helper's timeout: keep it well under the case timeout, so that a
    # bounded hang shows as the LoadError it becomes, not as a harness hang.
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               STABLEHLO_REF_ISOLATE_TIMEOUT=str(max(1, int(case_timeout // 4))))
    with tempfile.TemporaryFile() as inp, tempfile.TemporaryFile() as err:
        inp.write(_pack(cases))
        inp.seek(0)
        p = subprocess.Popen([sys.executable, str(HERE / "fuzzlib.py"), kind], stdin=inp,
                             stdout=subprocess.PIPE, stderr=err, env=env)
        statuses = {}
        started = None
        hung = False
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.monotonic() + case_timeout + 30  # the first case imports jax
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = True
                p.kill()
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                idx, _, status = line.decode(errors="replace").partition(" ")
                if status == "start":
                    started = int(idx)
                    deadline = time.monotonic() + case_timeout
                else:
                    statuses[int(idx)] = status
                    started = None
        p.wait()
        sel.close()
        p.stdout.close()
        err.seek(0)
        tail = err.read()[-400:].decode(errors="replace")
    return p.returncode, tail, statuses, started, hung


def run_cases(kind: str, cases: list[bytes], batch: int = 200,
              case_timeout: float = 60) -> Result:
    """Run every case of ``kind`` in worker subprocesses; returns counts and
    findings (signals, non-clean exits, unexpected exceptions, hangs)."""
    res = Result(kind)
    t0 = time.monotonic()
    pos = 0
    while pos < len(cases):
        chunk = cases[pos:pos + batch]
        rc, tail, statuses, started, hung = _run_batch(kind, chunk, case_timeout)
        for i in range(len(chunk)):
            s = statuses.get(i)
            if s is None:
                break
            res.cases += 1
            if s == "ok":
                res.ok += 1
            elif s == "err":
                res.errors += 1
            else:
                res.findings.append(Finding(kind, pos + i, s, chunk[i]))
        done = len(statuses)
        if done == len(chunk) and rc == 0:
            pos += len(chunk)
            continue
        if done == len(chunk):  # every case reported, then a bad exit
            res.findings.append(Finding(kind, pos + done - 1,
                                        f"worker exit status {rc} after the batch: {tail}", b""))
            pos += len(chunk)
            continue
        # The worker died (or hung) on case `bad`: re-run it alone to
        # confirm and to get its own exit status, then resume after it.
        bad = started if started is not None else done
        if hung:
            what = f"hang: no result within {case_timeout} s"
        else:
            rc1, tail1, st1, _, hung1 = _run_batch(kind, [chunk[bad]], case_timeout)
            what = st1.get(0) or ("hang" if hung1 else f"exit status {rc1}: {tail1}")
        res.cases += 1
        if what == "err":
            res.errors += 1  # flaky in the batch only: count it, report the batch exit
            res.findings.append(Finding(kind, pos + bad, f"batch exit status {rc}: {tail}",
                                        chunk[bad]))
        elif what == "ok":
            res.ok += 1
            res.findings.append(Finding(kind, pos + bad, f"batch exit status {rc}: {tail}",
                                        chunk[bad]))
        else:
            res.findings.append(Finding(kind, pos + bad, what, chunk[bad]))
        pos += bad + 1
    res.seconds = time.monotonic() - t0
    return res


def seed_files(kind: str) -> list[bytes]:
    """The inputs mutations start from: files under seeds/<kind>/ (modules:
    JAX programs as bytecode and as portable artifacts of several versions),
    or built from them (executables: each module in the serialized envelope;
    .npz: arguments of NPZ_MODULE)."""
    if kind == "executable":
        return [seal(b"mlir", b"", code) for code in seed_files("module")]
    if kind == "npz":
        import io

        import numpy as np
        out = []
        for arrays in ([np.ones((2, 3), np.float32), np.int32(4)],
                       [np.arange(6, dtype=np.float64).reshape(2, 3), np.array(7, np.int64)]):
            buf = io.BytesIO()
            np.savez(buf, *arrays)
            out.append(buf.getvalue())
        return out
    d = SEEDS / kind
    return [p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()] if d.is_dir() else []


def seal(fmt: bytes, options: bytes, code: bytes) -> bytes:
    """A serialized executable with a valid envelope around these payloads
    (so mutations of the payload reach the loader behind the checksum)."""
    import hashlib
    sys.path.insert(0, str(HERE.parents[1]))
    from stablehlo_pjrt.executable import _ENVELOPE_HEADER, ENVELOPE_MAGIC, ENVELOPE_VERSION
    payload = fmt + options + code
    return (ENVELOPE_MAGIC + _ENVELOPE_HEADER.pack(ENVELOPE_VERSION, len(fmt), len(options),
                                                   len(code), hashlib.sha256(payload).digest())
            + payload)


def generate(kind: str, n: int, seed: int) -> list[bytes]:
    """``n`` cases of ``kind`` from seed ``seed``: mutated seed inputs, or
    generated attribute modules. Half of the executable cases mutate the
    program inside a valid envelope, half the envelope itself."""
    if kind == "capi":
        sys.path.insert(0, str(HERE))
        import capi_fuzz
        return capi_fuzz.generate(n, seed)
    rng = random.Random(f"{kind}:{seed}")
    if kind == "attr":
        from hypothesis import strategies as st
        return draw(st.tuples(attr_strategy(), st.sampled_from(
            ["backend", "frontend", "plain", "add"])).map(lambda t: attr_module(*t)), n, seed)
    if kind == "npz":
        # Half mutated bytes of valid files, half generated argument sets.
        generated = draw(npz_strategy(), n - n // 2, seed, encode=lambda b: b)
        return [mutate(rng.choice(seed_files("npz")), rng) for _ in range(n // 2)] + generated
    if kind == "executable":
        codes = seed_files("module")
        out = []
        for k in range(n):
            code = rng.choice(codes)
            if k % 2:
                out.append(seal(b"mlir", b"", mutate(code, rng)))
            else:
                out.append(mutate(seal(b"mlir", b"", code), rng))
        return out
    seeds = seed_files(kind)
    if not seeds:
        raise FileNotFoundError(f"no seed files in {SEEDS / kind}")
    return [mutate(rng.choice(seeds), rng) for _ in range(n)]


def main(argv=None) -> int:
    """``python tests/fuzz/fuzzlib.py --run N [--seed S] [KIND...]``: the long
    run; prints counts, time and findings per kind; exit 1 on any finding."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=int, required=True, help="cases per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("kinds", nargs="*", default=list(KINDS))
    a = ap.parse_args(argv)
    bad = 0
    for kind in a.kinds:
        r = run_cases(kind, generate(kind, a.run, a.seed), batch=a.batch)
        print(f"{kind}: {r.cases} cases, {r.ok} ok, {r.errors} typed errors, "
              f"{len(r.findings)} findings, {r.seconds:.0f} s", flush=True)
        for f in r.findings:
            print(f"  case {f.index}: {f.what[:300]}")
        bad += len(r.findings)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in KINDS:
        sys.exit(worker_main(sys.argv[1]))
    sys.exit(main())
