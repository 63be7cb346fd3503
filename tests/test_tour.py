"""docs/tour.py runs, and docs/tour.md still matches what it prints.

The page quotes trace lines from a real run: every PJRT call it quotes in a
step must still be made in that step, and every link to a handler must
name a function or class its file defines.
"""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _steps(text, header_re):
    """{step number: text of that step}."""
    parts = re.split(header_re, text, flags=re.M)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_tour_runs_and_matches_page():
    env = dict(os.environ)
    env.pop("STABLEHLO_PJRT_TRACE_JSON", None)
    p = subprocess.run([sys.executable, os.path.join(DOCS, "tour.py")], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "=== end of the tour" in p.stderr and "result -> 1" in p.stderr
    ran = _steps(p.stderr, r"^=== (\d)\. .*$")
    page = open(os.path.join(DOCS, "tour.md")).read()
    quoted = _steps(page, r"^## (\d)\. .*$")
    assert sorted(ran) == sorted(quoted) == [1, 2, 3, 4, 5, 6]
    call = re.compile(r"\[stablehlo_pjrt\] (PJRT_\w+)")
    for n in ran:
        made = set(call.findall(ran[n]))
        cited = set(call.findall(quoted[n]))
        assert cited or not made, f"step {n} of docs/tour.md quotes no trace line"
        assert cited <= made, (f"step {n} of docs/tour.md quotes calls the run no longer "
                               f"makes in that step: {sorted(cited - made)}")
    assert "PJRT_Client_Compile" in ran[3] and "module:" in ran[3]
    assert "PJRT_LoadedExecutable_Execute" in ran[4]
    assert "PJRT_Buffer_OpaqueDeviceMemoryDataPointer" in ran[5]
    assert "PJRT_LoadedExecutable_Destroy" in ran[6]


def _defines(path, name):
    """Whether ``name`` (``f``, ``Class``, ``Class.method``, or any of them
    after the module's own name: ``dispatch.run_inline``) is defined in the
    Python file ``path``."""
    tree = ast.parse(open(path).read(), path)
    parts = name.removesuffix("()").split(".")
    if parts[0] == os.path.splitext(os.path.basename(path))[0]:
        parts = parts[1:]
    scope = tree.body
    for part in parts:
        node = next((n for n in scope if isinstance(n, DEFINITIONS) and n.name == part), None)
        if node is None:
            return False
        scope = node.body if isinstance(node, ast.ClassDef) else []
    return bool(parts)


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
CODE_LINK = re.compile(r"\[`([\w.]+(?:\(\))?)`\]\(\.\./([\w/.]+)\)")


def test_tour_links_name_definitions():
    # The tour links a name to the file that defines it, without a line
    # number (lines move with every edit); the name must be defined there.
    page = open(os.path.join(DOCS, "tour.md")).read()
    assert not re.search(r"\]\(\.\./[^)]*#L\d+\)", page), "tour.md links to a line number"
    links = CODE_LINK.findall(page)
    assert len(links) > 20
    missing = []
    for name, path in links:
        full = os.path.join(ROOT, path)
        assert os.path.exists(full), path
        if not path.endswith(".py") or name == os.path.basename(path):
            continue
        if not _defines(full, name):
            missing.append(f"{name} -> {path}")
    assert not missing, "docs/tour.md links names their files do not define: " + "; ".join(missing)


def test_definition_lookup():
    here = os.path.abspath(__file__)
    assert _defines(here, "_defines") and _defines(here, "test_tour.test_definition_lookup()")
    assert not _defines(here, "no_such_function") and not _defines(here, "_defines.inner")
