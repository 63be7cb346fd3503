"""Runs a batch of checks in this process: ``python -m stablehlo_pjrt.checker.worker SPEC``.

SPEC is a JSON file {"plugin", "ids", "out", "capabilities", "suite",
"create_options"}. Before each check a ``{"start": id}`` line is appended to
``out`` and after it the result line, each flushed, so that the parent knows
which check was running when the plugin aborted the process or hung. After
an environment ``error`` (no client, no memory) the batch stops with a
``{"stop": detail}`` line: the checks after it would meet the same machine.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    from .capabilities import Capabilities
    from .context import Context
    from .core import run_check
    from .registry import build
    reg = build(spec.get("suite"))
    ctx = Context(spec["plugin"], Capabilities(spec.get("capabilities")), spec.get("suite"),
                  spec.get("create_options"))
    with open(spec["out"], "a", encoding="utf-8") as out:
        for cid in spec["ids"]:
            out.write(json.dumps({"start": cid}) + "\n")
            out.flush()
            result = run_check(reg.checks[cid], ctx)
            out.write(json.dumps(result.to_json()) + "\n")
            out.flush()
            if result.status == "error":
                out.write(json.dumps({"stop": result.detail}) + "\n")
                out.flush()
                break
    # Skip interpreter teardown: a plugin's static destructors may abort
    # after every result is written, which is not a result of any check.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
