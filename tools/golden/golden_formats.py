"""Number formats of the official checkpoint (numpy only): FP8 e4m3 with UE8M0 block scales,
MXFP4 with UE8M0 1x32 scales, bf16 rounding.

Part of tools/golden/make_golden.py (see its docstring)."""

import numpy as np


def _e4m3_values():
    vals = np.zeros(256, np.float64)
    for c in range(256):
        sign = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            vals[c] = np.nan
        elif e == 0:
            vals[c] = sign * (m / 8.0) * 2.0 ** -6
        else:
            vals[c] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return vals


E4M3_VALUES = _e4m3_values()          # code -> value (float64), 0x7F/0xFF are NaN
E4M3_POS = E4M3_VALUES[:127].copy()    # codes 0..126: 0 .. 448, strictly increasing
FP4_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FP4_VALUES = np.concatenate([FP4_GRID, -FP4_GRID])  # code -> value, bit 3 = sign


def encode_e4m3(x):
    """float array with |x| <= 448 -> e4m3fn codes (uint8), round to nearest, ties to even."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    if np.isnan(a).any() or (a > 448.0).any():
        raise ValueError("encode_e4m3: value out of range")
    hi = np.minimum(np.searchsorted(E4M3_POS, a, side="left"), 126)  # POS[hi-1] < a <= POS[hi]
    lo = np.maximum(hi - 1, 0)
    d_lo = a - E4M3_POS[lo]
    d_hi = E4M3_POS[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    neg = np.signbit(x) & (code != 0)
    return (code | np.where(neg, 0x80, 0).astype(np.uint8)).astype(np.uint8)


def pow2_exponent(amax, qmax):
    """Smallest integer e with qmax * 2**e >= amax (0 where amax == 0): the UE8M0 scale exponent."""
    amax = np.asarray(amax, np.float64)
    safe = np.where(amax > 0, amax, qmax)
    e = np.ceil(np.log2(safe / qmax))
    e = np.where(qmax * np.exp2(e) < safe, e + 1, e)
    e = np.where(qmax * np.exp2(e - 1) >= safe, e - 1, e)
    e = np.where(amax > 0, e, 0).astype(np.int64)
    if (e < -127).any() or (e > 127).any():
        raise ValueError("scale exponent outside the UE8M0 range")
    return e


def quant_fp8_block(w, block=128):
    """[N, K] -> (e4m3 codes [N, K] uint8, UE8M0 bytes [ceil(N/128), ceil(K/128)], dequantised f32)."""
    w = np.asarray(w, np.float32)
    n, k = w.shape
    nb, kb = -(-n // block), -(-k // block)
    codes = np.zeros((n, k), np.uint8)
    sbytes = np.zeros((nb, kb), np.uint8)
    deq = np.zeros((n, k), np.float32)
    for i in range(nb):
        for j in range(kb):
            sl = (slice(i * block, (i + 1) * block), slice(j * block, (j + 1) * block))
            blk = w[sl].astype(np.float64)
            e = int(pow2_exponent(np.abs(blk).max(), 448.0))
            c = encode_e4m3(blk / 2.0 ** e)
            codes[sl] = c
            sbytes[i, j] = e + 127
            deq[sl] = (E4M3_VALUES[c] * 2.0 ** e).astype(np.float32)
    return codes, sbytes, deq


def quant_mxfp4(w, block=32):
    """[N, K] -> (packed I8 [N, K/2] low nibble = even k, UE8M0 bytes [N, K/32], dequantised f32)."""
    w = np.asarray(w, np.float32)
    n, k = w.shape
    if k % block:
        raise ValueError(f"MXFP4 needs K % {block} == 0, got K={k}")
    b = w.astype(np.float64).reshape(n, k // block, block)
    e = pow2_exponent(np.abs(b).max(-1), 6.0)
    q = b / np.exp2(e)[..., None]
    d = np.abs(np.abs(q)[..., None] - FP4_GRID)
    cand = d == d.min(-1, keepdims=True)
    even = cand & (np.arange(8) % 2 == 0)
    mag = np.where(even.any(-1), even.argmax(-1), cand.argmax(-1))
    code = (mag + np.where((q < 0) & (mag != 0), 8, 0)).reshape(n, k).astype(np.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    deq = (FP4_VALUES[code].reshape(n, k // block, block) * np.exp2(e)[..., None]).reshape(n, k)
    return packed, (e + 127).astype(np.uint8), deq.astype(np.float32)


def round_bf16(x):
    """f32 -> (bf16 bit patterns uint16, the same values as f32), round to nearest even."""
    x = np.ascontiguousarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    vals = (bits.astype(np.uint32) << 16).view(np.float32)
    return bits, vals
