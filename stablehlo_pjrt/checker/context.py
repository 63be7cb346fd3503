"""What a check gets: the plugin, a client made on first use (with the
run's client-create options), the declared capabilities and where the
conformance programs are."""

from __future__ import annotations

import os
from typing import Any

from .. import config
from .capabilities import Capabilities
from .plugin import Client, Plugin


def default_suite() -> str | None:
    """The StableHLO conformance suite: $STABLEHLO_SUITE, or ../shared/stablehlo-suite
    next to a source checkout."""
    env = config.SUITE.value()
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (3, 4):
        root = here
        for _ in range(up):
            root = os.path.dirname(root)
        cand = os.path.join(root, "shared", "stablehlo-suite")
        if os.path.isdir(cand):
            return cand
    return None


class Context:
    def __init__(self, plugin_path: str, capabilities: Capabilities | None = None,
                 suite: str | None = None, create_options: dict[str, Any] | None = None):
        self.plugin_path = plugin_path
        self.create_options = dict(create_options or {})
        self.capabilities = capabilities or Capabilities()
        self.suite = suite
        self._plugin: Plugin | None = None
        self._client: Client | None = None

    @property
    def plugin(self) -> Plugin:
        if self._plugin is None:
            self._plugin = Plugin(self.plugin_path)
            self._plugin.initialize()
        return self._plugin

    @property
    def client(self) -> Client:
        """A client shared by the checks of one process (as a framework keeps one)."""
        if self._client is None:
            self._client = Client(self.plugin, self.create_options)
        return self._client

    def new_client(self) -> Client:
        return Client(self.plugin, self.create_options)
