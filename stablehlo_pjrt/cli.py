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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PLUGIN_COMMANDS:
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
    if argv[:1] == ["config"] and len(argv) == 1:
        from . import config
        print(config.format_all())
        return 0
    from stablehlo_interpreter import cli
    if argv and argv[0] in ("-h", "--help"):
        cli_help = cli.main  # prints the interpreter's commands, then exits
        print("plugin commands: check-plugin PATH.so [--only AREA] [--json F] [--md F]; "
              "bisect MODULE [--args ARGS.npz] --against PLUGIN.so|outputs.npz "
              "(stablehlo-ref check-plugin -h, stablehlo-ref bisect -h)\n")
        return cli_help(argv)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
