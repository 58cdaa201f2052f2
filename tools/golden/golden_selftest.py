"""Self-test of the codecs (numpy only; torch when present).

Part of tools/golden/make_golden.py (see its docstring)."""

import os
import struct

import numpy as np

from golden_common import log
from golden_formats import E4M3_POS, E4M3_VALUES, FP4_GRID, FP4_VALUES, encode_e4m3, quant_fp8_block, quant_mxfp4, round_bf16
from golden_safetensors import decode_entry, ent_bf16, ent_f32, ent_i64, read_safetensors, write_safetensors


def selftest(torch=None):
    rng = np.random.default_rng(7)
    # e4m3: every finite code round-trips (negative zero canonicalises to 0).
    for c in range(256):
        if np.isnan(E4M3_VALUES[c]):
            continue
        got = int(encode_e4m3(np.array([E4M3_VALUES[c]]))[0])
        assert got == (0 if c == 0x80 else c), (c, got)
    # e4m3: nearest with ties to even, against brute force (incl. exact midpoints).
    mids = (E4M3_POS[1:] + E4M3_POS[:-1]) / 2
    xs = np.concatenate([rng.uniform(-448, 448, 20000), rng.normal(0, 0.01, 20000), mids, -mids])
    codes = encode_e4m3(xs)
    for x, c in zip(xs, codes):
        d = np.abs(np.abs(x) - E4M3_POS)
        best = np.flatnonzero(d == d.min())
        want = best[0] if len(best) == 1 else [b for b in best if b % 2 == 0][0]
        got = int(c) & 0x7F
        assert got == want, (x, got, want)
        assert (int(c) >> 7) == (1 if (x < 0 and want != 0) else 0)
    # FP8 block: cropped edges, dequant within half an ulp, scale exponent minimal.
    w = rng.normal(0, 0.05, (200, 300)).astype(np.float32)
    codes, sb, deq = quant_fp8_block(w)
    assert codes.shape == (200, 300) and sb.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            e = int(sb[i, j]) - 127
            assert 448 * 2.0 ** e >= np.abs(blk).max() > 448 * 2.0 ** (e - 1)
    rel = np.abs(deq - w) / np.maximum(np.abs(w), 2.0 ** -9 * np.abs(w).max())
    assert rel.max() <= 2.0 ** -4 + 1e-6, rel.max()
    ents = {"a.weight": ("F8_E4M3", codes.shape, codes.tobytes()), "a.scale": ("F8_E8M0", sb.shape, sb.tobytes())}
    assert np.array_equal(decode_entry(ents, "a.weight"), deq)
    # MXFP4: brute force, ties to even, packing.
    w = rng.normal(0, 0.05, (64, 96)).astype(np.float32)
    w[0, :32] = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4) * -1.0  # exact ties, amax 6
    packed, sb, deq = quant_mxfp4(w)
    assert packed.shape == (64, 48) and sb.shape == (64, 3)
    assert np.allclose(deq[0, :8], -np.array([0, 1, 1, 2, 2, 4, 4, 6])), deq[0, :8]
    for n in range(64):
        for kb in range(3):
            blk = w[n, kb * 32:(kb + 1) * 32].astype(np.float64)
            e = int(sb[n, kb]) - 127
            assert 6 * 2.0 ** e >= np.abs(blk).max() > 6 * 2.0 ** (e - 1)
            for kk in range(32):
                q = abs(blk[kk]) / 2.0 ** e
                d = np.abs(q - FP4_GRID)
                best = np.flatnonzero(d == d.min())
                want = best[0] if len(best) == 1 else [b for b in best if b % 2 == 0][0]
                k = kb * 32 + kk
                code = (packed[n, k // 2] >> (4 * (k % 2))) & 0xF
                assert (code & 7) == want, (n, k, code, want)
                assert deq[n, k] == FP4_VALUES[code] * 2.0 ** e
    ents = {"b.weight": ("I8", packed.shape, packed.tobytes()), "b.scale": ("F8_E8M0", sb.shape, sb.tobytes())}
    assert np.array_equal(decode_entry(ents, "b.weight"), deq)
    # BF16 round to nearest even.
    xs = np.concatenate([rng.normal(0, 1, 5000), rng.normal(0, 1e-3, 5000)]).astype(np.float32)
    bits, vals = round_bf16(xs)
    for x, b, v in zip(xs, bits, vals):
        u = int(np.array([x], np.float32).view(np.uint32)[0])
        lo_bits = u >> 16
        rem = u & 0xFFFF
        want = lo_bits + (1 if (rem > 0x8000 or (rem == 0x8000 and lo_bits & 1)) else 0)
        assert int(b) == want
    # writer / reader round trip.
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.safetensors")
        e1, _ = ent_bf16(np.arange(6, dtype=np.float32).reshape(2, 3))
        ents2 = {"x": ent_f32(np.ones((3, 1))), "y": ent_i64(np.arange(5)), "z": e1,
                 "q": ("F8_E4M3", (2, 2), bytes([1, 2, 3, 4]))}
        write_safetensors(p, ents2, {"k": "v"})
        back = read_safetensors(p)
        assert set(back) == set(ents2) and all(back[k] == ents2[k] for k in ents2)
        n = struct.unpack("<Q", open(p, "rb").read(8))[0]
        assert n % 8 == 0
    # Optional: compare the e4m3 encoder with torch's own cast.
    if torch is not None and hasattr(torch, "float8_e4m3fn"):
        xs = np.concatenate([rng.uniform(-448, 448, 100000), rng.normal(0, 1e-2, 100000),
                             (E4M3_POS[1:] + E4M3_POS[:-1]) / 2]).astype(np.float32)
        mine = E4M3_VALUES[encode_e4m3(xs)]
        theirs = torch.from_numpy(xs).to(torch.float8_e4m3fn).to(torch.float64).numpy()
        bad = int((mine != theirs).sum())
        log(f"selftest: e4m3 encoder vs torch float8_e4m3fn cast: {bad} mismatches of {len(xs)}")
    log("selftest: codecs OK")
