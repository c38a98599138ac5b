"""One rank of the FSDP2 test: a small transformer (its head tied to its
embedding, as GPT-2's) sharded with
torch.distributed.fsdp.fully_shard on the device under test over its c10d
backend (tests.target: openreg over occl) trains for 10 steps,
each rank on its half of the batch; rank 0 compares the global loss of every
step with a single-process run of the same model on the full batch."""

import copy
import datetime
import os
import sys

# Started as a script: the repository root, for tests.target.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

from tests.target import DEVICE, DIST_BACKEND, device_module  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device(DEVICE, rank % device_module.device_count())
device_module.set_device(dev)
dist.init_process_group(DIST_BACKEND, device_id=dev, timeout=datetime.timedelta(seconds=120))

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH, STEPS = 64, 32, 4, 2, 16, 8, 10


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)
        self.head.weight = self.emb.weight  # tied, as GPT-2's head

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(x).clone()  # not a view: FSDP2 hooks the output


torch.manual_seed(0)
base = TinyLM()
# Counting sequences (next token = this token + 1): learnable in 10 steps.
data = (torch.randint(0, VOCAB, (STEPS, BATCH, 1)) + torch.arange(SEQ + 1)) % VOCAB


def loss_of(model, batch):
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))


# Single-process reference on the full batch (on this rank's device).
ref = copy.deepcopy(base).to(dev)
opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
ref_losses = []
for step in range(STEPS):
    opt.zero_grad()
    loss = loss_of(ref, data[step].to(dev))
    loss.backward()
    opt.step()
    ref_losses.append(loss.item())

# FSDP2: shard every block and the root, half of the batch per rank.
model = copy.deepcopy(base).to(dev)
# .to() and fully_shard keep the tie: one Parameter, sharded once.
assert model.head.weight is model.emb.weight
assert len(list(model.parameters())) == len(list(base.parameters()))
for b in model.blocks:
    fully_shard(b)
fully_shard(model)
assert model.head.weight is model.emb.weight
assert len(list(model.parameters())) == len(list(base.parameters()))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
per = BATCH // world
losses = []
for step in range(STEPS):
    opt.zero_grad()
    loss = loss_of(model, data[step, rank * per:(rank + 1) * per].to(dev))
    loss.backward()  # gradients reduce-scattered (averaged) over the backend
    opt.step()
    g = loss.detach().clone()
    dist.all_reduce(g, op=dist.ReduceOp.AVG)
    losses.append(g.item())

if rank == 0:
    print("fsdp", " ".join(f"{v:.6f}" for v in losses), flush=True)
    print("ref ", " ".join(f"{v:.6f}" for v in ref_losses), flush=True)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-5)
    assert losses[-1] < 0.8 * losses[0], losses  # it trains
dist.destroy_process_group()
print("OK", flush=True)
