"""A small FileCheck: enough of LLVM's FileCheck for the suites' printing tests.

Supports CHECK, CHECK-NEXT, CHECK-SAME, CHECK-EMPTY, CHECK-LABEL (as CHECK),
CHECK-NOT, ``{LITERAL}``, ``{{regex}}`` and ``[[VAR:regex]]`` / ``[[VAR]]``.
Horizontal whitespace is canonicalised as FileCheck does by default.
"""

import re


class FileCheckError(Exception):
    pass


def _pattern_regex(pattern, literal, variables):
    if literal:
        parts = [re.escape(pattern)]
    else:
        parts = []
        i = 0
        while i < len(pattern):
            if pattern.startswith("{{", i):
                j = pattern.find("}}", i + 2)
                if j < 0:
                    raise FileCheckError(f"unterminated {{{{ in {pattern!r}")
                parts.append("(?:" + pattern[i + 2:j] + ")")
                i = j + 2
            elif pattern.startswith("[[", i) and "]]" in pattern[i:]:
                j = pattern.find("]]", i + 2)
                body = pattern[i + 2:j]
                m = re.fullmatch(r"([A-Za-z_][\w]*)(?::(.*))?", body, re.S)
                if not m:
                    parts.append(re.escape(pattern[i:j + 2]))
                elif m.group(2) is not None:
                    parts.append(f"(?P<{m.group(1)}>{m.group(2)})")
                else:
                    parts.append(re.escape(variables.get(m.group(1), "")))
                i = j + 2
            else:
                j = i
                while j < len(pattern) and not pattern.startswith("{{", j) and not (
                        pattern.startswith("[[", j) and "]]" in pattern[j:]):
                    j += 1
                parts.append(re.escape(pattern[i:j]))
                i = j
    rx = "".join(parts)
    # Canonicalise whitespace: any run of blanks matches any run of blanks.
    rx = re.sub(r"(?:\\ |\\\t)+", r"[ \\t]+", rx)
    return re.compile(rx)


def filecheck(output, directives):
    """Match ``output`` against ``directives`` [(kind, literal, pattern)].

    Raises :class:`FileCheckError` naming the first directive that fails."""
    if not directives:
        raise FileCheckError("no check directives found")
    lines = output.split("\n")
    variables = {}
    line, col = 0, 0          # where the next search starts
    last_line = None          # line of the previous positive match
    pending_not = []
    for kind, literal, pattern in directives:
        rx = _pattern_regex(pattern.strip(), literal, variables)
        if kind == "NOT":
            pending_not.append((pattern, rx))
            continue
        if kind == "EMPTY":
            target = (last_line + 1) if last_line is not None else 0
            if target >= len(lines) or lines[target].strip():
                raise FileCheckError(f"CHECK-EMPTY: line {target + 1} is not empty")
            last_line, line, col = target, target + 1, 0
            continue
        found = None
        if kind in ("NEXT", "SAME"):
            if last_line is None:
                raise FileCheckError(f"CHECK-{kind} without a previous match")
            target = last_line + 1 if kind == "NEXT" else last_line
            start = 0 if kind == "NEXT" else col
            if target < len(lines):
                m = rx.search(lines[target], start)
                if m:
                    found = (target, m)
        else:
            for ln in range(line, len(lines)):
                m = rx.search(lines[ln], col if ln == line else 0)
                if m:
                    found = (ln, m)
                    break
        if found is None:
            near = lines[last_line + 1] if last_line is not None and \
                last_line + 1 < len(lines) else (lines[line] if line < len(lines) else "<EOF>")
            raise FileCheckError(
                f"CHECK{'' if kind == 'CHECK' else '-' + kind}: {pattern!r} not found "
                f"(next output line: {near!r})")
        ln, m = found
        for npat, nrx in pending_not:
            region = "\n".join(lines[line:ln + 1])
            if nrx.search(region):
                raise FileCheckError(f"CHECK-NOT: {npat!r} found")
        pending_not = []
        variables.update({k: v for k, v in m.groupdict().items() if v is not None})
        last_line, line, col = ln, ln, m.end()
    for npat, nrx in pending_not:
        if nrx.search("\n".join(lines[line:])):
            raise FileCheckError(f"CHECK-NOT: {npat!r} found")
