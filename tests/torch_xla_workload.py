"""PyTorch programs run on the XLA device and on PyTorch's eager CPU, compared.

Run by tests/test_torch_xla.py in a subprocess with PJRT_DEVICE=STABLEHLO_REF
(one process per part: importing torch + torch_xla costs seconds of CPU):

    PJRT_DEVICE=STABLEHLO_REF python tests/torch_xla_workload.py sweep|models|export|spmd|spawn

prints one JSON object: per case, "ok", or the error / the largest difference.
The reference is always PyTorch itself (eager CPU), never this project.
"""

from __future__ import annotations

import json
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla

if sys.argv[1:] == ["spmd"]:
    # SPMD mode before torch_xla.device(): PyTorch/XLA 2.9 segfaults in
    # ExecuteReplicated when use_spmd() comes after device() but before any
    # tensor, on PJRT_DEVICE=CPU too (docs/pytorch.md); after tensors it
    # works (run_spmd_late).
    import torch_xla.runtime as _xr
    _xr.use_spmd()

# xmp.spawn refuses to start once the runtime is up: that part opens no device.
DEV = None if sys.argv[1:] == ["spawn"] else torch_xla.device()

# (atol, rtol) per dtype: XLA computes bf16/f16 elementwise ops in f32 and
# rounds once, eager CPU sometimes rounds intermediates: differences of an
# ulp or two of the narrow type are expected.
TOL = {torch.float32: (1e-5, 1.3e-6 * 4), torch.float64: (1e-12, 1e-12),
       torch.bfloat16: (1e-2, 1.6e-2), torch.float16: (1e-3, 2e-3)}


def _inputs(spec, gen):
    out = []
    for s in spec:
        if isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], torch.dtype):
            shape, dt = s
            if dt == torch.bool:
                out.append(torch.rand(shape, generator=gen) > 0.5)
            elif dt.is_floating_point:
                out.append((torch.randn(shape, generator=gen) * 2).to(dt))
            else:
                out.append(torch.randint(-20, 20, shape, generator=gen).to(dt))
        else:
            out.append(s)
    return out


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, dev) for v in x)
    return x


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    if hasattr(x, "values") and hasattr(x, "indices"):
        return [x.values, x.indices]
    return [torch.as_tensor(x)]


