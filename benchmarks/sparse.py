"""Sparse tensors on openreg against the CPU (docs/sparse.md, docs/performance.md):

* ``sparse.mm``: a 4096x4096 matrix at 1% density (COO, coalesced; and CSR)
  times a dense 4096x128 matrix;
* ``embedding bag``: an EmbeddingBag(100000, 64, mode="sum", sparse=True)
  training step (forward, backward with a sparse gradient, SparseAdam).

    python benchmarks/sparse.py [--quick]

Each line prints the seconds per call on both devices and the median of the
paired ratios openreg/cpu (samples of a few calls per device back to back,
the order alternating: _timing.paired). Nothing is asserted.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _timing import paired  # noqa: E402 (benchmarks/ is on sys.path when run as a script)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="small sizes and few samples")
    a = p.parse_args()

    import torch

    n, cols, density = (512, 16, 0.01) if a.quick else (4096, 128, 0.01)
    rows, dim, bags, per_bag = (2000, 16, 32, 8) if a.quick else (100000, 64, 512, 20)
    pairs, group = (4, 2) if a.quick else (15, 5)
    devs = ("cpu", "openreg")
    syncs = {"cpu": lambda: None, "openreg": torch.openreg.synchronize}

    g = torch.Generator().manual_seed(0)
    nnz = int(n * n * density)
    idx = torch.stack([torch.randint(0, n, (nnz,), generator=g), torch.randint(0, n, (nnz,),
                                                                              generator=g)])
    adj = torch.sparse_coo_tensor(idx, torch.randn(nnz, generator=g), (n, n)).coalesce()
    feats = torch.randn(n, cols, generator=g)
    print(f"sparse.mm: {n}x{n} at {density:.0%} ({adj._nnz()} elements) times {n}x{cols}")
    for name, layout in (("COO", torch.sparse_coo), ("CSR", torch.sparse_csr)):
        a_of = {d: (adj if layout == torch.sparse_coo else adj.to_sparse_csr()).to(d)
                for d in devs}
        f_of = {d: feats.to(d) for d in devs}
        steps = {d: (lambda d=d: torch.sparse.mm(a_of[d], f_of[d])) for d in devs}
        times, ratio = paired(steps, syncs, pairs, group)
        print(f"  {name}: cpu {times['cpu'] * 1e3:.2f} ms, openreg {times['openreg'] * 1e3:.2f} ms"
              f"  openreg/cpu: sparse.mm {name} {ratio:.2f}", flush=True)

    print(f"embedding bag: EmbeddingBag({rows}, {dim}, sparse=True), {bags} bags of {per_bag}, "
          f"SparseAdam")
    steps = {}
    for d in devs:
        torch.manual_seed(0)
        bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True).to(d)
        opt = torch.optim.SparseAdam(list(bag.parameters()), lr=1e-3)
        ids = torch.randint(0, rows, (bags * per_bag,), generator=g).to(d)
        offsets = torch.arange(0, bags * per_bag, per_bag).to(d)

        def step(bag=bag, opt=opt, ids=ids, offsets=offsets):
            opt.zero_grad(set_to_none=True)
            bag(ids, offsets).pow(2).sum().backward()
            opt.step()
        steps[d] = step
    for d in devs:
        steps[d]()  # first-call set-up (optimizer state) outside the samples
    times, ratio = paired(steps, syncs, pairs, group)
    print(f"  step: cpu {times['cpu'] * 1e3:.2f} ms, openreg {times['openreg'] * 1e3:.2f} ms"
          f"  openreg/cpu: embedding bag step {ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
