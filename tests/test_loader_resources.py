"""Loading modules frees what it allocates: each MLIR context owns a thread
pool, and a reference cycle through the diagnostic handler once kept every
context alive (2 threads and ~17 MB more per compile, until the conformance
runner's workers hit their address-space limit and aborted)."""

import gc
import os
import sys

import pytest

import stablehlo_interpreter as shi

# Several functions: MLIR verifies them on its thread pool, which starts it.
TEXT = "\n".join(f"""
func.func {'' if i == 0 else 'private '}@{'main' if i == 0 else f'f{i}'}(%a: tensor<4xf32>) -> tensor<4xf32> {{
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}}""" for i in range(4))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/task")
def test_compiling_many_modules_does_not_keep_their_threads():
    shi.compile(TEXT)  # warm up whatever is created once per process
    before = len(os.listdir("/proc/self/task"))
    for _ in range(40):
        shi.compile(TEXT)
    gc.collect()
    assert len(os.listdir("/proc/self/task")) <= before + 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/task")
def test_a_failed_parse_does_not_keep_its_context():
    before = len(os.listdir("/proc/self/task"))
    for _ in range(20):
        with pytest.raises(shi.LoadError):
            shi.compile("func.func @main( {")
    gc.collect()  # a raised LoadError's traceback holds its frame (a plain cycle)
    assert len(os.listdir("/proc/self/task")) <= before + 2
