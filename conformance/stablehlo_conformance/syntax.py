"""Text handling of conformance files, done in the runner's parent process
(no MLIR needed): custom check/interpreter syntax to generic form, splitting
at ``// -----``, RUN lines, FileCheck directives and the cases of a chunk.
"""

import re

from stablehlo_interpreter.mlir_text import find_top, matching_bracket, net_depth, split_top

SPLIT_RE = re.compile(r"^// -----\s*$", re.M)

def _depth_delta(line):
    return net_depth(_strip_comment(line))


def _strip_comment(line):
    in_str = False
    for i, c in enumerate(line):
        if in_str:
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "/" and line.startswith("//", i):
            return line[:i]
    return line


def _extract_attr_dict(s):
    """Remove a top-level ``{...}`` from ``s``: (rest, [entries])."""
    i = find_top(s, "{")
    if i < 0:
        return s.strip(), []
    try:
        j = matching_bracket(s, i)
    except ValueError:
        j = len(s)
    inner = s[i + 1:j].strip()
    entries = [e for e in split_top(inner, ",") if e] if inner else []
    return (s[:i] + s[j + 1:]).strip(), entries


def _float_attr(v):
    v = v.strip()
    if ":" in v:
        return v
    try:
        return f"{float(v)!r} : f64"
    except ValueError:
        return f"{v} : f64"


def _kv(part):
    k, _, v = part.partition("=")
    return k.strip(), v.strip()


class SyntaxRewriteError(ValueError):
    pass


def _convert(result, opname, body):
    """Generic form of one custom-syntax check/interpreter statement."""
    kind = opname.split(".", 1)[1]
    attrs = []
    if kind in ("expect_eq_const", "expect_almost_eq_const"):
        parts = split_top(body, ",")
        operand = parts[0]
        value, extra = _extract_attr_dict(parts[1])
        attrs.extend(extra)
        for p in parts[2:]:
            p, extra = _extract_attr_dict(p)
            attrs.extend(extra)
            k, v = _kv(p)
            if k == "tolerance":
                attrs.append(f"tolerance = {_float_attr(v)}")
        ttype = split_top(value, ":")[-1]
        attrs.insert(0, f"value = {value}")
        return f'"{opname}"({operand}) {{{", ".join(attrs)}}} : ({ttype}) -> ()'
    halves = split_top(body, ":")
    left, right = halves[0], ":".join(halves[1:])
    # `tolerance = 0.1 : f64` puts a colon before the type.
    if len(halves) > 2 and re.search(r"tolerance\s*=\s*[^,]*$", left):
        left, right = halves[0] + " : " + halves[1], ":".join(halves[2:])
    left, extra = _extract_attr_dict(left)
    attrs.extend(extra)
    right, extra = _extract_attr_dict(right)
    attrs.extend(extra)
    operands, keyvals = [], []
    for p in split_top(left, ","):
        if p.startswith("%"):
            operands.append(p)
        elif p:
            keyvals.append(_kv(p))
    types = [t for t in split_top(right, ",") if t]
    for k, v in keyvals:
        if k == "tolerance":
            attrs.append(f"tolerance = {_float_attr(v)}")
        elif k in ("max_ulp_difference", "min_ulp_difference"):
            attrs.append(f"{k} = {v.split(':')[0].strip()} : ui64")
        elif k in ("iter", "iteration"):
            attrs.append(f"iteration = {v.split(':')[0].strip()} : ui32")
        else:
            attrs.append(f"{k} = {v}")
    if not types:
        raise SyntaxRewriteError(f"no type in `{opname} {body}`")
    in_types = types if len(types) == len(operands) else [types[0]] * len(operands)
    if kind == "print":
        attrs.append('ssa_name = "%s"' % operands[0])
    adict = " {" + ", ".join(attrs) + "}" if attrs else ""
    res_types = "()"
    prefix = ""
    if result:
        prefix = f"{result} = "
        res_types = types[-1] if kind == "probe" else in_types[0]
    return (f'{prefix}"{opname}"({", ".join(operands)}){adict} : '
            f'({", ".join(in_types)}) -> {res_types}')


_STMT_RE = re.compile(
    r"^(\s*)(?:(%[\w#.$-]+(?::\d+)?)\s*=\s*)?((?:check|interpreter)\.\w+)(?=[\s,(]|$)(.*)$")


