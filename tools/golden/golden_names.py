"""Names: Hugging Face module paths <-> official checkpoint names (spec §4.3), the storage format of
each tensor, seeded random values, and the official encoding of a value.

Part of tools/golden/make_golden.py (see its docstring)."""

import re
import zlib

import numpy as np

from golden_configs import BOOST
from golden_formats import quant_fp8_block, quant_mxfp4
from golden_safetensors import ent_bf16, ent_f32, ent_i64


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
