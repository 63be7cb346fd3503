"""The ``stablehlo-ref`` console script: the interpreter's commands plus the
plugin-side ones.

The interpreter package must not import the plugin (one-way dependency), so
the commands that need the PJRT side (``check-plugin``, ``bisect``) live here and every
other command is handed to ``stablehlo_interpreter.cli`` unchanged; ``config``
lists the switches of both (stablehlo_pjrt.config).
"""

from __future__ import annotations

import argparse
import sys

PLUGIN_COMMANDS = ("check-plugin", "bisect")

# Every command with its one-line summary, in the order ``--help`` lists them.
COMMANDS = {
    "run": "run a module's entry function on the reference interpreter",
    "check": "list the ops of a module the interpreter cannot run",
    "compare": "diff a module's reference results against another backend's outputs",
    "config": "list the STABLEHLO_REF_* switches and their current values",
    "check-plugin": "check a PJRT plugin (.so) against the reference: C API, programs, "
                    "frameworks",
    "bisect": "find the first op where a PJRT plugin's result differs from the reference",
}


def version() -> str:
    """The installed distribution's version (the source tree's pyproject
    version when run from a checkout that is not installed)."""
    from importlib import metadata
    try:
        return metadata.version("stablehlo-pjrt")
    except metadata.PackageNotFoundError:
        import os
        import tomllib
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            with open(os.path.join(root, "pyproject.toml"), "rb") as f:
                return str(tomllib.load(f)["project"]["version"]) + " (source tree)"
        except (OSError, KeyError, ValueError):
            return "unknown"


def top_help() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: stablehlo-ref [-h] [--version] COMMAND ...", "",
             "Run StableHLO modules on the numpy reference interpreter, and check PJRT "
             "plugins against it.", "", "commands:"]
    lines += [f"  {name:{width}}  {text}" for name, text in COMMANDS.items()]
    lines += ["", "options:", "  -h, --help  show this help and exit",
              "  --version   print the version and exit", "",
              "stablehlo-ref COMMAND -h describes one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(top_help(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"stablehlo-ref {version()}")
        return 0
    if argv[0] in PLUGIN_COMMANDS:
        p = argparse.ArgumentParser(prog="stablehlo-ref")
        sub = p.add_subparsers(dest="command", required=True)
        from .checker import cli as checker_cli
        checker_cli.add_parser(sub)
        checker_cli.add_bisect_parser(sub)
        a = p.parse_args(argv)
        try:
            if a.command == "bisect":
                return checker_cli.run_bisect(a)
            return checker_cli.run(a)
        except KeyboardInterrupt:
            return 130
    if argv[:1] == ["compare"] and not {"-h", "--help"} & set(argv):
        # The interpreter's comparison, then the oracle's summation-order
        # cause (docs/oracle.md) for a difference it finds.
        from .oracle.files import compare_command
        return compare_command(argv)
    if argv[:1] == ["config"] and len(argv) == 1:
        from . import config
        print(config.format_all())
        return 0
    from stablehlo_interpreter import cli
    return int(cli.main(argv))


if __name__ == "__main__":
    sys.exit(main())
