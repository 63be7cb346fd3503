"""PyTorch/XLA with several processes (tests/test_multiprocess.py).

    PJRT_DEVICE=STABLEHLO_REF STABLEHLO_REF_NUM_PROCESSES=2 \
        python tests/torch_xla_multiprocess_workload.py

xmp.spawn starts the processes; each all-reduces a tensor of its own and
prints one line "RESULT {json}" with its rank, the world size, the sum and
the all_gather's result or error.
"""

import json

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def _value(rank):
    return torch.arange(6, dtype=torch.float32).reshape(2, 3) * (rank + 1) + 0.25


def _run(index):
    dev = torch_xla.device()
    rank = xr.global_ordinal()
    total = xm.all_reduce(xm.REDUCE_SUM, _value(rank).to(dev))
    torch_xla.sync()
    out = {"rank": rank, "world": xr.world_size(), "sum": total.cpu().tolist()}
    # PyTorch/XLA builds all_gather as a pad at this process's offset and an
    # all_reduce: a different program in each process (docs/devices.md).
    try:
        gathered = xm.all_gather(_value(rank).to(dev), dim=0)
        torch_xla.sync()
        out["gather"] = gathered.cpu().tolist()
    except RuntimeError as e:
        out["gather_error"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    xmp.spawn(_run)
