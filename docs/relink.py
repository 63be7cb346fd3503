"""Point the tour's code links at the lines where their symbols are defined now.

    python docs/relink.py          # rewrite docs/tour.md in place

The tour links each step to the function that handles it, with a line anchor
(`api.py#L82`). Edits to the plugin move those lines; tests/test_tour.py
notices, and this script fixes the anchors (symbol names stay as written).
"""

import os
import re
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
LINK = re.compile(r"(\[`([\w.]+)(?:\(\))?`\]\(\.\./([\w/.]+)#L)(\d+)(\))")


def definition_line(path, name):
    symbol = name.split(".")[-1]
    pattern = re.compile(rf"^\s*(def|class)\s+{re.escape(symbol)}\b")
    with open(os.path.join(ROOT, path)) as f:
        for i, line in enumerate(f, 1):
            if pattern.search(line):
                return i
    return None


def relink(text):
    missing = []

    def fix(m):
        line = definition_line(m.group(3), m.group(2))
        if line is None:
            missing.append(f"{m.group(2)} in {m.group(3)}")
            return m.group(0)
        return f"{m.group(1)}{line}{m.group(5)}"
    return LINK.sub(fix, text), missing


def main():
    page = os.path.join(DOCS, "tour.md")
    with open(page) as f:
        text, missing = relink(f.read())
    with open(page, "w") as f:
        f.write(text)
    if missing:
        print("no definition found for: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
