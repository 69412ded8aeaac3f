#!/usr/bin/env python3
"""Regenerates the fuzzing seed corpus (standard library only; the fuzzers never need python).

Run from anywhere: python3 fuzz/corpus/make_corpus.py
  npy/     numpy-written fixtures from tests/fixtures/io/npy, plus hand-made valid and broken images
  npz/     numpy-written fixtures from tests/fixtures/io/npz, plus small stored/deflated/broken archives
  config/  the attention configs of tests/fixtures/io/attention, plus broken ones
"""
import json
import os
import shutil
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tests", "fixtures", "io")


def npy(descr, shape, data, version=1, fortran=False, header=None):
    """An .npy image: magic, version, header length, the header dict padded to 64 bytes, data."""
    if header is None:
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    prefix = 10 if version == 1 else 12
    pad = (-(prefix + len(header) + 1)) % 64
    text = (header + " " * pad + "\n").encode("latin1")
    size = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + size + text + data


def write(folder, name, data):
    with open(os.path.join(HERE, folder, name), "wb") as f:
        f.write(data)


def npz(entries, method=zipfile.ZIP_STORED):
    """A zip of (name, bytes) entries with a fixed timestamp, so the output is reproducible."""
    path = os.path.join(HERE, "npz", ".tmp.zip")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    with open(path, "rb") as f:
        out = f.read()
    os.remove(path)
    return out


def copy_fixtures(src, folder, names):
    for name in names:
        shutil.copyfile(os.path.join(FIXTURES, src, name), os.path.join(HERE, folder, name))


def main():
    for folder in ("npy", "npz", "config"):
        shutil.rmtree(os.path.join(HERE, folder), ignore_errors=True)
        os.makedirs(os.path.join(HERE, folder))

    copy_fixtures("npy", "npy", ["b1.npy", "f4.npy", "f8.npy", "i4.npy", "i8.npy", "scalar.npy", "empty.npy",
                                 "v2.npy", "v3.npy", "big_endian.npy", "fortran.npy", "f2.npy"])
    f8x2 = struct.pack("<2d", 1.5, -2.0)
    write("npy", "bool_3d.npy", npy("|b1", (2, 1, 2), bytes([1, 0, 2, 255])))
    write("npy", "zero_dims.npy", npy("<i8", (0, 4, 0), b""))
    write("npy", "truncated.npy", npy("<f8", (3,), f8x2))
    write("npy", "trailing.npy", npy("<f8", (1,), f8x2))
    write("npy", "bad_dict.npy", npy(None, None, f8x2, header="{'descr': '<f8', 'shape': (2,) 'x'}"))
    write("npy", "huge_shape.npy", npy("<f4", (4294967296, 4294967296, 2), f8x2))
    write("npy", "empty_huge_shape.npy", npy("<f8", (0, 4294967296, 4294967296), b""))
    write("npy", "short_header.npy", b"\x93NUMPY\x01\x00\xff\x7f{'descr'")

    copy_fixtures("npz", "npz", ["net_stored.npz", "net_deflated.npz"])
    mixed = [("mask.npy", npy("|b1", (3,), bytes([1, 0, 1]))), ("steps.npy", npy("<i8", (), struct.pack("<q", 7))),
             ("w.npy", npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4)))]
    write("npz", "mixed_stored.npz", npz(mixed))
    write("npz", "mixed_deflated.npz", npz(mixed, zipfile.ZIP_DEFLATED))
    write("npz", "mixed_bzip2.npz", npz(mixed[:2], zipfile.ZIP_BZIP2))
    write("npz", "empty.npz", b"PK\x05\x06" + bytes(18))
    write("npz", "with_dir.npz", npz([("d/", b""), ("d/x.npy", npy("<f8", (2,), f8x2))]))
    write("npz", "not_npy_entry.npz", npz([("notes.txt", b"hello")]))
    write("npz", "bad_npy_entry.npz", npz([("x.npy", npy("<f8", (5,), f8x2))], zipfile.ZIP_DEFLATED))
    cut = npz(mixed)
    write("npz", "cut.npz", cut[: len(cut) // 2])

    with open(os.path.join(FIXTURES, "attention", "basic", "in", "config.json")) as f:
        basic = json.load(f)
    for case in ("basic", "kvdim", "unbatched_f32"):
        shutil.copyfile(os.path.join(FIXTURES, "attention", case, "in", "config.json"),
                        os.path.join(HERE, "config", case + ".json"))
    variants = {
        "indivisible.json": dict(basic, embed_dim=6, num_heads=4),
        "unknown_field.json": dict(basic, dropout=0.1),
        "wrong_types.json": dict(basic, bias=1, kdim="3", num_heads=2.0),
        "huge.json": dict(basic, embed_dim=18446744073709551615, vdim=-9223372036854775808),
    }
    for name, cfg in variants.items():
        write("config", name, json.dumps(cfg).encode())
    write("config", "nested_value.json", json.dumps(dict(basic, bias=[[{"a": [1]}]], kdim={"b": None})).encode())
    write("config", "not_object.json", b'[{"embed_dim": 4}, null, 1e400]')
    write("config", "malformed.json", b'{"embed_dim": 4, "num_heads": \xff')


if __name__ == "__main__":
    main()
