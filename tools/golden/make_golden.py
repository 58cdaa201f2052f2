#!/usr/bin/env python3
"""Golden fixtures for dsv4, produced by Hugging Face transformers' DeepSeek-V4.

For every tiny configuration this script
  * builds a random DeepseekV4ForCausalLM (float32, eager attention, eager experts),
  * fills *every* weight from its own seeded generator (numpy PCG64, seeded per tensor name),
  * encodes the weights in the official DeepSeek-V4 checkpoint names/layouts (BF16, F32,
    FP8 e4m3 + UE8M0 128x128 block scales, MXFP4 + UE8M0 1x32 scales) and loads the values
    that the file encodes (the dequantised ones) back into the HF model,
  * records FP32 reference outputs (logits, per-layer outputs, indexer selections, greedy
    continuations) and runs self-consistency checks (prefix / chunked / cached decoding).

Requires torch, transformers >= 5.8 (fixtures made with 5.17.0) and numpy. The codecs and the
safetensors writer need numpy only: `make_golden.py --selftest` checks them without torch.
See tests/data/golden/README.md for the produced files.
"""

import argparse
import json
import os
import re
import struct
import sys
import tarfile
import time
import traceback
import zlib

import numpy as np

T0 = time.time()


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


# ----------------------------------------------------------------------------------------------
# Number formats (numpy only)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# safetensors (own writer/reader: F8_E4M3 / F8_E8M0 / I8 packing under our control)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Configurations
# ----------------------------------------------------------------------------------------------

LAYER_TYPES_5 = ["sliding_attention", "sliding_attention", "compressed_sparse_attention",
                 "heavily_compressed_attention", "compressed_sparse_attention"]
MLP_TYPES_5 = ["hash_moe", "hash_moe", "hash_moe", "moe", "moe"]


def spec_tiny_kwargs():
    """The spec §8.2 configuration (verified on transformers 5.17.0), except index_n_heads 16 (with 8 heads
    about 1 query in 256 has only negative head weights, and its top-k then picks among exact-zero
    scores: a tie) and moe_intermediate_size 32 (keeps the committed fixtures small)."""
    return dict(
        vocab_size=512, hidden_size=128, num_hidden_layers=5,
        layer_types=list(LAYER_TYPES_5), mlp_layer_types=list(MLP_TYPES_5),
        num_attention_heads=8, num_key_value_heads=1, head_dim=64, partial_rotary_factor=0.25,
        q_lora_rank=64, o_groups=4, o_lora_rank=32,
        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1, moe_intermediate_size=32,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        sliding_window=16, index_n_heads=16, index_head_dim=32, index_topk=4,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=1024,
        swiglu_limit=10.0, routed_scaling_factor=1.5, scoring_func="sqrtsoftplus", norm_topk_prob=True,
        tie_word_embeddings=False, num_nextn_predict_layers=0, bos_token_id=0, eos_token_id=1,
    )


def spec_real_window_kwargs():
    kw = spec_tiny_kwargs()
    kw.update(
        hidden_size=64, num_attention_heads=4, head_dim=128, partial_rotary_factor=0.5,  # rope dims 64 (real)
        q_lora_rank=32, o_groups=2, o_lora_rank=32,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        sliding_window=128, index_n_heads=16, index_head_dim=128, index_topk=512,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=1048576,
    )
    return kw


CONFIGS = {
    # storage: "plain" = BF16 matrices (+ F32 dense attention matrices where f32_attn), "quant" = FP8/MXFP4
    "tiny_f32": dict(kwargs=spec_tiny_kwargs, storage="plain", f32_attn=False, seed=1001),
    "tiny_quant": dict(kwargs=spec_tiny_kwargs, storage="quant", f32_attn=False, seed=2002),
    "tiny_real_window": dict(kwargs=spec_real_window_kwargs, storage="plain", f32_attn=False, seed=3003),
}

PROMPT_LEN = 2200
PROMPT_SEED = 4242
LOGIT_LENGTHS = sorted(set(
    list(range(1, 11)) + list(range(14, 21)) + list(range(30, 41)) + list(range(44, 53))
    + list(range(60, 71)) + list(range(120, 141)) + list(range(250, 263)) + list(range(508, 521))
    + list(range(1020, 1031)) + list(range(2040, 2061)) + [2100, 2150, 2199, 2200]))
PROBE_POSITIONS = [0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 18, 19, 20, 31, 63, 127, 128, 255, 256,
                   511, 1023, 2047, 2050, 2051, 2052, 2199]
GREEDY_PROMPTS = [37, 300, 2040]
GREEDY_NEW = 24
CHUNK_SCHEDULES = {
    "10+17+decode37": [10, 17] + [1] * 37,
    "decode40": [1] * 40,
    "7+16+37+decode4": [7, 16, 37] + [1] * 4,
    "100+29+1+1+127+3": [100, 29, 1, 1, 127, 3],
    "1000+1000+45+decode15": [1000, 1000, 45] + [1] * 15,
}
PREFIX_CHECK_LENGTHS = [1, 5, 20, 128, 129, 257, 2052, 2200]
MAX_ATTEMPTS = 40
ATTEMPT_SECONDS = 30.0      # per config, for the seed search (the best attempt is kept)
ROUTER_MARGIN_MIN = 1e-5    # absolute, on sqrtsoftplus scores + bias
INDEXER_MARGIN_MIN = 1e-5   # relative to the row's largest |score|
COMPRESSED_ROWS = 128       # compressed entries stored per compressor (the first ones)
BOOST = 25.0                # clamp exercise: some experts get w1/w3 x BOOST and w2 / BOOST


# ----------------------------------------------------------------------------------------------
# Names: HF module paths <-> official checkpoint names (spec §4.3)
# ----------------------------------------------------------------------------------------------