def compare(fn, spec, seed=0, tol=None, exact=False):
    gen = torch.Generator().manual_seed(seed)
    args = _inputs(spec, gen)
    ref = _flat(fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
    got = _flat(fn(*_to(args, DEV)))
    got = [g.cpu() for g in got]
    for r, g in zip(ref, got):
        if r.dtype != g.dtype or r.shape != g.shape:
            raise AssertionError(f"dtype/shape {g.dtype}{tuple(g.shape)} != eager {r.dtype}{tuple(r.shape)}")
        if exact or not r.dtype.is_floating_point:
            torch.testing.assert_close(g, r, atol=0, rtol=0, equal_nan=True)
        else:
            atol, rtol = tol or TOL[r.dtype]
            torch.testing.assert_close(g, r, atol=atol, rtol=rtol, equal_nan=True)


F32, BF16, F16, I32, I64, B = torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool


def sweep_cases():
    c = {}
    s = (3, 5)
    # Elementwise unary (float32, plus bf16/f16 for a few).
    for name in ["abs", "neg", "exp", "expm1", "log1p", "sin", "cos", "tan", "tanh", "sigmoid",
                 "erf", "erfc", "erfinv", "sqrt", "rsqrt", "floor", "ceil", "round", "trunc",
                 "sign", "reciprocal", "atan", "asinh", "sinh", "cosh", "lgamma", "digamma"]:
        f = getattr(torch, name)
        pre = (lambda x: x.abs() + 0.1) if name in ("sqrt", "rsqrt", "log1p", "lgamma", "digamma") else \
              (lambda x: x.clamp(-0.99, 0.99) if name == "erfinv" else x)
        c[f"{name}.f32"] = (lambda x, f=f, pre=pre: f(pre(x)), [(s, F32)])
    for name in ["exp", "tanh", "erf", "sigmoid", "sqrt"]:
        f = getattr(torch, name)
        for dt in (BF16, F16):
            c[f"{name}.{str(dt)[6:]}"] = (lambda x, f=f: f(x.abs() if f is torch.sqrt else x), [(s, dt)])
    c["special.i0e"] = (torch.special.i0e, [(s, F32)])
    c["special.i1e"] = (torch.special.i1e, [(s, F32)])
    c["special.ndtr"] = (torch.special.ndtr, [(s, F32)])
    c["special.log_ndtr"] = (torch.special.log_ndtr, [(s, F32)])
    c["special.xlogy"] = (lambda x, y: torch.special.xlogy(x, y.abs()), [(s, F32), (s, F32)])
    c["gelu"] = (F.gelu, [(s, F32)])
    c["gelu.tanh"] = (lambda x: F.gelu(x, approximate="tanh"), [(s, F32)])
    c["gelu.bf16"] = (F.gelu, [(s, BF16)])
    c["silu"] = (F.silu, [(s, F32)])
    c["softplus"] = (F.softplus, [(s, F32)])
    c["elu"] = (F.elu, [(s, F32)])
    c["leaky_relu"] = (F.leaky_relu, [(s, F32)])
    c["hardtanh"] = (F.hardtanh, [(s, F32)])
    # Binary / ternary
    for name in ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow", "remainder", "fmod"]:
        f = getattr(torch, name)
        pre = (lambda y: y.abs() + 0.5) if name in ("pow", "div", "remainder", "fmod") else (lambda y: y)
        c[f"{name}.f32"] = (lambda x, y, f=f, pre=pre: f(x.abs() if f is torch.pow else x, pre(y)), [(s, F32), (s, F32)])
    for name in ["add", "mul", "maximum", "bitwise_and", "bitwise_xor"]:
        c[f"{name}.i32"] = (lambda x, y, f=getattr(torch, name): f(x, y), [(s, I32), (s, I32)])
    c["floor_divide.i64"] = (lambda x, y: torch.floor_divide(x, y.abs() + 1), [(s, I64), (s, I64)])
    c["remainder.i32"] = (lambda x, y: torch.remainder(x, y.abs() + 1), [(s, I32), (s, I32)])
    c["add.bf16"] = (torch.add, [(s, BF16), (s, BF16)])
    c["mul.f16"] = (torch.mul, [(s, F16), (s, F16)])
    c["where"] = (torch.where, [(s, B), (s, F32), (s, F32)])
    c["clamp"] = (lambda x: x.clamp(-1, 0.5), [(s, F32)])
    c["lerp"] = (lambda x, y: torch.lerp(x, y, 0.3), [(s, F32), (s, F32)])
    c["addcmul"] = (lambda x, y, z: torch.addcmul(x, y, z, value=0.5), [(s, F32)] * 3)
    c["compare.lt"] = (torch.lt, [(s, F32), (s, F32)])
    c["eq.i32"] = (torch.eq, [(s, I32), (s, I32)])
    c["logical_and"] = (torch.logical_and, [(s, B), (s, B)])
    c["logical_not"] = (torch.logical_not, [(s, B)])
    c["isnan"] = (lambda x: torch.isnan(x / (x - x)), [(s, F32)])
    c["nan_to_num"] = (lambda x: torch.nan_to_num(x / (x - x) * x), [(s, F32)])
    # Reductions
    r = (4, 6)
    for name in ["sum", "mean", "prod", "amax", "amin", "std", "var", "logsumexp", "norm"]:
        f = getattr(torch, name)
        c[f"{name}.dim"] = (lambda x, f=f: f(x, 1) if f is not torch.norm else f(x, dim=1), [(r, F32)])
    c["sum.all"] = (torch.sum, [(r, F32)])
    c["sum.bf16"] = (lambda x: x.sum(0), [(r, BF16)])
    c["sum.i32"] = (lambda x: x.sum(1), [(r, I32)])
    c["argmax"] = (lambda x: x.argmax(1), [(r, F32)])
    c["argmin"] = (lambda x: x.argmin(0), [(r, F32)])
    c["max.dim"] = (lambda x: x.max(1), [(r, F32)])
    c["all"] = (lambda x: x.all(1), [(r, B)])
    c["any"] = (lambda x: x.any(0), [(r, B)])
    c["softmax"] = (lambda x: F.softmax(x, -1), [(r, F32)])
    c["log_softmax"] = (lambda x: F.log_softmax(x, -1), [(r, F32)])
    c["count_nonzero"] = (lambda x: torch.count_nonzero(x, 1), [(r, I32)])
    # Cumulative
    c["cumsum"] = (lambda x: x.cumsum(1), [(r, F32)])
    c["cumsum.i64"] = (lambda x: x.cumsum(0), [(r, I64)])
    c["cumprod"] = (lambda x: (x * 0.5).cumprod(1), [(r, F32)])
    c["cummax"] = (lambda x: torch.cummax(x, 1), [(r, F32)])
    c["logcumsumexp"] = (lambda x: torch.logcumsumexp(x, 1), [(r, F32)])
    # Sort / top-k
    c["sort"] = (lambda x: torch.sort(x, 1), [(r, F32)])
    c["sort.desc.stable"] = (lambda x: torch.sort(x.round(), dim=1, descending=True, stable=True), [(r, F32)])
    c["argsort.i32"] = (lambda x: torch.argsort(x, dim=0, stable=True), [(r, I32)])
    c["topk"] = (lambda x: torch.topk(x, 3, 1), [(r, F32)])
    c["topk.smallest"] = (lambda x: torch.topk(x, 2, 0, largest=False), [(r, F32)])
    c["kthvalue"] = (lambda x: torch.kthvalue(x, 2, 1), [(r, F32)])
    c["msort"] = (torch.msort, [(r, F32)])
    # Indexing / gather / scatter
    idx = torch.tensor([[0, 2, 1], [3, 3, 0]])
    c["index_select"] = (lambda x: x.index_select(1, torch.tensor([4, 0, 2], device=x.device)), [(r, F32)])
    c["gather"] = (lambda x: torch.gather(x, 1, idx.to(x.device)), [(r, F32)])
    c["scatter"] = (lambda x: torch.zeros(2, 6, device=x.device).scatter(1, idx.to(x.device), x[:2, :3]), [(r, F32)])
    c["scatter_add"] = (lambda x: torch.zeros(2, 6, device=x.device).scatter_add(1, idx.to(x.device), x[:2, :3]), [(r, F32)])
    c["scatter_reduce.amax"] = (lambda x: torch.zeros(2, 6, device=x.device).scatter_reduce(
        1, idx.to(x.device), x[:2, :3], "amax", include_self=False), [(r, F32)])
    c["index_add"] = (lambda x: x.index_add(0, torch.tensor([0, 0, 2], device=x.device), x[:3] * 2), [(r, F32)])
    c["index_put.accumulate"] = (lambda x: x.index_put((torch.tensor([1, 1, 3], device=x.device),),
                                                       x[:3], accumulate=True), [(r, F32)])
    c["advanced_index"] = (lambda x: x[torch.tensor([3, 0], device=x.device), 1:4], [(r, F32)])
    c["masked_fill"] = (lambda x: x.masked_fill(x > 0, -1.0), [(r, F32)])
    c["embedding"] = (lambda w: F.embedding(torch.tensor([[0, 3], [2, 2]], device=w.device), w), [(r, F32)])
    c["one_hot"] = (lambda: F.one_hot(torch.tensor([0, 3, 1], device=DEV_OF[0]), 5), [])
    c["take_along_dim"] = (lambda x: torch.take_along_dim(x[:2], idx.to(x.device), 1), [(r, F32)])
    # Views / shape / in-place
    c["view_transpose"] = (lambda x: x.view(2, 12).t().contiguous(), [(r, F32)])
    c["permute_reshape"] = (lambda x: x.reshape(2, 2, 6).permute(2, 0, 1).reshape(6, 4), [(r, F32)])
    c["slice_step"] = (lambda x: x[::2, 1::3], [(r, F32)])
    c["narrow_unsqueeze"] = (lambda x: x.narrow(1, 1, 3).unsqueeze(0).squeeze(), [(r, F32)])
    c["cat_stack"] = (lambda x, y: torch.cat([torch.stack([x, y]), x[None]], 0), [(r, F32), (r, F32)])
    c["split_chunk"] = (lambda x: [t * 2 for t in x.chunk(3, 1)], [(r, F32)])
    c["expand_repeat"] = (lambda x: x[:, :1].expand(4, 3).repeat(2, 1), [(r, F32)])
    c["flip_roll"] = (lambda x: torch.roll(x.flip(0), 2, 1), [(r, F32)])
    c["tril_triu"] = (lambda x: torch.tril(x) + torch.triu(x, 1) * 2, [(r, F32)])
    c["pad.reflect"] = (lambda x: F.pad(x[None], (1, 2), mode="reflect")[0], [(r, F32)])
    c["inplace_ops"] = (lambda x: x.mul_(2).add_(1).clamp_(max=3).relu_(), [(r, F32)])
    c["inplace_slice_assign"] = (lambda x: _slice_assign(x), [(r, F32)])
    c["diagonal_view_write"] = (lambda x: _diag_write(x), [((4, 4), F32)])
    # Linear algebra / NN
    c["matmul"] = (torch.matmul, [((3, 4), F32), ((4, 5), F32)])
    c["bmm"] = (torch.bmm, [((2, 3, 4), F32), ((2, 4, 2), F32)])
    c["matmul.bf16"] = (torch.matmul, [((3, 4), BF16), ((4, 5), BF16)])
    c["einsum"] = (lambda a, b: torch.einsum("bij,bjk->bik", a, b), [((2, 3, 4), F32), ((2, 4, 2), F32)])
    c["linear"] = (F.linear, [((3, 4), F32), ((5, 4), F32), ((5,), F32)])
    c["addmm"] = (torch.addmm, [((3, 5), F32), ((3, 4), F32), ((4, 5), F32)])
    c["conv1d"] = (lambda x, w: F.conv1d(x, w, padding=1), [((2, 3, 8), F32), ((4, 3, 3), F32)])
    c["conv2d"] = (lambda x, w: F.conv2d(x, w, stride=2, padding=1), [((2, 3, 8, 8), F32), ((4, 3, 3, 3), F32)])
    c["conv2d.groups_dilation"] = (lambda x, w: F.conv2d(x, w, groups=2, dilation=2),
                                   [((1, 4, 9, 9), F32), ((4, 2, 3, 3), F32)])
    c["conv_transpose2d"] = (lambda x, w: F.conv_transpose2d(x, w, stride=2), [((1, 3, 4, 4), F32), ((3, 2, 3, 3), F32)])
    c["max_pool2d"] = (lambda x: F.max_pool2d(x, 2), [((2, 3, 8, 8), F32)])
    c["max_pool2d.indices"] = (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [((1, 2, 7, 7), F32)])
    c["avg_pool2d"] = (lambda x: F.avg_pool2d(x, 3, 2, 1), [((2, 3, 8, 8), F32)])
    c["adaptive_avg_pool2d"] = (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [((2, 3, 8, 8), F32)])
    c["batch_norm.train"] = (lambda x: F.batch_norm(x, torch.zeros(3, device=x.device), torch.ones(3, device=x.device),
                                                    training=True), [((4, 3, 5, 5), F32)])
    c["layer_norm"] = (lambda x: F.layer_norm(x, (6,)), [(r, F32)])
    c["group_norm"] = (lambda x: F.group_norm(x, 2), [((2, 4, 5), F32)])
    c["interpolate.bilinear"] = (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [((1, 2, 4, 4), F32)])
    c["cross_entropy"] = (lambda x: F.cross_entropy(x, torch.tensor([0, 5, 2, 1], device=x.device)), [(r, F32)])
    c["mse_loss"] = (F.mse_loss, [(r, F32), (r, F32)])
    c["sdpa"] = (F.scaled_dot_product_attention, [((2, 3, 5, 4), F32)] * 3)
    c["linalg.solve"] = (lambda a, b: torch.linalg.solve(a + 4 * torch.eye(3, device=a.device), b),
                         [((3, 3), F32), ((3, 2), F32)])
    c["cholesky"] = (lambda a: torch.linalg.cholesky(a @ a.T + torch.eye(4, device=a.device)), [((4, 4), F32)])
    # Dtype conversions
    for src, dst in [(F32, BF16), (F32, F16), (BF16, F32), (F16, BF16), (F32, I32), (I32, F32),
                     (F32, B), (B, F32), (I64, I32), (I32, B), (F32, torch.uint8)]:
        spec = [(s, src)]
        pre = (lambda x: x.abs() * 10) if dst == torch.uint8 else (lambda x: x)
        c[f"to.{str(src)[6:]}->{str(dst)[6:]}"] = (lambda x, dst=dst, pre=pre: pre(x).to(dst), spec)
    # Factories and misc
    c["arange_linspace"] = (lambda: torch.arange(0, 5, 0.5, device=DEV_OF[0]) + torch.linspace(0, 1, 10, device=DEV_OF[0]), [])
    c["full_zeros_like"] = (lambda x: torch.full_like(x, 3.5) + torch.zeros_like(x), [(r, F32)])
    c["eye"] = (lambda: torch.eye(3, 4, device=DEV_OF[0]), [])
    c["unique_consecutive_free.bincount"] = (lambda: torch.bincount(torch.tensor([0, 2, 2, 5], device=DEV_OF[0]), minlength=7), [])
    c["nonzero"] = (lambda x: torch.nonzero(x > 0), [(r, F32)])
    c["masked_select"] = (lambda x: torch.masked_select(x, x > 0), [(r, F32)])
    c["randperm"] = (lambda: torch.randperm(8, device=DEV_OF[0]).sort().values, [])
    return c


# Factories take the device from here (set per run): the CPU pass first, then XLA.
DEV_OF = ["cpu"]


def _slice_assign(x):
    x[1:3, ::2] = 7.0
    x[0] += x[3]
    return x


def _diag_write(x):
    x.diagonal().mul_(0).add_(1)
    return x


def run_sweep():
    results = {}
    for name, (fn, spec) in sweep_cases().items():
        try:
            if not spec:  # factory: the device comes from DEV_OF
                DEV_OF[0] = "cpu"
                ref = [t.clone() for t in _flat(fn())]
                DEV_OF[0] = DEV
                got = [t.cpu() for t in _flat(fn())]
                for r, g in zip(ref, got):
                    torch.testing.assert_close(g, r, equal_nan=True)
            else:
                compare(fn, spec)
            results[name] = "ok"
        except Exception as e:
            results[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
    results.update(random_checks())
    return {"cases": results, "profile": profile_check()}


def profile_check():
    """torch_xla.debug.profiler around a step: the event names of the
    plugin's plane in the profile it writes (the PJRT profiler extension),
    read with XLA's XSpace parser (jaxlib)."""
    import glob
    import tempfile

    import torch_xla.debug.profiler as xp
    from jax._src.lib import _profile_data
    with tempfile.TemporaryDirectory() as d:
        xp.start_trace(d)
        y = (torch.arange(8.0, device=DEV) * 3).sum()
        torch_xla.sync()
        y.item()
        xp.stop_trace()
        files = glob.glob(d + "/**/*.xplane.pb", recursive=True)
        data = _profile_data.ProfileData.from_file(files[0])
        return {p.name: sorted({e.name for line in p.lines for e in line.events})
                for p in data.planes if p.name.startswith("/device:")}


def random_checks():
    """PyTorch/XLA draws random numbers with XLA's own generator (a
    rng_bit_generator-based Philox on a device seed), not with CPU's
    Mersenne Twister, so values cannot equal eager CPU's: what is checked is
    what PyTorch promises, reproducibility under a seed and the distribution."""
    out = {}

    def run(name, f):
        try:
            f()
            out[name] = "ok"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"

    def same_seed_same_values():
        torch_xla.manual_seed(123)
        a = torch.rand(1000, device=DEV).cpu()
        torch_xla.manual_seed(123)
        b = torch.rand(1000, device=DEV).cpu()
        torch.testing.assert_close(a, b, atol=0, rtol=0)
        assert 0 <= a.min() and a.max() < 1 and abs(a.mean().item() - 0.5) < 0.05
        assert len(torch.unique(a)) > 990

    def normal_moments():
        torch_xla.manual_seed(7)
        x = torch.randn(20000, device=DEV).cpu()
        assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05, (x.mean(), x.std())

    def dropout_fraction():
        torch_xla.manual_seed(3)
        y = F.dropout(torch.ones(10000, device=DEV), 0.25, training=True).cpu()
        kept = (y != 0).float().mean().item()
        assert abs(kept - 0.75) < 0.03, kept
        torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / 0.75))

    def randperm_is_permutation():
        # PyTorch/XLA's randperm: a Fisher-Yates shuffle of rng draws (HLO
        # with the legacy dynamic-slice form, rewritten by the plugin).
        p = torch.randperm(1000, device=DEV).cpu()
        assert p.dtype == torch.int64
        assert torch.equal(p.sort().values, torch.arange(1000))
        assert not torch.equal(p, torch.arange(1000))
        # A second call (the same compiled program) draws new numbers, as on
        # PJRT_DEVICE=CPU: a shuffle per epoch must not repeat itself.
        q = torch.randperm(1000, device=DEV).cpu()
        assert torch.equal(q.sort().values, torch.arange(1000))
        assert not torch.equal(p, q)

    run("random.rand_seeded", same_seed_same_values)
    run("random.randperm", randperm_is_permutation)
    run("random.randn_moments", normal_moments)
    run("random.dropout", dropout_fraction)
    return out


