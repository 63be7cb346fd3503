"""Progress of a run: a live line on a terminal (rich), plain lines in logs.

On a terminal (stderr is a TTY) a rich progress bar shows checks done/total,
the failures so far and the time left. Elsewhere (CI logs) a plain line with
the same numbers is printed every :data:`PLAIN_EVERY` seconds and at the
end. ``verbose`` prints every result as it comes, in both cases.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .core import Result

PLAIN_EVERY = 10.0
BAD = ("failed", "crashed", "error")


def _eta(done: int, total: int, elapsed: float) -> str:
    if not done or done >= total:
        return "-"
    left = elapsed / done * (total - done)
    m, s = divmod(int(left + 0.5), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """``with Progress(total) as p: ... p.update(result)``."""

    def __init__(self, total: int, verbose: bool = False, stream: TextIO | None = None,
                 live: bool | None = None):
        self.total, self.verbose = total, verbose
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.done = 0
        self.bad: dict[str, int] = {}
        self.t0 = time.monotonic()
        self._last = self.t0
        self._bar: Any = None  # rich.progress.Progress on a terminal

    def __enter__(self) -> "Progress":
        if self.live:
            try:
                import rich  # noqa: F401 - a dependency; plain lines without it
            except ImportError:
                self.live = False
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar
            self._bar = Bar(TextColumn("checks"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[bad]}"), TextColumn("ETA"),
                            TimeRemainingColumn(),
                            console=Console(file=self.stream, force_terminal=True),
                            transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("checks", total=self.total, bad="0 failed")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self.done:
            self._plain()

    def summary(self) -> str:
        bad = ", ".join(f"{n} {s}" for s, n in self.bad.items()) or "0 failed"
        return bad

    def _plain(self) -> None:
        elapsed = time.monotonic() - self.t0
        print(f"[{self.done}/{self.total}] {self.summary()}, {elapsed:.0f} s, "
              f"ETA {_eta(self.done, self.total, elapsed)}", file=self.stream, flush=True)

    def update(self, r: Result) -> None:
        self.done += 1
        if r.status in BAD:
            self.bad[r.status] = self.bad.get(r.status, 0) + 1
        if self.verbose:
            line = f"{r.status:11} {r.id}"
            if self._bar is not None:
                self._bar.console.print(line, markup=False, highlight=False)
            else:
                print(line, file=self.stream, flush=True)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, bad=self.summary())
            return
        now = time.monotonic()
        if now - self._last >= PLAIN_EVERY:
            self._last = now
            self._plain()
