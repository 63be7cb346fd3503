"""Area ``capi``, group ``attributes``: PJRT_Plugin_Attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import _capi as C
from ..core import Failed, check

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "attributes")
def plugin_attributes(ctx: Context) -> None:
    """PJRT_Plugin_Attributes: names unique and non-empty; StableHLO
    versions (if given) are 3 integers with minimum <= current."""
    attrs = ctx.plugin.attributes()
    if any(not k for k in attrs):
        raise Failed(f"an attribute has an empty name: {attrs}")
    cur, low = attrs.get("stablehlo_current_version"), attrs.get("stablehlo_minimum_version")
    for name, v in (("stablehlo_current_version", cur),
                    ("stablehlo_minimum_version", low)):
        if v is not None and (not isinstance(v, list) or len(v) != 3):
            raise Failed(f"{name} = {v!r}: expected a list of 3 integers")
    if cur and low and tuple(low) > tuple(cur):
        raise Failed(f"stablehlo_minimum_version {low} > current {cur}")


@check("capi", "attributes")
def attribute_names(ctx: Context) -> None:
    """PluginAttributes (XLA's test of that name): the names are unique and
    include xla_version, stablehlo_current_version and
    stablehlo_minimum_version (JAX serializes programs for the version the
    plugin declares)."""
    a = ctx.plugin.call("PJRT_Plugin_Attributes", C.Plugin_Attributes_Args())
    names = []
    if a.num_attributes:
        for nv in (C.PJRT_NamedValue * a.num_attributes).from_address(a.attributes):
            names.append(C.read_str(nv.name, nv.name_size))
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise Failed(f"attribute names repeated: {dup}")
    missing = [n for n in ("xla_version", "stablehlo_current_version",
                           "stablehlo_minimum_version") if n not in names]
    if missing:
        raise Failed(f"attributes missing: {missing} (has {names})")