# --------------------------------------------------------------------------
# Models: a few SGD steps, losses against eager CPU.


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


class TinyLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def models():
    return {
        "mlp": (lambda: nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Linear(32, 3)), (8, 10)),
        "cnn": (lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)), (8, 1, 8, 8)),
        "lstm": (TinyLSTM, (4, 5, 6)),
        "transformer": (TinyTransformer, (4, 5, 16)),
    }


def train(make, shape, device, steps=3):
    torch.manual_seed(0)
    model = make().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen).to(device)
    y = torch.randint(0, 3, (shape[0],), generator=gen).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if device != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses


def run_models():
    """The models, then (the process can enter SPMD mode only once, and this
    part has made XLA tensors) use_spmd() after tensors exist."""
    out = {}
    for name, (make, shape) in models().items():
        try:
            out[name] = {"cpu": train(make, shape, "cpu"), "xla": train(make, shape, DEV)}
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {traceback.format_exc()[-600:]}"}
    return {"models": out, "spmd_late": run_spmd_late()}


# --------------------------------------------------------------------------
# torch.export -> StableHLO -> `stablehlo-ref run` and the plugin.


def run_export():
    import os
    import subprocess
    import tempfile

    import numpy as np
    from torch_xla.stablehlo import _extract_call_parameters, exported_program_to_stablehlo

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4)).eval()
    x = torch.randn(3, 6)
    with torch.no_grad():
        ref = model(x).numpy()
    ep = torch.export.export(model, (x,))
    shlo = exported_program_to_stablehlo(ep)
    func = shlo._bundle.stablehlo_funcs[0]
    args = [np.asarray(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a)
            for a in _extract_call_parameters((x,), func.meta, shlo._bundle)]
    out = {"text_has_gelu_erf": "erf" in shlo.get_stablehlo_text()}
    with tempfile.TemporaryDirectory() as d:
        mod = os.path.join(d, "forward.mlirbc")
        with open(mod, "wb") as f:
            f.write(shlo.get_stablehlo_bytecode())
        np.savez(os.path.join(d, "args.npz"), *args)
        cli = subprocess.run([sys.executable, "-m", "stablehlo_interpreter.cli", "run", mod,
                              "--args", os.path.join(d, "args.npz"), "--out", os.path.join(d, "out.npz")],
                             capture_output=True, text=True)
        if cli.returncode != 0:
            out["cli"] = cli.stderr[-1000:]
        else:
            got = np.load(os.path.join(d, "out.npz"))
            got = got[got.files[0]]
            out["cli_max_abs_diff"] = float(np.abs(got - ref).max())
    plugin = shlo(x)
    plugin = plugin[0] if isinstance(plugin, (list, tuple)) else plugin
    out["plugin_max_abs_diff"] = float(np.abs(plugin.cpu().numpy() - ref).max())
    return out


