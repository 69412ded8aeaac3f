"""The peer of bench/patching_speed.cpp: attribution patching (AtP) and exact activation patching of
every head and every head x position with PyTorch hooks on nanoGPT's own model.py (run as written),
beside one training step of the same shape. One thread, batch 1, clean and corrupted ids random, the
metric the logit difference of a random token and the one V/2 after it at the last position (model.py without targets
returns the last position's logits only). A head's output z is the input of its block's
attn.c_proj, columns h*D:(h+1)*D, read and replaced there by forward pre-hooks; the exact sweep
batches the corrupted row 256 patches a forward, as xgrad does.
Usage: /usr/bin/python3 patching_torch.py NANOGPT L H C V T ROUNDS
  NANOGPT  a nanoGPT checkout or its fetched git mirror (model.py is read from it)
Prints one JSON line: the median over ROUNDS of each, in ms."""
import contextlib, io, json, os, sys, time

src, L, H, C, V, T, rounds = sys.argv[1], *map(int, sys.argv[2:8])
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"  # before torch: one thread, really
import torch
torch.set_num_threads(1)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from reference_model import import_model  # noqa: E402

model_py = import_model(src)
GPT, GPTConfig = model_py.GPT, model_py.GPTConfig
with contextlib.redirect_stdout(io.StringIO()):  # model.py prints the parameter count
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=max(T, 64), vocab_size=V, n_layer=L, n_head=H, n_embd=C, dropout=0.0, bias=True))
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1)
D = C // H
g = torch.Generator().manual_seed(7)
clean, corrupt = torch.randint(0, V, (1, T), generator=g), torch.randint(0, V, (1, T), generator=g)
correct = int(torch.randint(0, V, (1,), generator=g))
wrong = (correct + V // 2) % V
x, y = torch.randint(0, V, (1, T), generator=g), torch.randint(0, V, (1, T), generator=g)


def train_step():
    _, loss = m(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def metric(logits):  # (rows, 1, V) -> (rows,)
    return logits[:, -1, correct] - logits[:, -1, wrong]


def run_with(hook_of_layer, ids):
    handles = [b.attn.c_proj.register_forward_pre_hook(hook_of_layer(l)) for l, b in enumerate(m.transformer.h)]
    try:
        logits, _ = m(ids)
    finally:
        for h in handles:
            h.remove()
    return logits


def z_of_clean():
    zs = {}
    with torch.no_grad():
        run_with(lambda l: (lambda mod, args: zs.__setitem__(l, args[0].detach().clone())), clean)
    return zs


def atp():
    """(L, H, T) estimates: (z_clean - z_corrupt) . dmetric/dz at the corrupted run, per head and position."""
    zs = z_of_clean()
    seen = {}

    def keep(l):
        def hook(mod, args):
            z = args[0].detach().requires_grad_(True)
            seen[l] = z
            return (z,)
        return hook
    m.zero_grad(set_to_none=True)
    value = metric(run_with(keep, corrupt)).mean()
    value.backward()
    out = torch.empty(L, H, T, dtype=torch.float64)
    for l in range(L):
        terms = ((zs[l] - seen[l].detach()) * seen[l].grad)[0].view(T, H, D).sum(-1)  # (T, H)
        out[l] = terms.t().double()
    return out


def exact():
    """(L, H, T) patched metrics: head h's z at position t from the clean run, one patch a row."""
    zs = z_of_clean()
    patches = [(h, t) for h in range(H) for t in range(T)]
    out = torch.empty(L, H, T, dtype=torch.float64)
    with torch.no_grad():
        for l in range(L):
            for first in range(0, len(patches), 256):
                group = patches[first:first + 256]

                def patch(layer):
                    def hook(mod, args):
                        if layer != l:
                            return None
                        z = args[0].clone()
                        for row, (h, t) in enumerate(group):
                            z[row, t, h * D:(h + 1) * D] = zs[l][0, t, h * D:(h + 1) * D]
                        return (z,)
                    return hook
                values = metric(run_with(patch, corrupt.repeat(len(group), 1)))
                for row, (h, t) in enumerate(group):
                    out[l, h, t] = float(values[row])
    return out


train_step()  # warm
times = {"train_step_ms": [], "atp_ms": [], "exact_ms": []}
for _ in range(rounds):
    for name, f in (("train_step_ms", train_step), ("atp_ms", atp), ("exact_ms", exact)):
        m.train(name == "train_step_ms")
        t0 = time.perf_counter()
        result = f()
        times[name].append((time.perf_counter() - t0) * 1e3)
        if name == "atp_ms":
            atp_sum = float(result.sum())
        if name == "exact_ms":
            with torch.no_grad():
                into = float(metric(m(corrupt)[0])[0])
            exact_sum = float(result.sum()) - L * H * T * into
median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
print(json.dumps({"impl": "nanoGPT/torch " + torch.__version__ + " hooks", "L": L, "H": H, "C": C, "V": V, "T": T,
                  "rounds": rounds, **{k: round(v, 2) for k, v in median.items()}, "atp_sum": atp_sum,
                  "exact_sum": exact_sum}))