_L = r"^model\.layers\.(\d+)\."
HF_TO_OFFICIAL = [(re.compile(p), t) for p, t in [
    (r"^model\.embed_tokens\.weight$", "embed.weight"),
    (r"^lm_head\.weight$", "head.weight"),
    (r"^model\.norm\.weight$", "norm.weight"),
    (r"^model\.hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
    (_L + r"input_layernorm\.weight$", r"layers.\1.attn_norm.weight"),
    (_L + r"post_attention_layernorm\.weight$", r"layers.\1.ffn_norm.weight"),
    (_L + r"attn_hc\.(fn|base|scale)$", r"layers.\1.hc_attn_\2"),
    (_L + r"ffn_hc\.(fn|base|scale)$", r"layers.\1.hc_ffn_\2"),
    (_L + r"self_attn\.sinks$", r"layers.\1.attn.attn_sink"),
    (_L + r"self_attn\.q_a_proj\.weight$", r"layers.\1.attn.wq_a.weight"),
    (_L + r"self_attn\.q_a_norm\.weight$", r"layers.\1.attn.q_norm.weight"),
    (_L + r"self_attn\.q_b_proj\.weight$", r"layers.\1.attn.wq_b.weight"),
    (_L + r"self_attn\.kv_proj\.weight$", r"layers.\1.attn.wkv.weight"),
    (_L + r"self_attn\.kv_norm\.weight$", r"layers.\1.attn.kv_norm.weight"),
    (_L + r"self_attn\.o_a_proj\.weight$", r"layers.\1.attn.wo_a.weight"),
    (_L + r"self_attn\.o_b_proj\.weight$", r"layers.\1.attn.wo_b.weight"),
    (_L + r"self_attn\.compressor\.kv_proj\.weight$", r"layers.\1.attn.compressor.wkv.weight"),
    (_L + r"self_attn\.compressor\.gate_proj\.weight$", r"layers.\1.attn.compressor.wgate.weight"),
    (_L + r"self_attn\.compressor\.position_bias$", r"layers.\1.attn.compressor.ape"),
    (_L + r"self_attn\.compressor\.kv_norm\.weight$", r"layers.\1.attn.compressor.norm.weight"),
    (_L + r"self_attn\.compressor\.indexer\.q_b_proj\.weight$", r"layers.\1.attn.indexer.wq_b.weight"),
    (_L + r"self_attn\.compressor\.indexer\.(?:scorer\.)?weights_proj\.weight$",
     r"layers.\1.attn.indexer.weights_proj.weight"),
    (_L + r"self_attn\.compressor\.indexer\.kv_proj\.weight$", r"layers.\1.attn.indexer.compressor.wkv.weight"),
    (_L + r"self_attn\.compressor\.indexer\.gate_proj\.weight$",
     r"layers.\1.attn.indexer.compressor.wgate.weight"),
    (_L + r"self_attn\.compressor\.indexer\.position_bias$", r"layers.\1.attn.indexer.compressor.ape"),
    (_L + r"self_attn\.compressor\.indexer\.kv_norm\.weight$",
     r"layers.\1.attn.indexer.compressor.norm.weight"),
    (_L + r"mlp\.gate\.weight$", r"layers.\1.ffn.gate.weight"),
    (_L + r"mlp\.gate\.e_score_correction_bias$", r"layers.\1.ffn.gate.bias"),
    (_L + r"mlp\.gate\.tid2eid$", r"layers.\1.ffn.gate.tid2eid"),
    (_L + r"mlp\.shared_experts\.gate_proj\.weight$", r"layers.\1.ffn.shared_experts.w1.weight"),
    (_L + r"mlp\.shared_experts\.up_proj\.weight$", r"layers.\1.ffn.shared_experts.w3.weight"),
    (_L + r"mlp\.shared_experts\.down_proj\.weight$", r"layers.\1.ffn.shared_experts.w2.weight"),
]]
HF_GATE_UP = re.compile(_L + r"mlp\.experts\.gate_up_proj$")
HF_DOWN = re.compile(_L + r"mlp\.experts\.down_proj$")

FP8_NAMES = re.compile(r"^layers\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.wq_b"
                       r"|ffn\.shared_experts\.w[123])\.weight$")
EXPERT_NAMES = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.w([123])\.weight$")
DENSE_ATTN_NAMES = re.compile(r"^layers\.\d+\.attn\.(wq_a|wq_b|wkv|wo_a|wo_b)\.weight$")
F32_NAMES = re.compile(r"(^hc_head_(fn|base|scale)$|\.hc_(attn|ffn)_(fn|base|scale)$|\.attn_sink$|\.ape$"
                       r"|\.gate\.bias$)")


def official_plan(hf_shapes):
    """HF state-dict shapes -> (official name -> shape, HF key -> loader recipe)."""
    plan, recipes, unknown = {}, {}, []
    for key, shape in hf_shapes.items():
        m = HF_GATE_UP.match(key)
        if m:
            n_exp, two_i, h = shape
            i_dim = two_i // 2
            for e in range(n_exp):
                plan[f"layers.{m.group(1)}.ffn.experts.{e}.w1.weight"] = (i_dim, h)
                plan[f"layers.{m.group(1)}.ffn.experts.{e}.w3.weight"] = (i_dim, h)
            recipes[key] = ("gate_up", int(m.group(1)), n_exp)
            continue
        m = HF_DOWN.match(key)
        if m:
            n_exp, h, i_dim = shape
            for e in range(n_exp):
                plan[f"layers.{m.group(1)}.ffn.experts.{e}.w2.weight"] = (h, i_dim)
            recipes[key] = ("down", int(m.group(1)), n_exp)
            continue
        for rx, tmpl in HF_TO_OFFICIAL:
            if rx.match(key):
                name = rx.sub(tmpl, key)
                plan[name] = tuple(shape)
                recipes[key] = ("plain", name)
                break
        else:
            unknown.append(key)
    if unknown:
        raise RuntimeError(f"unmapped HF state-dict keys: {unknown}")
    return plan, recipes


def storage_kind(name, cfgspec):
    if name.endswith(".gate.tid2eid"):
        return "i64"
    if F32_NAMES.search(name):
        return "f32"
    if cfgspec["storage"] == "quant":
        if FP8_NAMES.match(name):
            return "fp8"
        if EXPERT_NAMES.match(name):
            return "fp4"
    if cfgspec.get("f32_attn") and DENSE_ATTN_NAMES.match(name):
        return "f32"
    return "bf16"


def random_value(name, shape, seed, n_experts):
    """Deterministic per-name random values (independent of the order tensors are visited in)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if name.endswith(".gate.tid2eid"):
        rows, k = shape
        return np.stack([rng.permutation(n_experts)[:k] for _ in range(rows)]).astype(np.int64)
    if name.endswith("attn_sink"):
        v = rng.normal(0.5, 1.0, shape)
    elif name.endswith(".ape"):
        v = rng.normal(0.0, 0.5, shape)
    elif re.search(r"hc_(attn|ffn|head)_base$", name):
        v = rng.normal(0.0, 0.5, shape)
    elif re.search(r"hc_(attn|ffn|head)_scale$", name):
        v = rng.uniform(0.5, 1.5, shape)
    elif re.search(r"hc_(attn|ffn|head)_fn$", name):
        v = rng.normal(0.0, 0.02, shape)
    elif name.endswith(".gate.bias"):
        v = rng.normal(0.0, 0.1, shape)
    elif name.endswith(".ffn.gate.weight"):
        v = rng.normal(0.0, 0.1, shape)  # wider router logits: fewer near-ties in the expert top-k
    elif name.endswith("norm.weight"):
        v = 1.0 + 0.1 * rng.normal(0.0, 1.0, shape)
    else:
        v = rng.normal(0.0, 0.02, shape)
        # Exercise the SwiGLU clamp: every 4th routed expert (e % 4 == 1) and the shared expert of
        # odd layers get large w1/w3 (pre-activations beyond +-10) and a matching small w2.
        m = EXPERT_NAMES.match(name)
        ms = re.match(r"^layers\.(\d+)\.ffn\.shared_experts\.w([123])\.weight$", name)
        boosted, which = False, None
        if m and int(m.group(2)) % 4 == 1:
            boosted, which = True, m.group(3)
        if ms and int(ms.group(1)) % 2 == 1:
            boosted, which = True, ms.group(2)
        if boosted:
            v = v * (BOOST if which in ("1", "3") else 1.0 / BOOST)
    return v.astype(np.float32)


def encode_official(name, value, kind):
    """-> (safetensors entries, the float32 values the file encodes)."""
    if kind == "i64":
        return {name: ent_i64(value)}, value
    if kind == "f32":
        return {name: ent_f32(value)}, np.asarray(value, np.float32)
    if kind == "bf16":
        e, vals = ent_bf16(value)
        return {name: e}, vals
    sname = name[:-len("weight")] + "scale"
    if kind == "fp8":
        codes, sbytes, deq = quant_fp8_block(value)
        return {name: ("F8_E4M3", codes.shape, codes.tobytes()),
                sname: ("F8_E8M0", sbytes.shape, sbytes.tobytes())}, deq
    if kind == "fp4":
        packed, sbytes, deq = quant_mxfp4(value)
        return {name: ("I8", packed.shape, packed.tobytes()),
                sname: ("F8_E8M0", sbytes.shape, sbytes.tobytes())}, deq
    raise ValueError(kind)


def make_weights(hf_shapes, cfgspec, seed):
    plan, recipes = official_plan(hf_shapes)
    n_experts = max(s[0] for k, s in hf_shapes.items() if HF_GATE_UP.match(k))
    entries, values, kinds = {}, {}, {}
    for name in sorted(plan):
        kind = storage_kind(name, cfgspec)
        val = random_value(name, plan[name], seed, n_experts)
        ent, deq = encode_official(name, val, kind)
        entries.update(ent)
        values[name] = deq
        kinds[name] = kind
    return entries, values, kinds, recipes


def hf_tensor_values(recipes, values):
    """HF state-dict key -> numpy value assembled from the official (dequantised) values."""
    out = {}
    for key, r in recipes.items():
        if r[0] == "plain":
            out[key] = values[r[1]]
        elif r[0] == "gate_up":
            _, layer, n_exp = r
            out[key] = np.stack([np.concatenate([values[f"layers.{layer}.ffn.experts.{e}.w1.weight"],
                                                 values[f"layers.{layer}.ffn.experts.{e}.w3.weight"]], 0)
                                 for e in range(n_exp)])
        else:
            _, layer, n_exp = r
            out[key] = np.stack([values[f"layers.{layer}.ffn.experts.{e}.w2.weight"] for e in range(n_exp)])
    return out


# ----------------------------------------------------------------------------------------------
# Self-test of the codecs (numpy only)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# transformers side
# ----------------------------------------------------------------------------------------------

class Ctx:
    pass


def import_hf():
    import torch
    import transformers
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError:
        from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers import DynamicCache
    c = Ctx()
    c.torch, c.transformers = torch, transformers
    c.Config, c.Model, c.DynamicCache = DeepseekV4Config, DeepseekV4ForCausalLM, DynamicCache
    c.dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return c


def force_eager(model):
    for fn, arg in (("set_attn_implementation", "eager"), ("set_experts_implementation", "eager")):
        if hasattr(model, fn):
            try:
                getattr(model, fn)(arg)
            except Exception as e:  # noqa: BLE001
                log(f"  note: {fn} failed: {e!r}")
    seen = set()
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is None or id(c) in seen or not hasattr(c, "to_dict"):
            continue
        seen.add(id(c))
        for attr in ("_attn_implementation", "_experts_implementation"):
            try:
                setattr(c, attr, "eager")
            except Exception as e:  # noqa: BLE001
                log(f"  note: setting {attr} failed: {e!r}")
    return (getattr(model.config, "_attn_implementation", None),
            getattr(model.config, "_experts_implementation", None))


def build(hf, cfgspec, seed):
    torch = hf.torch
    cfg = hf.Config(**cfgspec["kwargs"]())
    torch.manual_seed(seed)
    model = hf.Model(cfg).to(torch.float32).eval()
    impl = force_eager(model)
    if model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("lm_head is tied to embed_tokens although tie_word_embeddings=False")
    sd = model.state_dict()
    hf_shapes = {k: tuple(v.shape) for k, v in sd.items()}
    entries, values, kinds, recipes = make_weights(hf_shapes, cfgspec, seed)
    hv = hf_tensor_values(recipes, values)
    with torch.no_grad():
        for k, v in hv.items():
            t = sd[k]
            if tuple(t.shape) != tuple(v.shape):
                raise RuntimeError(f"{k}: HF shape {tuple(t.shape)} vs generated {v.shape}")
            t.copy_(torch.from_numpy(np.ascontiguousarray(v)).to(t.dtype))
    # Verify: the model now holds exactly what the file encodes.
    sd = model.state_dict()
    for k, v in hv.items():
        got = sd[k].cpu().numpy()
        if not np.array_equal(got, v.astype(got.dtype)):
            raise RuntimeError(f"{k}: value in the model differs from the encoded value")
    model.to(hf.dev)
    return cfg, model, entries, kinds, impl


HOOK_ERRORS = {}


def safe_hook(label, fn):
    """Forward hook that records (instead of raising) its own errors."""
    def wrapped(m, a, o):
        try:
            fn(m, a, o)
        except Exception as e:  # noqa: BLE001
            if label not in HOOK_ERRORS:
                log(f"  hook {label} failed: {e!r}")
            HOOK_ERRORS.setdefault(label, repr(e)[:300])
    return wrapped


def first(o):
    return o[0] if isinstance(o, (tuple, list)) else o


def layer_parts(layer):
    attn = layer.self_attn
    comp = getattr(attn, "compressor", None)
    idx = getattr(comp, "indexer", None) if comp is not None else None
    scorer = getattr(idx, "scorer", None) if idx is not None else None
    return attn, comp, idx, scorer


def is_hash_layer(layer):
    return bool(getattr(layer.mlp, "is_hash", hasattr(layer.mlp.gate, "tid2eid")))


def margins_forward(hf, model, cfg, ids):
    """One use_cache=False forward; min top-k margins of the learned routers and the indexers."""
    torch = hf.torch
    res, hooks = {}, []
    seq = ids.shape[1]
    pos = torch.arange(seq, device=hf.dev)
    k_r = cfg.num_experts_per_tok
    rate = cfg.compress_rates["compressed_sparse_attention"]
    k_i = cfg.index_topk
    for li, layer in enumerate(model.model.layers):
        if not is_hash_layer(layer):
            gate = layer.mlp.gate

            def rhook(m, a, o, li=li):
                logits = o[0].float()
                sel = m.score_fn(logits) + m.e_score_correction_bias.float()
                top = sel.topk(k_r + 1, dim=-1).values
                gap = top[:, k_r - 1] - top[:, k_r]
                res[f"L{li}.router"] = (float(gap.min()), int(gap.argmin()))
            hooks.append(gate.register_forward_hook(safe_hook(f"margins.L{li}.router", rhook)))
        _, comp, idx, scorer = layer_parts(layer)
        if scorer is not None:
            def shook(m, a, o, li=li):
                s = o[0].float()  # [S, T]
                t = s.shape[-1]
                nc = (pos + 1) // rate
                valid = torch.arange(t, device=s.device)[None, :] < nc[:, None]
                rows = nc > k_i
                if t <= k_i or not bool(rows.any()):
                    res[f"L{li}.indexer"] = (float("inf"), -1)
                    return
                sm = s.masked_fill(~valid, float("-inf"))
                top = sm.topk(k_i + 1, dim=-1).values
                gap = top[:, k_i - 1] - top[:, k_i]
                scale = s.abs().masked_fill(~valid, 0).amax(-1).clamp_min(1e-30)
                rel = torch.where(rows, gap / scale, torch.full_like(gap, float("inf")))
                res[f"L{li}.indexer"] = (float(rel.min()), int(rel.argmin()))
            hooks.append(scorer.register_forward_hook(safe_hook(f"margins.L{li}.indexer", shook)))
        elif idx is not None:
            log("  warning: indexer has no 'scorer' submodule; indexer margins not checked")
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return res


def margin_score(res):
    worst = float("inf")
    for k, (v, _) in res.items():
        thr = ROUTER_MARGIN_MIN if k.endswith("router") else INDEXER_MARGIN_MIN
        worst = min(worst, v / thr)
    return worst


def capture_forward(hf, model, cfg, ids, positions):
    """Full use_cache=False forward with hooks; returns (logits [S, V], probes, clamp stats)."""
    torch = hf.torch
    probes, clamp, tmp, hooks = {}, {}, {}, []
    pt = torch.tensor(positions, device=hf.dev)
    lim = cfg.swiglu_limit

    def put(name, t):
        t = t.detach()
        probes[name] = t.cpu().numpy().astype(np.int64 if not t.is_floating_point() else np.float32)

    def add(mod, fn, label):
        if mod is None:
            HOOK_ERRORS.setdefault(label, "module not found")
            return
        hooks.append(mod.register_forward_hook(safe_hook(label, fn)))

    for li, layer in enumerate(model.model.layers):
        attn, comp, idx, scorer = layer_parts(layer)
        add(layer, lambda m, a, o, li=li: put(f"L{li}.out", first(o)[0, pt]), f"L{li}.out")
        for site, mod in (("hc_attn", getattr(layer, "attn_hc", None)), ("hc_ffn", getattr(layer, "ffn_hc", None))):
            def hc_hook(m, a, o, li=li, site=site):
                post, comb, collapsed = o
                put(f"L{li}.{site}.post", post[0, pt])
                put(f"L{li}.{site}.comb", comb[0, pt])
                put(f"L{li}.{site}.collapsed", collapsed[0, pt])
            add(mod, hc_hook, f"L{li}.{site}")
        add(getattr(layer, "input_layernorm", None), lambda m, a, o, li=li: put(f"L{li}.attn_norm_out", o[0, pt]),
            f"L{li}.attn_norm_out")
        add(attn, lambda m, a, o, li=li: put(f"L{li}.attn_out", first(o)[0, pt]), f"L{li}.attn_out")
        add(getattr(layer, "post_attention_layernorm", None),
            lambda m, a, o, li=li: put(f"L{li}.ffn_norm_out", o[0, pt]), f"L{li}.ffn_norm_out")
        add(getattr(layer.mlp, "shared_experts", None), lambda m, a, o, li=li: put(f"L{li}.shared_out", o[0, pt]),
            f"L{li}.shared_out")

        def gate_hook(m, a, o, li=li):
            logits, weights, indices = o[0], o[1], o[2]
            tmp[li] = indices
            ind = indices[pt].cpu().numpy().astype(np.int64)
            wts = weights[pt].detach().float().cpu().numpy()
            order = np.argsort(ind, axis=1, kind="stable")
            probes[f"L{li}.router.indices"] = np.take_along_axis(ind, order, 1)
            probes[f"L{li}.router.weights"] = np.take_along_axis(wts, order, 1)
            put(f"L{li}.router.logits", logits[pt])
        add(getattr(layer.mlp, "gate", None), gate_hook, f"L{li}.router")

        def mlp_hook(m, a, o, li=li):
            put(f"L{li}.ffn_out", o[0, pt])
            x = a[0].reshape(-1, a[0].shape[-1]).float()
            w = m.experts.gate_up_proj.float()
            i_dim = w.shape[1] // 2
            ind = tmp[li]
            gu = torch.einsum("sh,eoh->seo", x, w)
            sel = gu[torch.arange(x.shape[0], device=x.device)[:, None], ind]
            g, u = sel[..., :i_dim], sel[..., i_dim:]
            g2, u2 = m.shared_experts.gate_proj(x), m.shared_experts.up_proj(x)
            clamp[f"L{li}"] = dict(routed_gate_gt_limit=int((g > lim).sum()),
                                   routed_up_abs_gt_limit=int((u.abs() > lim).sum()),
                                   routed_values=int(g.numel()),
                                   shared_gate_gt_limit=int((g2 > lim).sum()),
                                   shared_up_abs_gt_limit=int((u2.abs() > lim).sum()),
                                   shared_values=int(g2.numel()))
        add(layer.mlp, mlp_hook, f"L{li}.ffn_out")

        if comp is not None:
            add(comp, lambda m, a, o, li=li: put(f"L{li}.compressor.kv", o[0][0, 0][:COMPRESSED_ROWS]),
                f"L{li}.compressor.kv")
        if idx is not None:
            add(idx, lambda m, a, o, li=li: put(f"L{li}.indexer.topk", first(o)[0, pt]), f"L{li}.indexer.topk")
            add(getattr(idx, "kv_norm", None),
                lambda m, a, o, li=li: put(f"L{li}.indexer.kv_prerope", o[0][:COMPRESSED_ROWS]),
                f"L{li}.indexer.kv_prerope")
        if scorer is not None:
            add(scorer, lambda m, a, o, li=li: put(f"L{li}.indexer.scores", o[0, pt]), f"L{li}.indexer.scores")
    add(getattr(model.model, "hc_head", None), lambda m, a, o: put("hc_head_out", o[0, pt]), "hc_head_out")
    add(model.model.norm, lambda m, a, o: put("final_hidden", o[0, pt]), "final_hidden")
    try:
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return out.logits[0].float(), probes, clamp


# ----------------------------------------------------------------------------------------------
# The MTP block (spec §2.11). transformers ignores mtp.* on load and has no module for it, so the
# block is assembled here from transformers' own pieces, as the reference MTPBlock defines it: a
# DeepseekV4DecoderLayer built as one more layer (sliding window, learned routing), e_proj / h_proj,
# enorm / hnorm / norm and a DeepseekV4HyperHead, with the main model's embedding and LM head. This is
# a second implementation of the spec's block, not an independent oracle.
# ----------------------------------------------------------------------------------------------

MTP_PREFIX = "mtp.0."


def mtp_official(name, n):
    """layers.{n}.X (the extra layer's official name) -> mtp.0.X."""
    return MTP_PREFIX + name[len(f"layers.{n}."):]


def build_mtp(hf, cfg, model, cfgspec, seed):
    """-> (module, checkpoint entries, kinds, config of the n+1-layer model)."""
    torch = hf.torch
    nn = torch.nn
    n = cfg.num_hidden_layers
    kw = cfgspec["kwargs"]()
    kw.update(num_hidden_layers=n + 1, layer_types=list(kw["layer_types"]) + ["sliding_attention"],
              mlp_layer_types=list(kw["mlp_layer_types"]) + ["moe"])
    cfg2 = hf.Config(**kw)
    mod = sys.modules[type(model.model.layers[0]).__module__]
    d = cfg.hidden_size

    class Mtp(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = cfg2  # for force_eager
            self.layer = type(model.model.layers[0])(cfg2, n)
            self.e_proj = nn.Linear(d, d, bias=False)
            self.h_proj = nn.Linear(d, d, bias=False)
            self.enorm = mod.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
            self.hnorm = mod.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
            self.norm = mod.DeepseekV4RMSNorm(d, eps=cfg.rms_norm_eps)
            self.hc_head = mod.DeepseekV4HyperHead(cfg)

    mtp = Mtp().to(torch.float32).eval()
    force_eager(mtp)
    sd = mtp.state_dict()
    layer_keys = {k: f"model.layers.{n}." + k[len("layer."):] for k in sd if k.startswith("layer.")}
    plan, recipes = official_plan({layer_keys[k]: tuple(sd[k].shape) for k in layer_keys})
    n_experts = cfg.n_routed_experts
    entries, values, kinds = {}, {}, {}
    for name in sorted(plan):  # values and kinds by the extra layer's name; stored as mtp.0.*
        kind = storage_kind(name, cfgspec)
        val = random_value(mtp_official(name, n), plan[name], seed, n_experts)
        ent, deq = encode_official(mtp_official(name, n), val, kind)
        entries.update(ent)
        values[name] = deq
        kinds[mtp_official(name, n)] = kind
    hv = hf_tensor_values(recipes, values)
    own = {"e_proj.weight": (d, d), "h_proj.weight": (d, d), "enorm.weight": (d,), "hnorm.weight": (d,),
           "norm.weight": (d,), "hc_head.hc_fn": tuple(sd["hc_head.hc_fn"].shape),
           "hc_head.hc_base": tuple(sd["hc_head.hc_base"].shape), "hc_head.hc_scale": tuple(sd["hc_head.hc_scale"].shape)}
    for key, shape in own.items():
        name = MTP_PREFIX + key.replace("hc_head.hc_", "hc_head_")
        kind = "f32" if "hc_head" in key else ("fp8" if cfgspec["storage"] == "quant" and "proj" in key else "bf16")
        ent, deq = encode_official(name, random_value(name, shape, seed, n_experts), kind)
        entries.update(ent)
        kinds[name] = kind
        hv[key] = deq
    with torch.no_grad():
        for k, hk in layer_keys.items():
            sd[k].copy_(torch.from_numpy(np.ascontiguousarray(hv[hk])).to(sd[k].dtype))
        for k in own:
            sd[k].copy_(torch.from_numpy(np.ascontiguousarray(hv[k])).to(sd[k].dtype))
    sd = mtp.state_dict()
    for k, hk in layer_keys.items():
        if not np.array_equal(sd[k].cpu().numpy(), hv[hk].astype(sd[k].cpu().numpy().dtype)):
            raise RuntimeError(f"MTP {k}: value in the module differs from the encoded value")
    return mtp.to(hf.dev), entries, kinds, cfg2


def main_inputs(hf, model, ids):
    """One use_cache=False forward: (final streams before hc_head [1, S, hc, d], the first layer's
    mask and position embeddings), the inputs the MTP block reuses."""
    got = {}

    def head_hook(m, a):
        got["streams"] = a[0].detach()

    def layer_hook(m, a, kw):
        got["mask"] = kw.get("attention_mask")
        got["pe"] = kw.get("position_embeddings")

    h1 = model.model.hc_head.register_forward_pre_hook(head_hook)
    h2 = model.model.layers[0].register_forward_pre_hook(layer_hook, with_kwargs=True)
    try:
        with hf.torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        h1.remove()
        h2.remove()
    return got


def mtp_forward(hf, model, mtp, ids, inputs, T):
    """MTP logits [T, V] and final hidden [T, d] for positions 0..T-1 (token p+1's embedding with the
    streams at p), on the first T positions of the main forward's inputs."""
    torch = hf.torch
    with torch.no_grad():
        e = mtp.enorm(model.model.embed_tokens(ids[:, 1:T + 1]))
        h = mtp.hnorm(inputs["streams"][:, :T])
        x = mtp.e_proj(e).unsqueeze(2) + mtp.h_proj(h)
        pe = {k: (c[:, :T], s_[:, :T]) for k, (c, s_) in inputs["pe"].items()}
        mask = inputs["mask"]
        if mask is not None:
            mask = mask[..., :T, :T]
        pos = torch.arange(T, device=hf.dev)[None]
        x = mtp.layer(x, position_embeddings=pe, position_ids=pos, attention_mask=mask, input_ids=None,
                      past_key_values=None)
        hid = mtp.norm(mtp.hc_head(x))
        return model.lm_head(hid)[0].float(), hid[0].float()


def mtp_goldens(hf, model, mtp, ids, exp, sanity):
    torch = hf.torch
    S = ids.shape[1]
    T = S - 1
    inputs = main_inputs(hf, model, ids)
    if inputs.get("pe") is None:
        raise RuntimeError("could not capture the first layer's position embeddings")
    logits, hid = mtp_forward(hf, model, mtp, ids, inputs, T)
    rows = np.array(sorted({L - 1 for L in LOGIT_LENGTHS if L - 1 < T}), np.int64)
    exp["mtp.logits.positions"] = ent_i64(rows)
    exp["mtp.logits"] = ent_f32(logits[torch.from_numpy(rows).to(hf.dev)].cpu().numpy())
    probes = np.array([p for p in PROBE_POSITIONS if p < T], np.int64)
    exp["mtp.positions"] = ent_i64(probes)
    exp["mtp.final_hidden"] = ent_f32(hid[torch.from_numpy(probes).to(hf.dev)].cpu().numpy())
    # Causality: the block on a prefix gives the same rows as on the whole prompt.
    for L in (1, 17, 129, 300):
        if L < T:
            lp, _ = mtp_forward(hf, model, mtp, ids, inputs, L)
            sanity[f"mtp.prefix{L}"] = maxdiff(lp, logits[:L])
    top2 = logits.topk(2, dim=-1).values
    sanity["mtp.min_top1_top2_gap"] = float((top2[:, 0] - top2[:, 1]).min())
    log(f"  MTP: logits |max| {float(logits.abs().max()):.4g}, {len(rows)} rows stored; "
        f"prefix checks {json.dumps({k: v for k, v in sanity.items() if k.startswith('mtp.prefix')})}")


def run_cached(hf, model, ids, chunks):
    torch = hf.torch
    cache = hf.DynamicCache(config=model.config)
    outs, p = [], 0
    with torch.no_grad():
        for c in chunks:
            o = model(input_ids=ids[:, p:p + c], past_key_values=cache, use_cache=True)
            outs.append(o.logits[0].float())
            p += c
    return torch.cat(outs, 0), [type(l).__name__ for l in getattr(cache, "layers", [])]


def greedy(hf, model, prompt, n_new):
    torch = hf.torch
    cache = hf.DynamicCache(config=model.config)
    toks, rows = [], []
    with torch.no_grad():
        o = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        rows.append(o.logits[0, -1].float())
        for j in range(n_new):
            t = int(rows[-1].argmax())
            toks.append(t)
            if j == n_new - 1:
                break
            o = model(input_ids=torch.tensor([[t]], device=hf.dev), past_key_values=cache, use_cache=True)
            rows.append(o.logits[0, -1].float())
    return toks, torch.stack(rows)


def hf_config_json(cfg, cfgspec):
    d = cfg.to_dict()
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    d = json.loads(json.dumps(d, default=str))
    n = cfg.num_hidden_layers
    rates = cfg.compress_rates
    d["model_type"] = "deepseek_v4"
    d["architectures"] = ["DeepseekV4ForCausalLM"]
    d["layer_types"] = list(cfg.layer_types)
    d["mlp_layer_types"] = list(cfg.mlp_layer_types)
    # Official naming alongside (consistent with the transformers fields).
    d["compress_ratios"] = [0 if t == "sliding_attention" else int(rates[t]) for t in cfg.layer_types]
    n_hash = 0
    while n_hash < n and cfg.mlp_layer_types[n_hash] == "hash_moe":
        n_hash += 1
    assert all(t == "moe" for t in cfg.mlp_layer_types[n_hash:]), "hash layers must be a prefix"
    d["num_hash_layers"] = n_hash
    d["qk_rope_head_dim"] = int(cfg.qk_rope_head_dim)
    d["topk_method"] = "noaux_tc"
    d["num_nextn_predict_layers"] = 1  # mtp.0 is in the checkpoint (build_mtp)
    d["torch_dtype"] = "float32" if cfgspec["storage"] == "plain" else "bfloat16"
    if cfgspec["storage"] == "quant":
        d["expert_dtype"] = "fp4"
        d["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
    d.pop("dtype", None)
    return d


def jclean(x):
    """JSON-safe copy: non-finite floats become null."""
    if isinstance(x, dict):
        return {str(k): jclean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jclean(v) for v in x]
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, (np.floating,)):
        return jclean(float(x))
    if isinstance(x, (np.integer,)):
        return int(x)
    return x


def dump_json(obj, path):
    with open(path, "w") as f:
        json.dump(jclean(obj), f, indent=2, sort_keys=True, allow_nan=False)
        f.write("\n")


def maxdiff(a, b):
    return float((a.float() - b.float()).abs().max())


def run_config(hf, name, cfgspec, outdir, deadline):
    torch = hf.torch
    meta = {"config": name, "storage": cfgspec["storage"], "attempts": []}
    rng = np.random.default_rng(PROMPT_SEED)
    vocab = cfgspec["kwargs"]()["vocab_size"]
    ids_np = rng.integers(0, vocab, PROMPT_LEN).astype(np.int64)
    ids = torch.from_numpy(ids_np)[None].to(hf.dev)

    # 1. Pick a seed whose discrete decisions (router top-k, indexer top-k) have clear margins.
    best = None
    attempts_until = min(time.time() + ATTEMPT_SECONDS, deadline - 200)
    for attempt in range(MAX_ATTEMPTS):
        seed = cfgspec["seed"] + 1000 * attempt
        t = time.time()
        cfg, model, entries, kinds, impl = build(hf, cfgspec, seed)
        if attempt == 0:
            cache_probe = hf.DynamicCache(config=model.config)
            log(f"  HF: {len(model.state_dict())} state-dict tensors; cache layers "
                f"{[type(l).__name__ for l in getattr(cache_probe, 'layers', [])]}")
            if name == "tiny_f32":
                log("  HF module tree of layer 2 (CSA + hash MoE):\n" + repr(model.model.layers[2]))
        res = margins_forward(hf, model, cfg, ids)
        score = margin_score(res)
        meta["attempts"].append({"seed": seed, "margins": {k: v[0] for k, v in res.items()},
                                 "argmin_position": {k: v[1] for k, v in res.items()}, "score": score})
        log(f"  attempt {attempt} seed {seed}: margin score {score:.3g} "
            f"({', '.join(f'{k}={v[0]:.3g}@{v[1]}' for k, v in res.items())}) [{time.time() - t:.1f}s]")
        if best is None or score > best[0]:
            best = (score, seed, cfg, model, entries, kinds, impl, res)
        else:
            del model
        if score >= 1.0 or time.time() > attempts_until:
            break
    score, seed, cfg, model, entries, kinds, impl, res = best
    meta.update(seed=seed, margin_score=score, margins={k: v[0] for k, v in res.items()},
                margins_ok=score >= 1.0, attn_impl=impl[0], experts_impl=impl[1])
    if score < 1.0:
        log(f"  WARNING: no attempt reached the margin thresholds; using seed {seed} (score {score:.3g})")
    log(f"  using seed {seed}; attn={impl[0]} experts={impl[1]}")

    mtp, mtp_entries, mtp_kinds, _ = build_mtp(hf, cfg, model, cfgspec, seed)
    entries = dict(entries)
    entries.update(mtp_entries)
    kinds = dict(kinds)
    kinds.update(mtp_kinds)
    os.makedirs(outdir, exist_ok=True)
    # 2. Checkpoint + config.
    cj = hf_config_json(cfg, cfgspec)
    dump_json(cj, os.path.join(outdir, "config.json"))
    nbytes = write_safetensors(os.path.join(outdir, "model.safetensors"), entries,
                               {"format": "pt", "producer": "tools/golden/make_golden.py", "seed": seed})
    back = read_safetensors(os.path.join(outdir, "model.safetensors"))
    assert set(back) == set(entries)
    meta["model_bytes"] = nbytes
    meta["storage_kinds"] = {k: sum(1 for v in kinds.values() if v == k) for k in sorted(set(kinds.values()))}
    log(f"  model.safetensors: {len(entries)} tensors, {nbytes} bytes, kinds {meta['storage_kinds']}")

    # 3. Goldens from one full forward.
    positions = [p for p in PROBE_POSITIONS if p < PROMPT_LEN]
    full, probes, clamp = capture_forward(hf, model, cfg, ids, positions)
    meta["clamp_hits"] = clamp
    meta["hook_errors"] = dict(HOOK_ERRORS)
    HOOK_ERRORS.clear()
    exp = {"input_ids": ent_i64(ids_np), "positions": ent_i64(np.array(positions))}
    lengths = np.array([L for L in LOGIT_LENGTHS if L <= PROMPT_LEN], np.int64)
    exp["logits.lengths"] = ent_i64(lengths)
    exp["logits"] = ent_f32(full[torch.from_numpy(lengths - 1).to(hf.dev)].cpu().numpy())
    for k, v in probes.items():
        exp[k] = ent_i64(v) if v.dtype == np.int64 else ent_f32(v)
    rot = model.model.rotary_emb
    for lt in ("main", "compress"):
        inv = getattr(rot, f"{lt}_inv_freq", None)
        if inv is not None:
            exp[f"rope.{lt}_inv_freq"] = ent_f32(inv.float().cpu().numpy())
            meta[f"rope_{lt}_attention_scaling"] = float(getattr(rot, f"{lt}_attention_scaling", 1.0))
    log(f"  full forward: logits |max| {float(full.abs().max()):.4g}, std {float(full.std()):.4g}; "
        f"{len(probes)} probe tensors")
    log(f"  clamp hits: {json.dumps(clamp)}")

    sanity = {}
    mtp_goldens(hf, model, mtp, ids, exp, sanity)
    # 4. Per-prefix logits (use_cache=False) equal the full-forward rows.
    with torch.no_grad():
        for L in PREFIX_CHECK_LENGTHS:
            if L > PROMPT_LEN:
                continue
            o = model(input_ids=ids[:, :L], use_cache=False)
            sanity[f"prefix{L}"] = maxdiff(o.logits[0, -1], full[L - 1])
    log(f"  prefix (no cache) vs full: {json.dumps(sanity)}")

    # 5. Greedy continuations with the cache, checked against a full forward over the result.
    for P in GREEDY_PROMPTS:
        if P + GREEDY_NEW > PROMPT_LEN:
            continue
        if time.time() > deadline - 60:
            log("  (skipping remaining greedy prompts: time)")
            break
        toks, rows = greedy(hf, model, ids[:, :P], GREEDY_NEW)
        exp[f"greedy.P{P}.prompt"] = ent_i64(ids_np[:P])
        exp[f"greedy.P{P}.tokens"] = ent_i64(np.array(toks))
        exp[f"greedy.P{P}.logits"] = ent_f32(rows.cpu().numpy())
        seq = torch.cat([ids[:, :P], torch.tensor([toks[:-1]], device=hf.dev)], 1)
        with torch.no_grad():
            ref = model(input_ids=seq, use_cache=False).logits[0, P - 1:].float()
        top2 = rows.topk(2, dim=-1).values
        sanity[f"greedy{P}.cached_vs_full"] = maxdiff(rows, ref)
        sanity[f"greedy{P}.argmax_agree"] = bool((ref.argmax(-1).cpu() == torch.tensor(toks)).all())
        sanity[f"greedy{P}.min_top1_top2_gap"] = float((top2[:, 0] - top2[:, 1]).min())
        log(f"  greedy P={P}: {toks}")
    # Optional cross-check with generate().
    try:
        g = model.generate(input_ids=ids[:, :GREEDY_PROMPTS[0]], max_new_tokens=GREEDY_NEW, do_sample=False)
        gen = g[0, GREEDY_PROMPTS[0]:].tolist()
        want = np.frombuffer(exp[f"greedy.P{GREEDY_PROMPTS[0]}.tokens"][2], "<i8").tolist()
        sanity["generate_matches_manual_prefix"] = gen == want[:len(gen)]
        sanity["generate_len"] = len(gen)
    except Exception as e:  # noqa: BLE001
        sanity["generate_error"] = repr(e)[:300]

    # 6. Chunked prefill / decode with the cache vs the full forward.
    cache_classes = None
    for sname, chunks in CHUNK_SCHEDULES.items():
        if sum(chunks) > PROMPT_LEN or time.time() > deadline - 40:
            continue
        got, cache_classes = run_cached(hf, model, ids, chunks)
        sanity[f"chunks[{sname}]"] = maxdiff(got, full[:sum(chunks)])
    meta["cache_layer_classes"] = cache_classes
    meta["sanity"] = sanity
    log(f"  sanity: {json.dumps(sanity)}")

    write_safetensors(os.path.join(outdir, "expected.safetensors"), exp,
                      {"producer": "tools/golden/make_golden.py", "config": name})
    meta["expected_tensors"] = {k: [v[0], list(v[1])] for k, v in sorted(exp.items())}
    meta["versions"] = {"torch": hf.torch.__version__, "transformers": hf.transformers.__version__,
                        "numpy": np.__version__, "device": str(hf.dev),
                        "gpu": hf.torch.cuda.get_device_name(0) if hf.torch.cuda.is_available() else None}
    meta["constants"] = dict(PROMPT_LEN=PROMPT_LEN, PROMPT_SEED=PROMPT_SEED, GREEDY_NEW=GREEDY_NEW,
                             BOOST=BOOST, ROUTER_MARGIN_MIN=ROUTER_MARGIN_MIN,
                             INDEXER_MARGIN_MIN=INDEXER_MARGIN_MIN)
    dump_json(meta, os.path.join(outdir, "meta.json"))
    return model, full, ids


def check_quant_loader(hf, outdir, ref_model):
    """Let transformers' FP8 integration dequantise our FP8/MXFP4 file; compare with what we loaded."""
    torch = hf.torch
    try:
        from transformers import FineGrainedFP8Config
        qc = FineGrainedFP8Config(dequantize=True)
        try:
            m2 = hf.Model.from_pretrained(outdir, quantization_config=qc, dtype=torch.float32)
        except TypeError:
            m2 = hf.Model.from_pretrained(outdir, quantization_config=qc, torch_dtype=torch.float32)
        sd1, sd2 = ref_model.state_dict(), m2.state_dict()
        res = {"n_keys": len(sd1), "missing": [k for k in sd1 if k not in sd2][:20],
               "extra": [k for k in sd2 if k not in sd1][:20]}
        diffs = {}
        for k, v in sd1.items():
            if k not in sd2:
                continue
            if tuple(sd2[k].shape) != tuple(v.shape):
                diffs[k] = f"shape {tuple(sd2[k].shape)} vs {tuple(v.shape)}"
                continue
            d = float((sd2[k].detach().float().cpu() - v.detach().float().cpu()).abs().max())
            if d != 0:
                diffs[k] = d
        res["n_nonzero_diffs"] = len(diffs)
        res["nonzero_diffs"] = dict(list(diffs.items())[:30])
        res["dtypes"] = sorted({str(t.dtype) for t in sd2.values()})
        log(f"  FP8 dequantize loader: {json.dumps(res, default=str)[:1500]}")
        return res
    except Exception as e:  # noqa: BLE001
        log(f"  FP8 dequantize loader failed: {e!r}")
        return {"error": repr(e)[:500]}


def check_from_pretrained(hf, name, outdir, full, ids):
    """Load our official-name checkpoint through transformers' own conversion mapping and compare."""
    torch = hf.torch
    try:
        kw = dict(output_loading_info=True)
        try:
            m2, info = hf.Model.from_pretrained(outdir, dtype=torch.float32, **kw)
        except TypeError:
            m2, info = hf.Model.from_pretrained(outdir, torch_dtype=torch.float32, **kw)
        force_eager(m2)
        m2 = m2.to(hf.dev).eval()
        short = {k: (list(v)[:20] if hasattr(v, "__iter__") else v) for k, v in info.items()}
        with torch.no_grad():
            o = m2(input_ids=ids[:, :300], use_cache=False)
        d = maxdiff(o.logits[0], full[:300])
        log(f"  from_pretrained({name}) loading info: {short}")
        log(f"  from_pretrained({name}) logits[:300] max diff vs golden: {d:.3g}")
        return {"loading_info": json.loads(json.dumps(short, default=str)), "logits_maxdiff_300": d}
    except Exception as e:  # noqa: BLE001
        log(f"  from_pretrained({name}) failed: {e!r}")
        return {"error": repr(e)[:500]}


def make_tar(work, tar_path):
    tmp = tar_path + ".tmp"
    with tarfile.open(tmp, "w:gz") as tf:
        for d in sorted(os.listdir(work)):
            tf.add(os.path.join(work, d), arcname=d)
    os.replace(tmp, tar_path)
    log(f"wrote {tar_path} ({os.path.getsize(tar_path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder (one subfolder per config)")
    ap.add_argument("--tar", help="also pack the output folder into this .tar.gz after each config")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    ap.add_argument("--time-budget", type=float, default=1e9, help="seconds; optional checks are skipped near it")
    ap.add_argument("--selftest", action="store_true", help="only test the codecs (numpy only)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.selftest:
        try:
            import torch
        except ImportError:
            torch = None
        selftest(torch)
        return 0
    if not args.out:
        ap.error("--out is required")
    deadline = T0 + args.time_budget
    hf = import_hf()
    log(f"torch {hf.torch.__version__}, transformers {hf.transformers.__version__}, device {hf.dev}")
    selftest(hf.torch)
    os.makedirs(args.out, exist_ok=True)
    failures, done = [], {}
    for name in args.configs.split(","):
        log(f"=== {name}")
        try:
            model, full, ids = run_config(hf, name, CONFIGS[name], os.path.join(args.out, name), deadline)
            done[name] = (full, ids, model)
            if CONFIGS[name]["storage"] == "plain" and time.time() < deadline - 30:
                fp = check_from_pretrained(hf, name, os.path.join(args.out, name), full, ids)
                mp = os.path.join(args.out, name, "meta.json")
                meta = json.load(open(mp))
                meta["from_pretrained_check"] = fp
                dump_json(meta, mp)
        except Exception:  # noqa: BLE001
            failures.append(name)
            log(f"FAILED {name}:\n{traceback.format_exc()}")
        if args.tar:
            make_tar(args.out, args.tar)
        if hf.torch.cuda.is_available():
            hf.torch.cuda.empty_cache()
    # Extra: let transformers' FP8 integration decode the quantised checkpoint, if it can.
    if "tiny_quant" in done and time.time() < deadline - 40:
        log("=== extra: from_pretrained on tiny_quant (transformers' own FP8/MXFP4 loader)")
        full, ids, qmodel = done["tiny_quant"]
        r = check_quant_loader(hf, os.path.join(args.out, "tiny_quant"), qmodel)
        mp = os.path.join(args.out, "tiny_quant", "meta.json")
        meta = json.load(open(mp))
        meta["fp8_dequantize_loader_check"] = r
        dump_json(meta, mp)
        if args.tar:
            make_tar(args.out, args.tar)
    log(f"done; failures: {failures or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