def rewrite(text):
    """Rewrite custom-syntax `check.*` / `interpreter.probe|print` ops into
    generic form (which parses as unregistered ops). Generic-form ops (e.g.
    ``"interpreter.run_parallel"(...)``) are left untouched."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _STMT_RE.match(line)
        if not m or line.lstrip().startswith("//"):
            out.append(line)
            i += 1
            continue
        indent, result, opname, rest = m.groups()
        stmt = [_strip_comment(rest).strip()]
        depth = _depth_delta(rest)
        n = 1
        while (depth > 0 or stmt[-1].endswith(",")) and i + n < len(lines):
            nxt = _strip_comment(lines[i + n]).strip()
            depth += _depth_delta(lines[i + n])
            stmt.append(nxt)
            n += 1
        body = " ".join(s for s in stmt if s)
        out.append(indent + _convert(result, opname, body))
        # Keep line numbers stable so that locations still point at the file.
        out.extend([""] * (n - 1))
        i += n
    return "\n".join(out)


def split_chunks(text):
    """(start_line, chunk_text) per `// -----` separated chunk.

    Each chunk is padded with newlines so that MLIR locations carry the line
    numbers of the original file."""
    chunks = []
    pos = 0
    for m in SPLIT_RE.finditer(text):
        chunks.append((pos, m.start()))
        pos = m.end()
    chunks.append((pos, len(text)))
    out = []
    for a, b in chunks:
        line0 = text.count("\n", 0, a)
        out.append((line0 + 1, "\n" * line0 + text[a:b]))
    return out


_FUNC_RE = re.compile(
    r'func\.func\s+(?:(public|private|nested)\s+)?@("(?:[^"\\]|\\.)*"|[\w.$-]+)\s*\(\s*(\)?)')


def functions(chunk):
    """[(name, visibility, takes_no_args)] of the chunk's func.func ops, in order."""
    res = []
    for m in _FUNC_RE.finditer(chunk):
        name = m.group(2)
        if name.startswith('"'):
            name = name[1:-1]
        res.append((name, m.group(1) or "public", bool(m.group(3))))
    return res


def entry_cases(chunk):
    """Names of the functions to run in a chunk: @main if present (as upstream's
    entry lookup does), else every public function without arguments."""
    funcs = functions(chunk)
    names = [f[0] for f in funcs]
    if "main" in names:
        return ["main"]
    return [n for n, vis, noargs in funcs if noargs and vis != "private"]


# --------------------------------------------------------------------------
# RUN lines


class RunVariant:
    """One way upstream invokes the interpreter on a file."""

    __slots__ = ("number", "expect_error", "args", "prefixes", "dense", "line")

    def __init__(self, number, expect_error, args, prefixes, dense, line):
        self.number = number
        self.expect_error = expect_error
        self.args = args
        self.prefixes = prefixes
        self.dense = dense
        self.line = line

    def key(self):
        return (self.expect_error, self.args, self.prefixes, self.dense)


def run_lines(text):
    """The `// RUN:` commands of a file (continuations joined)."""
    cmds, cur = [], None
    for line in text.split("\n"):
        m = re.match(r"\s*//\s*RUN:(.*)$", line)
        if not m:
            continue
        part = m.group(1).strip()
        if cur is not None:
            cur += " " + part
        else:
            cur = part
        if cur.endswith("\\"):
            cur = cur[:-1]
            continue
        cmds.append(cur)
        cur = None
    return cmds


def interpret_variants(text):
    """Distinct interpreter invocations of the file's RUN lines (at least one)."""
    variants, seen = [], set()
    n = 0
    for cmd in run_lines(text):
        if "--interpret" not in cmd:
            continue
        n += 1
        expect_error = bool(re.match(r"not\s", cmd))
        args = None
        m = re.search(r'--args="((?:[^"\\]|\\.)*)"', cmd) or re.search(r"--args=(\S+)", cmd)
        if m:
            args = m.group(1)
        prefixes = None
        if "FileCheck" in cmd:
            fc = cmd[cmd.index("FileCheck"):]
            m = re.search(r"--check-prefix(?:es)?[= ](\S+)", fc)
            prefixes = tuple(m.group(1).split(",")) if m else ("CHECK",)
        dense = "--interpreter-print-dense" in cmd
        v = RunVariant(n, expect_error, args, prefixes, dense, cmd)
        if v.key() in seen:
            continue
        seen.add(v.key())
        variants.append(v)
    if not variants:
        variants.append(RunVariant(1, False, None, None, False, ""))
    return variants


_DIRECTIVE_RE = re.compile(
    r"//\s*([A-Za-z][\w-]*?)(-NEXT|-SAME|-NOT|-LABEL|-EMPTY|-DAG)?(\{LITERAL\})?:(.*)$")


def check_directives(chunk, prefixes):
    """FileCheck directives for ``prefixes`` in ``chunk``: [(kind, literal, pattern)]."""
    res = []
    for line in chunk.split("\n"):
        m = _DIRECTIVE_RE.search(line)
        if not m or m.group(1) not in prefixes:
            continue
        kind = (m.group(2) or "")[1:] or "CHECK"
        res.append((kind, bool(m.group(3)), m.group(4).strip()))
    return res