# --------------------------------------------------------------------------
# SPMD: a mesh of the client's devices (STABLEHLO_REF_NUM_DEVICES=4, or
# PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 for PyTorch/XLA's own CPU plugin: the
# test compares the two).


def _shards(t):
    """(sharding spec, [(device, replica, shard values)]) of an XLA tensor:
    what the devices hold, as PyTorch/XLA sees it."""
    import torch_xla.core.xla_model as xm
    xm.wait_device_ops()
    spec = torch_xla._XLAC._get_xla_sharding_spec(t)
    data = torch_xla._XLAC._get_local_shards([t])[0]
    reps = torch_xla._XLAC._get_local_shard_replica_and_indices([t])[0]
    shards = [[str(dev).split(":")[-1], rep, d.cpu().tolist()]
              for (d, dev), (rep, _) in zip(data, reps)]
    return spec, shards


def run_spmd():
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n // 2, 2), ("data", "model"))
    out = {"devices": n, "tensors": {}}

    def record(name, t):
        spec, shards = _shards(t)
        out["tensors"][name] = {"spec": spec, "shards": shards, "value": t.cpu().tolist()}

    def make():
        return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 3))

    def step_losses(device, shard):
        torch.manual_seed(0)
        model = make().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(8, 8, generator=gen).to(device)
        y = torch.randint(0, 3, (8,), generator=gen).to(device)
        if shard:
            xs.mark_sharding(x, mesh, ("data", None))
            xs.mark_sharding(model[0].weight, mesh, ("model", None))
            xs.mark_sharding(model[2].weight, mesh, (None, "model"))
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if shard:
                torch_xla.sync()
            losses.append(loss.item())
        if shard:
            record("x", x)
            for pname, prm in model.named_parameters():
                record(f"param.{pname}", prm)
                record(f"grad.{pname}", prm.grad)
        return losses

    out["cpu"] = step_losses("cpu", False)
    out["spmd"] = step_losses(DEV, True)

    # Not SPMD: PyTorch/XLA's count_nonzero dtype, on whatever device this runs.
    out["count_nonzero"] = {}
    for dt in (torch.int32, torch.float32, torch.bool):
        t = torch.tensor([[1, 0, 3], [0, 0, 2]]).to(dt)
        got = torch.count_nonzero(t.to(DEV), 1).cpu()
        out["count_nonzero"][str(dt)] = [str(got.dtype), got.tolist()]

    # One program per case on sharded inputs: the results' shardings are
    # what the plugin chose (XLA's sharding propagation on PJRT_DEVICE=CPU).
    gen = torch.Generator().manual_seed(2)
    a_cpu = torch.randn(8, 4, generator=gen)
    b_cpu = torch.randn(4, 6, generator=gen)
    c_cpu = torch.randn(8, 4, generator=gen)

    def inputs():
        a, b, c = a_cpu.to(DEV), b_cpu.to(DEV), c_cpu.to(DEV)
        xs.mark_sharding(a, mesh, ("data", None))
        xs.mark_sharding(b, mesh, (None, "model"))
        xs.mark_sharding(c, mesh, (None, "model"))
        return a, b, c

    def constrained(a, b):
        h = a @ b
        if h.device.type == "xla":  # an in-graph Sharding custom call
            xs.mark_sharding(h, mesh, ("model", "data"))
        return h * 2

    cases = {
        "matmul_2d": lambda a, b, c: a @ b,
        "elementwise_merge": lambda a, b, c: torch.tanh(a) + c,
        "broadcast_scalar": lambda a, b, c: a * 3 + 1,
        "reduce_sharded_dim": lambda a, b, c: a.sum(0),
        "reduce_free_dim": lambda a, b, c: a.sum(1),
        "transpose": lambda a, b, c: a.t().contiguous() * 1,
        "reshape_split": lambda a, b, c: a.reshape(2, 4, 4) + 0,
        "softmax": lambda a, b, c: F.softmax(a @ b, -1),
        "gelu_erf": lambda a, b, c: F.gelu(a),
        "in_graph_constraint": lambda a, b, c: constrained(a, b),
        "cumsum": lambda a, b, c: a.cumsum(0),
        "sort_free_dim": lambda a, b, c: a.sort(1).values,
        "slice_free_dim": lambda a, b, c: a[:, 1:3] * 2,
        "cat_free_dim": lambda a, b, c: torch.cat([a, a], 1),
        "max_pool": lambda a, b, c: F.max_pool1d(a[None], 2)[0],
        "argmax": lambda a, b, c: a.argmax(1),
        "sort_sharded_dim": lambda a, b, c: a.sort(0).values,
        "flip": lambda a, b, c: a.flip(0),
        "pad_free_dim": lambda a, b, c: F.pad(a, (1, 1)),
        "slice_sharded_dim": lambda a, b, c: a[2:6] * 2,
    }
    for name, fn in cases.items():
        a, b, c = inputs()
        r = fn(a, b, c)
        torch_xla.sync()
        record(f"op.{name}", r)
        want = fn(a_cpu, b_cpu, c_cpu)
        out["tensors"][f"op.{name}"]["eager"] = want.tolist()
    # Uneven: 3 rows in 2 shards (PyTorch/XLA pads the last shard).
    u_cpu = torch.randn(3, 5, generator=gen)
    u = u_cpu.to(DEV)
    xs.mark_sharding(u, mesh, ("data", "model"))
    r = torch.exp(u) @ u.t()
    torch_xla.sync()
    record("uneven.input", u)
    record("op.uneven", r)
    out["tensors"]["op.uneven"]["eager"] = (torch.exp(u_cpu) @ u_cpu.t()).tolist()
    return out


