"""The report of a run: a text summary per area, JSON and Markdown."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .core import AREAS, STATUSES, Result

# Statuses that make a run fail (exit status 1 of check-plugin).
BAD = ("failed", "crashed")
# Shown in the summary with their detail.
SHOWN = BAD + ("error", "unsupported")


def exit_status(results: list[Result], meta: dict[str, Any]) -> int:
    """1 when a check failed or crashed; else 2 when the environment left
    checks without a result (``error``, or a run stopped early); else 0."""
    if any(r.status in BAD for r in results):
        return 1
    if meta.get("stopped") or any(r.status == "error" for r in results):
        return 2
    return 0


def counts(results: list[Result]) -> dict[str, Any]:
    """{area: {status: n}} (every status present, in order)."""
    out = {}
    for area in list(AREAS) + sorted({r.area for r in results} - set(AREAS)):
        c = Counter(r.status for r in results if r.area == area)
        if c:
            out[area] = {s: c.get(s, 0) for s in STATUSES}
    return out


def _line(r: Result) -> str:
    head = f"  {r.status.upper():11} {r.id}"
    if r.op:
        head += f"  [op: {r.op}]"
    body = "\n".join("      " + ln for ln in r.detail.splitlines()[:12]) if r.detail else ""
    notes = "\n".join(f"      note: {n}" for n in r.notes)
    return "\n".join(x for x in (head, body, notes) if x)


def text(results: list[Result], meta: dict[str, Any], verbose: bool = False) -> str:
    lines = [f"PJRT plugin check: {meta.get('plugin')}",
             f"  C API {meta.get('api_version', '?')}, platform {meta.get('platform', '?')}, "
             f"{meta.get('seconds', 0):.1f} s"]
    for area, c in counts(results).items():
        summary = ", ".join(f"{n} {s}" for s, n in c.items() if n)
        lines.append(f"{area}: {summary}")
        for r in results:
            if r.area == area and (r.status in SHOWN or (verbose and r.status == "skipped")):
                lines.append(_line(r))
    if meta.get("stopped"):
        lines.append(f"{meta['stopped']}\n{meta.get('not_run', 0)} check(s) not run.")
    return "\n".join(lines)


def to_json(results: list[Result], meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "counts": counts(results), "results": [r.to_json() for r in results]}


def markdown(results: list[Result], meta: dict[str, Any]) -> str:
    out = [f"# PJRT plugin check: `{meta.get('plugin')}`", "",
           f"C API {meta.get('api_version', '?')}, platform `{meta.get('platform', '?')}`, "
           f"run time {meta.get('seconds', 0):.1f} s.", "",
           "| area | " + " | ".join(STATUSES) + " |",
           "|---|" + "---:|" * len(STATUSES)]
    for area, c in counts(results).items():
        out.append(f"| {area} | " + " | ".join(str(c[s]) for s in STATUSES) + " |")
    if meta.get("stopped"):
        out += ["", f"**{meta['stopped']}** ({meta.get('not_run', 0)} check(s) not run)"]
    for status in ("crashed", "failed", "error", "unsupported"):
        rows = [r for r in results if r.status == status]
        if not rows:
            continue
        out += ["", f"## {status} ({len(rows)})", "", "| check | op | detail |", "|---|---|---|"]
        for r in rows:
            detail = " ".join(r.detail.split())[:400].replace("|", "\\|")
            out.append(f"| `{r.id}` | {r.op or ''} | {detail} |")
    return "\n".join(out) + "\n"


def write(results: list[Result], meta: dict[str, Any], json_path: str | None = None,
          md_path: str | None = None) -> None:
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(to_json(results, meta), f, indent=1)
    if md_path:
        with open(md_path, "w", encoding="utf-8") as f:
            f.write(markdown(results, meta))
