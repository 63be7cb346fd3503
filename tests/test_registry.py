"""The op registry: traits given with the kernels, KernelInfo, one home per
custom_call target."""

import pytest

import stablehlo_interpreter as si
from stablehlo_interpreter import registry


def test_every_trait_names_a_registered_kernel():
    for name, traits in registry._OP_TRAITS.items():
        assert name in registry.KERNELS, f"{name} has traits {sorted(traits)} but no kernel"
        assert traits <= registry.TRAITS.keys()


def test_every_trait_is_used():
    for trait in registry.TRAITS:
        assert registry.with_trait(trait), f"no op has trait {trait!r}"


def test_trait_relations():
    w = registry.with_trait
    elementwise = w("elementwise") - {"stablehlo.constant"}
    assert elementwise <= w("fusible") and elementwise <= w("foldable")
    assert w("exact") <= w("fusible") and w("cheap") <= w("fusible")
    assert w("view") <= w("foldable")
    assert w("reducer") <= w("elementwise")
    assert w("jax_composite") <= registry.COMPOSITES.keys()
    for target in w("chlo_broadcast"):
        assert "chlo.broadcast_" + target.split(".", 1)[1] in registry.KERNELS
    assert si.with_trait is registry.with_trait


def test_unknown_traits_are_refused():
    with pytest.raises(ValueError, match="unknown trait"):
        registry.kernel("test.never_registered", traits=("fast",))(lambda op: None)
    assert "test.never_registered" not in registry._OP_TRAITS
    with pytest.raises(KeyError, match="unknown trait"):
        registry.with_trait("fast")
    assert not registry.has_trait("test.no_such_op", "elementwise")


def test_duplicate_custom_call_target_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "CUSTOM_CALLS", dict(registry.CUSTOM_CALLS))

    def first(op):
        return None

    def second(op):
        return None
    registry.custom_call("test_target")(first)
    registry.custom_call("test_target")(first)          # the same builder again: fine
    with pytest.raises(RuntimeError, match="'test_target' registered twice.*first.*second"):
        registry.custom_call("test_target")(second)
    assert registry.CUSTOM_CALLS["test_target"][0] is first


def test_kernel_info():
    def fn(x):
        return x
    assert registry.kernel_info(fn).donate_first is None
    assert registry.annotate(fn, regions_unused=True) is fn
    assert registry.kernel_info(fn).regions_unused
    with pytest.raises(TypeError, match="no field 'donate'"):
        registry.annotate(fn, donate=True)
