"""docs/tour.py runs, and docs/tour.md still matches what it prints.

The page quotes trace lines from a real run: every PJRT call it quotes in a
step must still be made in that step, and every link to a handler must
point at the line where that handler is defined.
"""

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


def test_tour_links_point_at_definitions():
    page = open(os.path.join(DOCS, "tour.md")).read()
    links = re.findall(r"\[`([\w.]+)(?:\(\))?`\]\(\.\./([\w/.]+)#L(\d+)\)", page)
    assert len(links) > 20
    stale = []
    for name, path, line in links:
        lines = open(os.path.join(ROOT, path)).read().splitlines()
        symbol = name.split(".")[-1]
        pattern = re.compile(rf"^\s*(def|class)\s+{re.escape(symbol)}\b")
        if not pattern.search(lines[int(line) - 1]):
            now = [i + 1 for i, ln in enumerate(lines) if pattern.search(ln)]
            stale.append(f"{name} -> {path}#L{line} (defined at {now or 'nowhere'})")
    assert not stale, ("docs/tour.md links to moved code (run `python docs/relink.py`): "
                       + "; ".join(stale))
    for path in re.findall(r"\]\(\.\./([\w/.]+?)(?:#L\d+)?\)", page):
        assert os.path.exists(os.path.join(ROOT, path)), path
