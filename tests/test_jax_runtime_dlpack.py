"""DLPack on stablehlo_ref. Importing works (JAX imports onto its CPU device
and copies to stablehlo_ref). Exporting (``np.from_dlpack(x)``,
``x.__dlpack__()``, torch) is refused by jaxlib itself for every platform but
cpu/cuda/rocm ("cannot be used as a DLPack device"), before the plugin is
asked: this test pins that behaviour so a jaxlib that lifts the restriction
shows up here."""

import runtime_scenarios as rs


def test_dlpack_import_and_export():
    rec = rs.run("stablehlo_ref", ["dlpack"], devices=1)["dlpack"]
    assert rec["error"] is None, rec["error"]
    v = rec["values"]
    assert v["import"] == [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "stablehlo_ref"]
    assert v["export"] == ("JaxRuntimeError: INVALID_ARGUMENT: Device stablehlo_ref:0 cannot "
                           "be used as a DLPack device."), v["export"]
