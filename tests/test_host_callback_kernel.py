"""The interpreter's @stablehlo_ref.host_callback custom call, without JAX:
the embedder's table (Program.host_callbacks) is the only way a module
reaches Python callables."""

import numpy as np
import pytest

import stablehlo_interpreter as shi

MODULE = """
func.func @main(%t: !stablehlo.token, %x: tensor<3xf32>) -> (!stablehlo.token, tensor<3xf32>) {
  %0:2 = stablehlo.custom_call @stablehlo_ref.host_callback(%t, %x)
      {api_version = 4 : i32, has_side_effect = true,
       mhlo.backend_config = {index = 1 : i64}}
      : (!stablehlo.token, tensor<3xf32>) -> (!stablehlo.token, tensor<3xf32>)
  return %0#0, %0#1 : !stablehlo.token, tensor<3xf32>
}
"""


def test_table_entry_is_called_with_read_only_views():
    program = shi.compile(MODULE)
    seen = []

    def cb(a):
        seen.append(a)
        assert not a.flags.writeable
        return (a * 2,)
    program.host_callbacks = (None, cb)
    x = np.arange(3, dtype=np.float32)
    token, y = program.run(shi.TOKEN, x)
    assert token is shi.TOKEN
    np.testing.assert_array_equal(y, x * 2)
    assert len(seen) == 1


def test_missing_table_is_a_clear_error():
    program = shi.compile(MODULE)
    with pytest.raises(shi.ExecutionError, match=r"host callback #1 is not in this program's"):
        program.run(shi.TOKEN, np.zeros(3, np.float32))


def test_callback_error_names_the_op():
    program = shi.compile(MODULE)

    def cb(a):
        raise KeyError("nope")
    program.host_callbacks = (None, cb)
    with pytest.raises(shi.ExecutionError, match=r"custom_call.*KeyError: 'nope'"):
        program.run(shi.TOKEN, np.zeros(3, np.float32))


def test_result_count_and_shape_are_checked():
    program = shi.compile(MODULE)
    program.host_callbacks = (None, lambda a: ())
    with pytest.raises(shi.ExecutionError, match="returned 0 value"):
        program.run(shi.TOKEN, np.zeros(3, np.float32))
    program.host_callbacks = (None, lambda a: (np.zeros(4),))
    with pytest.raises(shi.ExecutionError, match=r"shape \(4,\)"):
        program.run(shi.TOKEN, np.zeros(3, np.float32))