def run_spmd_late():
    """use_spmd() after XLA tensors exist (one with a pending operation):
    PyTorch/XLA replicates them onto the SPMD device (with this plugin,
    after running their pending operations: torch_xla_plugin.py)."""
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    t_cpu = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    t = t_cpu.to(DEV) * 2  # pending: computed when use_spmd() replicates it
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n // 2, 2), ("data", "model"))
    x_cpu = torch.arange(64, dtype=torch.float32).reshape(8, 8) / 10
    x = x_cpu.to(DEV)
    xs.mark_sharding(x, mesh, ("data", None))
    y = x @ x.T + t.sum()
    torch_xla.sync()
    return {"devices": n, "t": t.cpu().tolist(), "y": y.cpu().tolist(),
            "y_spec": torch_xla._XLAC._get_xla_sharding_spec(y),
            "eager_t": (t_cpu * 2).tolist(),
            "eager_y": (x_cpu @ x_cpu.T + (t_cpu * 2).sum()).tolist()}


def _spawned(index, out):
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    x = torch.arange(3, dtype=torch.float32, device=torch_xla.device()) + index
    s = xm.all_reduce(xm.REDUCE_SUM, x)  # over a world of one: x itself
    out.update(index=index, world=xr.world_size(), sum=s.cpu().tolist())


def run_spawn():
    """xmp.spawn with nprocs=1 runs in this process. (Several processes:
    tests/test_multiprocess.py.)"""
    import torch_xla.distributed.xla_multiprocessing as xmp
    out = {}
    single = {}
    xmp.spawn(_spawned, args=(single,), nprocs=1)
    out["single"] = single
    return out


if __name__ == "__main__":
    part = sys.argv[1]
    result = {"sweep": run_sweep, "models": run_models, "export": run_export, "spmd": run_spmd,
              "spawn": run_spawn}[part]()
    print("RESULT " + json.dumps(result))
