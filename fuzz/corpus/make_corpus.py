#!/usr/bin/env python3
"""Regenerates the fuzzing seed corpus (standard library only; the fuzzers never need python).

Run from anywhere: python3 fuzz/corpus/make_corpus.py
  npy/     numpy-written fixtures from tests/fixtures/io/npy, plus hand-made valid and broken images
  npz/     numpy-written fixtures from tests/fixtures/io/npz, plus small stored/deflated/broken archives
  config/  the attention configs of tests/fixtures/io/attention, plus broken ones
  safetensors/  hand-made files of every dtype, and broken ones
  bpe/     small BPE vocabularies and merges (vocab.json, a zero byte, merges.txt), and broken ones
  gpt2_config/  GPT-2 folders' config.json (the test fixture's, GPT-2 small's), plus broken ones
  llama_config/ Llama folders' config.json (the test fixture's, Llama 2 7B's, TinyLlama's), plus broken ones
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


def safetensors(tensors, data, metadata=None, pad=True):
    """A .safetensors image: {name: (dtype, shape, begin, end)} as the header, then the data."""
    header = {"__metadata__": metadata} if metadata is not None else {}
    for name, (dtype, shape, begin, end) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def byte_vocab(extra):
    """GPT-2's 256 byte characters as ids 0..255 (in byte order), then the extra tokens."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    vocab, n = {}, 256
    for b in range(256):
        if b in printable:
            vocab[chr(b)] = b
        else:
            vocab[chr(n)] = b
            n += 1
    for token in extra:
        vocab[token] = len(vocab)
    return vocab


def main():
    for folder in ("npy", "npz", "config", "safetensors", "bpe", "gpt2_config", "llama_config"):
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

    shutil.copyfile(os.path.join(FIXTURES, "..", "gpt2_folder", "config.json"), os.path.join(HERE, "gpt2_config", "tiny.json"))
    small = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
             "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
             "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
             "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
             "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
             "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
             "vocab_size": 50257}
    gpt2_variants = {
        "gpt2_small.json": small,
        "no_bias_erf.json": dict(small, bias=False, activation_function="gelu"),
        "indivisible.json": dict(small, n_head=7),
        "wrong_types.json": dict(small, n_layer="12", bias=1, layer_norm_epsilon="1e-5", scale_attn_weights=0),
        "other_model.json": dict(small, model_type="llama", activation_function="silu", layer_norm_epsilon=1e-6),
        "n_inner.json": dict(small, n_inner=1024, tie_word_embeddings=False),
        "huge.json": dict(small, n_embd=18446744073709551615, n_positions=-1, vocab_size=1e300),
    }
    for name, cfg in gpt2_variants.items():
        write("gpt2_config", name, json.dumps(cfg).encode())
    write("gpt2_config", "duplicate_key.json", b'{"n_layer": 2, "n_head": 2, "n_embd": 16, "n_layer": 3}')
    write("gpt2_config", "not_object.json", b'[{"n_layer": 2}, null, 1e400]')
    write("gpt2_config", "malformed.json", b'{"n_layer": 2, "n_head": \xff')

    shutil.copyfile(os.path.join(FIXTURES, "..", "llama_folder", "config.json"), os.path.join(HERE, "llama_config", "tiny.json"))
    llama7b = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
               "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
               "max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
               "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16", "vocab_size": 32000}
    llama_variants = {
        "llama2_7b.json": llama7b,
        "tinyllama.json": dict(llama7b, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                               num_key_value_heads=4, max_position_embeddings=2048, rope_theta=10000.0),
        "defaults.json": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "vocab_size": 100},
        "rope_scaling.json": dict(llama7b, rope_scaling={"type": "linear", "factor": 2.0}),
        "indivisible.json": dict(llama7b, num_key_value_heads=5),
        "odd_head.json": dict(llama7b, hidden_size=96, num_attention_heads=32),
        "wrong_types.json": dict(llama7b, hidden_size="4096", tie_word_embeddings=1, rms_norm_eps="1e-5"),
        "other_model.json": dict(llama7b, model_type="mistral", hidden_act="gelu", attention_bias=True),
        "huge.json": dict(llama7b, hidden_size=18446744073709551615, rope_theta=-1, vocab_size=1e300),
    }
    for name, cfg in llama_variants.items():
        write("llama_config", name, json.dumps(cfg).encode())
    write("llama_config", "duplicate_key.json", b'{"model_type": "llama", "hidden_size": 64, "hidden_size": 32}')
    write("llama_config", "malformed.json", b'{"model_type": "llama", "hidden_size": \xff')

    every = (struct.pack("<d", 0.5) + struct.pack("<3H", 0x3C00, 0x7BFF, 0x0001) + struct.pack("<2H", 0x3F80, 0xC040)
             + struct.pack("<2i", -5, 7) + bytes([0, 255, 0, 1]) + struct.pack("<q", -9) + struct.pack("<f", 2.5))
    layout = {"f64": ("F64", (), 0, 8), "f16": ("F16", (3,), 8, 14), "bf16": ("BF16", (2, 1), 14, 18),
              "i32": ("I32", (2,), 18, 26), "u8": ("U8", (2,), 26, 28), "bool": ("BOOL", (2,), 28, 30),
              "i64": ("I64", (1,), 30, 38), "f32": ("F32", (1, 1), 38, 42)}
    write("safetensors", "every_dtype.safetensors", safetensors(layout, every, {"format": "pt"}))
    write("safetensors", "empty.safetensors", safetensors({}, b""))
    write("safetensors", "zero_size.safetensors", safetensors({"z": ("F32", (0, 3), 0, 0)}, b""))
    write("safetensors", "overlap.safetensors", safetensors(dict(layout, i64=("I64", (1,), 28, 36)), every))
    write("safetensors", "gap.safetensors", safetensors({"a": ("F32", (1,), 4, 8)}, bytes(8)))
    write("safetensors", "wrong_length.safetensors", safetensors({"a": ("F32", (3,), 0, 8)}, bytes(8)))
    write("safetensors", "unknown_dtype.safetensors", safetensors({"a": ("F8_E4M3", (8,), 0, 8)}, bytes(8)))
    write("safetensors", "huge_shape.safetensors", safetensors({"a": ("F64", (4294967296, 4294967296), 0, 8)}, bytes(8)))
    write("safetensors", "past_end.safetensors", struct.pack("<Q", 1000) + b"{}")
    write("safetensors", "duplicate.safetensors",
          struct.pack("<Q", 97) + b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
          b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}' + b"\x01")
    write("safetensors", "truncated.safetensors", safetensors(layout, every)[:60])

    vocab = byte_vocab(["ab", "abc", "\u0120a", "<|endoftext|>"])
    merges = "#version: 0.2\na b\nab c\n\u0120 a\n"
    bpe = lambda v, m: json.dumps(v, ensure_ascii=False).encode() + b"\0" + m.encode()
    write("bpe", "small.bin", bpe(vocab, merges) + " abc<|endoftext|>'s  \n\n x ".encode() + b"\xff\xe2\x82")
    write("bpe", "no_byte.bin", bpe({"a": 0}, merges))
    write("bpe", "bad_merge.bin", bpe(vocab, "#version: 0.2\nb c\n"))
    write("bpe", "bad_line.bin", bpe(vocab, "a b c\n"))
    write("bpe", "same_id.bin", bpe(dict(vocab, ab=7), merges))
    write("bpe", "large_id.bin", bpe(dict(vocab, ab=2000000000), merges))  # once an out-of-memory


if __name__ == "__main__":
    main()
