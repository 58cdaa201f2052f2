"""safetensors written and read here (F8_E4M3 / F8_E8M0 / I8 packing under our control).

Part of tools/golden/make_golden.py (see its docstring)."""

import json
import struct

import numpy as np

from golden_formats import E4M3_VALUES, FP4_VALUES, round_bf16


DTYPE_SIZE = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "F16": 2,
              "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1}


def ent_f32(a):
    a = np.ascontiguousarray(a, "<f4")
    return ("F32", tuple(a.shape), a.tobytes())


def ent_i64(a):
    a = np.ascontiguousarray(a, "<i8")
    return ("I64", tuple(a.shape), a.tobytes())


def ent_bf16(a):
    bits, vals = round_bf16(a)
    return ("BF16", tuple(bits.shape), bits.astype("<u2").tobytes()), vals


def write_safetensors(path, entries, metadata=None):
    # Largest element size first, so every tensor's offset is a multiple of its element size.
    names = sorted(entries, key=lambda n: (-DTYPE_SIZE[entries[n][0]], n))
    header, off = {}, 0
    for n in names:
        dt, shape, data = entries[n]
        want = DTYPE_SIZE[dt] * int(np.prod(shape, dtype=np.int64))
        if len(data) != want:
            raise ValueError(f"{n}: {len(data)} bytes for {dt}{list(shape)} (want {want})")
        header[n] = {"dtype": dt, "shape": [int(s) for s in shape], "data_offsets": [off, off + len(data)]}
        off += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for n in names:
            f.write(entries[n][2])
    return 8 + len(hb) + off


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = (h["dtype"], tuple(h["shape"]), data[8 + n + a:8 + n + b])
    return out


def decode_entry(entries, name):
    """Official tensor -> float32 (or int64) numpy array, dequantising FP8/MXFP4 with its scale."""
    dt, shape, data = entries[name]
    if dt == "F32":
        return np.frombuffer(data, "<f4").reshape(shape)
    if dt == "I64":
        return np.frombuffer(data, "<i8").reshape(shape)
    if dt == "BF16":
        return (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    sname = name[:-len("weight")] + "scale"
    sdt, sshape, sdata = entries[sname]
    assert sdt == "F8_E8M0"
    sexp = np.frombuffer(sdata, np.uint8).reshape(sshape).astype(np.int64) - 127
    if dt == "F8_E4M3":
        n, k = shape
        vals = E4M3_VALUES[np.frombuffer(data, np.uint8).reshape(shape)]
        scale = np.exp2(sexp).repeat(128, 0)[:n].repeat(128, 1)[:, :k]
        return (vals * scale).astype(np.float32)
    if dt == "I8":
        n, k2 = shape
        b = np.frombuffer(data, np.uint8).reshape(shape)
        codes = np.stack([b & 0xF, b >> 4], -1).reshape(n, 2 * k2)
        return (FP4_VALUES[codes] * np.exp2(sexp).repeat(32, 1)).astype(np.float32)
    raise ValueError(f"{name}: cannot decode dtype {dt}")
