"""The one place where the interpreter bridges differences between the MLIR
Python bindings of the jaxlib releases it supports (0.8.0 to 0.10.x; see
docs/compatibility.md).

The interpreter imports jaxlib's MLIR bindings but never JAX or the plugin,
so these shims live here rather than in stablehlo_pjrt.compat.
"""

from __future__ import annotations


def attribute_names(attributes) -> list[str]:
    """The names in an ``OpAttributeMap``, in order.

    Iterating the map yields the names (``str``) in jaxlib 0.8.3 and later,
    but ``NamedAttribute`` objects in jaxlib 0.8.0 (and 0.7.x; whose ``str``
    is ``NamedAttribute(value=...)``, so using them as keys raises KeyError).
    Indexing by position returns a ``NamedAttribute`` on every release.
    """
    return [attributes[i].name for i in range(len(attributes))]
