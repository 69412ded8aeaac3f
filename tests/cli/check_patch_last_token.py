#!/usr/bin/python3
"""Checks `xgrad patch`'s files for a clean and a corrupted text that differ in their last token only:
   check_patch_last_token.py OUT L H T TOLERANCE NAME
every file of the contract with its shape (L layers, H heads, T positions), and the identities that
hold then: patching resid_pre at the last position gives the clean metric at every layer; any patch
at an earlier position gives the corrupted one; AtP and integrated gradients are 0 before the last
position and not at it; the logit lens's last reading is the clean metric. TOLERANCE: float32's
rounding of the metrics. Prints one line with NAME."""
import os
import sys

import numpy as np

out, L, H, T, tol, name = sys.argv[1], *map(int, sys.argv[2:5]), float(sys.argv[5]), sys.argv[6]
shapes = {"clean_metric": (), "corrupt_metric": (), "patch.head": (L, H), "patch.head_pos": (L, H, T),
          "patch.resid_pre": (L, T), "patch.attn_out": (L, T), "patch.mlp_out": (L, T), "atp.head": (L, H),
          "atp.head_pos": (L, H, T), "atp.resid_pre": (L, T), "dla.head": (L, H), "dla.mlp": (L,),
          "logit_lens": (L + 1,), "ig.embed": (1, T), "ig.completeness": ()}
files = sorted(os.listdir(out))
assert files == sorted([n + ".npy" for n in shapes] + ["patch.png"]), files
a = {n: np.load(os.path.join(out, n + ".npy")) for n in shapes}
for n, shape in shapes.items():
    assert a[n].shape == shape and a[n].dtype == np.float64, (n, a[n].shape, a[n].dtype)
clean, corrupt = float(a["clean_metric"]), float(a["corrupt_metric"])
assert abs(clean - corrupt) > 100 * tol, (clean, corrupt)
near = lambda x, v: np.abs(x - v).max() < tol
assert near(a["patch.resid_pre"][:, -1], clean), (a["patch.resid_pre"], clean)
for n in ("patch.resid_pre", "patch.attn_out", "patch.mlp_out", "patch.head_pos"):
    assert near(a[n][..., :-1], corrupt), (n, a[n], corrupt)
for n in ("atp.resid_pre", "atp.head_pos", "ig.embed"):
    assert not a[n][..., :-1].any() and a[n][..., -1].all(), (n, a[n])
assert near(a["logit_lens"][-1], clean), (a["logit_lens"], clean)  # the final residual's reading is the metric
print(f"patch {name}: clean metric {clean:.6f}, corrupted {corrupt:.6f}; resid_pre patched at the last position: "
      f"{a['patch.resid_pre'][:, -1]}")
