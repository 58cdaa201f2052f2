#!/usr/bin/env python3
"""The peer of `dsv4 proxy-bench`: transformers' DeepseekV4ForCausalLM decode step time on the
DeepSeek-V4-Flash per-layer shapes (issue 7, item 3).

What it does
  * builds DeepseekV4ForCausalLM with the real Flash per-layer shapes (../shared/docs/dsv4-spec.md
    §1.1: hidden 4096, 64 heads x 512, q_lora 1024, o_groups 8 x o_lora 1024, 256 routed experts
    top-6 + 1 shared, moe_intermediate 2048, window 128, indexer 64 x 128 top-512, vocab 129280,
    mHC 4 streams, 20 Sinkhorn iterations) at a small depth (default 3 layers: sliding, CSA ratio 4,
    HCA ratio 128; the first --hash-layers layers hash-routed);
  * all parameters BF16, constructed directly on the GPU (default dtype bf16 + torch.device), then
    re-filled in place from one seeded CUDA generator: matrices N(0, 0.02), norm weights 1,
    sinks / position biases / mHC biases N(0, 0.5), router correction bias N(0, 0.05), and each
    tid2eid row 6 distinct random experts (HF initialises tid2eid to 0, which would send every token
    to expert 0 and make the MoE unrealistically cheap);
  * attention "eager" (the only implementation the class supports); experts implementation from
    --experts-impls (transformers' own choices: "grouped_mm", the library default when it can
    dispatch, and "eager", the per-expert Python loop);
  * for each point BxL: pre-fills B random sequences to L tokens with the model's own DynamicCache
    (in chunks sized so eager attention's score matrices fit, see plan_prefill), then times decode
    steps (one new token per sequence, random token ids so hash routing stays spread; the step
    includes embedding, all layers, the mHC head, final norm and the LM head) with CUDA events:
    --warmup untimed steps, then --steps timed ones; reports median, p10/p90, min/max, per-layer
    time (= step / depth, LM head and embedding included) and tokens/s;
  * checks the run is not degenerate: distinct experts touched per layer in one decode step
    (against the uniform expectation 256 * (1 - (1 - 6/256)^B)) and finite logits.

Output: one JSON file (--out, default $OUT/peer_transformers.json) rewritten after every point, with
one record per (point, experts implementation); tools/peer/ratio.py joins it with dsv4's proxy-bench
JSON. docs/perf/peer.md documents the pair of commands.

Requires torch and transformers >= 5.17 (DeepseekV4) and one CUDA GPU with about 14 GB per layer
plus 2.2 GB (embedding + LM head) plus prefill temporaries. `--plan` prints the plan (weights, chunk
sizes) without importing torch.
"""

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

T0 = time.time()


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


# ----------------------------------------------------------------------------------------------
# Shapes (spec §1.1) and plan (no torch needed)
# ----------------------------------------------------------------------------------------------

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"
LAYER_ALIASES = {
    "sliding": SWA, "swa": SWA, "s": SWA, "0": SWA, SWA: SWA,
    "csa": CSA, "c": CSA, "4": CSA, CSA: CSA,
    "hca": HCA, "h": HCA, "128": HCA, HCA: HCA,
}
SHORT = {SWA: "sliding", CSA: "csa", HCA: "hca"}

FLASH = dict(
    vocab_size=129280, hidden_size=4096,
    num_attention_heads=64, num_key_value_heads=1, head_dim=512, partial_rotary_factor=64 / 512,
    q_lora_rank=1024, o_groups=8, o_lora_rank=1024,
    n_routed_experts=256, num_experts_per_tok=6, n_shared_experts=1, moe_intermediate_size=2048,
    compress_rates={CSA: 4, HCA: 128},
    sliding_window=128, index_n_heads=64, index_head_dim=128, index_topk=512,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    max_position_embeddings=1048576,
    swiglu_limit=10.0, routed_scaling_factor=1.5, scoring_func="sqrtsoftplus", norm_topk_prob=True,
    tie_word_embeddings=False, num_nextn_predict_layers=0, bos_token_id=0, eos_token_id=1,
)


def default_layer_types(depth):
    """One sliding layer, then CSA/HCA alternating (Flash's order after its two sliding layers)."""
    return [SWA] + [CSA if i % 2 == 0 else HCA for i in range(depth - 1)]


def parse_layer_types(text, depth):
    if not text:
        return default_layer_types(depth)
    out = []
    for t in text.split(","):
        t = t.strip().lower()
        if t not in LAYER_ALIASES:
            raise SystemExit(f"unknown layer type {t!r} (sliding|csa|hca or the HF names)")
        out.append(LAYER_ALIASES[t])
    if len(out) != depth:
        raise SystemExit(f"--layer-types has {len(out)} entries, --layers is {depth}")
    return out


def parse_size(text):
    t = text.strip().lower()
    mult = 1
    if t.endswith("k"):
        t, mult = t[:-1], 1024
    return int(t) * mult


def parse_points(text):
    """'1x1024,8x8K' -> [(1, 1024), (8, 8192)] (batch x context tokens)."""
    pts = []
    for p in text.split(","):
        p = p.strip()
        if not p:
            continue
        b, l = p.lower().split("x")
        pts.append((int(b), parse_size(l)))
    return pts


def layer_params(lt, c=FLASH):
    """Parameter count of one decoder layer of type lt (spec §4.1 shapes)."""
    d, h, hd, q = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    g, ol = c["o_groups"], c["o_lora_rank"]
    e, f = c["n_routed_experts"], c["moe_intermediate_size"]
    ih, ihd = c["index_n_heads"], c["index_head_dim"]
    n = d * q + q * h * hd + d * hd + (h * hd // g) * (g * ol) + g * ol * d + h + q + hd + 2 * d
    if lt == CSA:
        r = c["compress_rates"][CSA]
        n += 2 * d * 2 * hd + r * 2 * hd + hd                        # compressor (two series)
        n += 2 * d * 2 * ihd + r * 2 * ihd + ihd + q * ih * ihd + d * ih  # indexer
    elif lt == HCA:
        r = c["compress_rates"][HCA]
        n += 2 * d * hd + r * hd + hd
    n += e * (3 * f * d) + 3 * f * d + e * d                         # routed + shared experts + router
    hc = c["hc_mult"]
    n += 2 * ((2 + hc) * hc * hc * d + (2 + hc) * hc + 3)            # attn_hc + ffn_hc
    return n


def model_bytes(layer_types, c=FLASH, elem=2):
    n = sum(layer_params(lt, c) for lt in layer_types)
    n += 2 * c["vocab_size"] * c["hidden_size"] + c["hc_mult"] * c["hc_mult"] * c["hidden_size"] + c["hidden_size"]
    return n * elem


def prefill_temp_bytes(b, chunk, ctx, c=FLASH):
    """Upper estimate of eager-attention temporaries for one prefill chunk (worst layer: CSA).

    Keys per query = window cache (127) + chunk + compressed CSA entries (ctx/4). Counted: ~5 live
    BF16 copies of the [B, 64, chunk, keys] score matrix (matmul, +mask, cat sinks, -max, softmax),
    the 64x repeat_kv copies of K and V ([B, 64, keys, 512] each) and ~3 FP32 copies of the
    indexer's [B, chunk, 64, ctx/4] scores."""
    h, hd, w = c["num_attention_heads"], c["head_dim"], c["sliding_window"]
    t = ctx // c["compress_rates"][CSA]
    keys = (w - 1) + chunk + t + 1
    scores = b * h * chunk * keys * 2 * 5
    repkv = 2 * b * h * keys * hd * 2
    index = b * chunk * c["index_n_heads"] * t * 4 * 3
    return scores + repkv + index


def plan_prefill(b, ctx, budget_bytes, max_tokens):
    """Largest power-of-two chunk (tokens per sequence per forward, <= ctx) whose temporaries fit
    budget_bytes and whose B*chunk <= max_tokens; at least 16."""
    c = 1 << max(4, (ctx - 1).bit_length())
    while c > 16:
        cc = min(c, ctx)
        if b * cc <= max_tokens and prefill_temp_bytes(b, cc, ctx) <= budget_bytes:
            return cc
        c //= 2
    return min(16, ctx)


def percentile(xs, q):
    s = sorted(xs)
    if not s:
        return None
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def predict_prefill_s(history, b, ctx):
    """Predicted prefill seconds for b x ctx from earlier points [(b, ctx, seconds), ...].

    Uses the point with the most tokens (fixed per-forward overheads amortised best) and scales by
    tokens x (1 + ctx/4096) (eager attention's per-token work grows with the context), x1.3 margin.
    None without history."""
    if not history:
        return None
    hb, hl, hs = max(history, key=lambda h: h[0] * h[1])
    rate = hs / (hb * hl * (1 + hl / 4096))
    return rate * b * ctx * (1 + ctx / 4096) * 1.3 + 2.0


def expected_experts(b, e=256, k=6):
    return e * (1.0 - (1.0 - k / e) ** b)


# ----------------------------------------------------------------------------------------------
# Model (torch + transformers)
# ----------------------------------------------------------------------------------------------

class HF:
    pass


def import_hf():
    import torch
    import transformers
    try:
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError:
        from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM
    from transformers import DynamicCache
    hf = HF()
    hf.torch, hf.transformers = torch, transformers
    hf.Config, hf.Model, hf.DynamicCache = DeepseekV4Config, DeepseekV4ForCausalLM, DynamicCache
    return hf


def set_impl(model, experts_impl, notes):
    """Attention eager; experts implementation as asked. Returns the effective experts setting."""
    for fn, arg in (("set_attn_implementation", "eager"), ("set_experts_implementation", experts_impl)):
        if hasattr(model, fn):
            try:
                getattr(model, fn)(arg)
            except Exception as e:  # noqa: BLE001 - recorded, then the config attribute is set below
                notes.append(f"{fn}({arg}) failed: {e!r}"[:300])
    seen = set()
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is None or id(c) in seen or not hasattr(c, "to_dict"):
            continue
        seen.add(id(c))
        for attr, val in (("_attn_implementation", "eager"), ("_experts_implementation", experts_impl)):
            try:
                setattr(c, attr, val)
            except Exception as e:  # noqa: BLE001
                notes.append(f"setting {attr}={val} failed: {e!r}"[:300])
    exp = model.model.layers[0].mlp.experts
    return (getattr(model.config, "_attn_implementation", None),
            getattr(getattr(exp, "config", model.config), "_experts_implementation", None))


def fill_weights(hf, model, seed, n_experts, top_k):
    """Seeded, non-zero, realistic-scale values, generated on the GPU in place."""
    torch = hf.torch
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("sinks", "position_bias", "base", "hc_base"):
                p.normal_(0.0, 0.5, generator=gen)
                k = "N(0,0.5)"
            elif leaf in ("scale", "hc_scale"):
                p.fill_(1.0)
                k = "1"
            elif "norm" in name and p.dim() == 1:
                p.fill_(1.0)
                k = "1"
            else:
                p.normal_(0.0, 0.02, generator=gen)
                k = "N(0,0.02)"
            kinds[k] = kinds.get(k, 0) + p.numel()
        for name, b in model.named_buffers():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "e_score_correction_bias":
                b.normal_(0.0, 0.05, generator=gen)
            elif leaf == "tid2eid":
                rows = torch.rand(b.shape[0], n_experts, device=dev, generator=gen).argsort(dim=-1)[:, :top_k]
                b.copy_(rows.to(b.dtype))
    return kinds


def build_model(hf, args, layer_types, mlp_types):
    torch = hf.torch
    kw = dict(FLASH)
    kw.update(num_hidden_layers=len(layer_types), layer_types=list(layer_types), mlp_layer_types=list(mlp_types))
    cfg = hf.Config(**kw)
    torch.manual_seed(args.seed)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = hf.Model(cfg)
    finally:
        torch.set_default_dtype(prev)
    model.eval()
    model.requires_grad_(False)
    kinds = fill_weights(hf, model, args.seed, FLASH["n_routed_experts"], FLASH["num_experts_per_tok"])
    torch.cuda.synchronize()
    return cfg, model, kinds


def shape_summary(model):
    l0 = model.model.layers[0]
    out = {
        "experts.gate_up_proj": list(l0.mlp.experts.gate_up_proj.shape),
        "experts.down_proj": list(l0.mlp.experts.down_proj.shape),
        "shared.gate_proj": list(l0.mlp.shared_experts.gate_proj.weight.shape),
        "q_b_proj": list(l0.self_attn.q_b_proj.weight.shape),
        "o_a_proj": list(l0.self_attn.o_a_proj.weight.shape),
        "o_b_proj": list(l0.self_attn.o_b_proj.weight.shape),
        "lm_head": list(model.lm_head.weight.shape),
    }
    for i, layer in enumerate(model.model.layers):
        comp = layer.self_attn.compressor
        if comp is not None and hasattr(comp, "indexer"):
            out[f"L{i}.indexer.q_b_proj"] = list(comp.indexer.q_b_proj.weight.shape)
            out[f"L{i}.compressor.kv_proj"] = list(comp.kv_proj.weight.shape)
            break
    return out


def dtype_bytes(model):
    out = {}
    for p in model.parameters():
        k = str(p.dtype).replace("torch.", "")
        out[k] = out.get(k, 0) + p.numel() * p.element_size()
    return out


def gpu_info(torch):
    info = {"gpu": torch.cuda.get_device_name(0), "cuda_runtime": torch.version.cuda}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        info["driver"] = None
    return info


def mem_gb(torch):
    free, total = torch.cuda.mem_get_info()
    return {"allocated_gb": round(torch.cuda.memory_allocated() / 1e9, 2),
            "reserved_gb": round(torch.cuda.memory_reserved() / 1e9, 2),
            "free_gb": round(free / 1e9, 2), "total_gb": round(total / 1e9, 2)}


# ----------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------

def probe_impl(hf, model, impl, notes):
    """Prefill 2 x 300 tokens + 2 decode steps on a throw-away cache: is this implementation usable?"""
    torch = hf.torch
    eff = set_impl(model, impl, notes)
    cache = hf.DynamicCache(config=model.config)
    with torch.inference_mode():
        ids = torch.randint(2, FLASH["vocab_size"], (2, 300), device="cuda")
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        for _ in range(2):
            out = model(input_ids=ids[:, :1], past_key_values=cache, use_cache=True)
        ok = bool(torch.isfinite(out.logits).all())
    torch.cuda.synchronize()
    del cache
    return eff, ok


def decode_step(model, cache, tok):
    return model(input_ids=tok, past_key_values=cache, use_cache=True)


def routing_check(hf, model, cache, tok):
    """One untimed decode step with hooks on every router: distinct experts per layer."""
    torch = hf.torch
    seen, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        def hook(m, a, o, i=i):
            seen[i] = int(torch.unique(o[2]).numel())
        hooks.append(layer.mlp.gate.register_forward_hook(hook))
    try:
        out = decode_step(model, cache, tok)
    finally:
        for h in hooks:
            h.remove()
    return [seen.get(i) for i in range(len(model.model.layers))], bool(torch.isfinite(out.logits).all())


def run_point(hf, model, args, b, ctx, impls, notes, deadline):
    """Prefill b sequences to ctx tokens, then time decode for each experts implementation."""
    torch = hf.torch
    recs = []
    chunk = plan_prefill(b, ctx, args.prefill_mem_gb * 1e9, args.max_prefill_tokens)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed * 7919 + b * 100003 + ctx)
    cache = hf.DynamicCache(config=model.config)
    torch.cuda.reset_peak_memory_stats()
    set_impl(model, impls[0], notes)
    log(f"  prefill B={b} L={ctx}: chunk {chunk} tokens/sequence ({-(-ctx // chunk)} forwards), "
        f"experts {impls[0]}")
    t_pre = time.time()
    pos = 0
    with torch.inference_mode():
        while pos < ctx:
            c = min(chunk, ctx - pos)
            ids = torch.randint(2, FLASH["vocab_size"], (b, c), device="cuda", generator=gen)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            pos += c
            torch.cuda.synchronize()
            if time.time() > deadline:
                raise TimeoutError(f"prefill reached {pos}/{ctx} tokens when the time budget ran out")
    prefill_s = time.time() - t_pre
    seq = int(cache.get_seq_length())
    prefill_peak = torch.cuda.max_memory_allocated() / 1e9
    log(f"  prefill done in {prefill_s:.2f} s, cache length {seq}, peak {prefill_peak:.1f} GB")

    n_tok = args.warmup + args.steps + 1
    for impl in impls:
        rec = dict(experts_impl=impl, prefill_s=round(prefill_s, 3), prefill_chunk=chunk,
                   prefill_peak_gb=round(prefill_peak, 2), cache_len_after_prefill=seq)
        try:
            eff = set_impl(model, impl, notes)
            rec["experts_impl_effective"] = eff[1]
            toks = torch.randint(2, FLASH["vocab_size"], (n_tok, b, 1), device="cuda", generator=gen)
            torch.cuda.reset_peak_memory_stats()
            with torch.inference_mode():
                for i in range(args.warmup):
                    decode_step(model, cache, toks[i])
                torch.cuda.synchronize()
                touched, finite = routing_check(hf, model, cache, toks[args.warmup])
                rec["context_at_first_timed_step"] = int(cache.get_seq_length())
                ms, host_ms = [], []
                s_ev = torch.cuda.Event(enable_timing=True)
                e_ev = torch.cuda.Event(enable_timing=True)
                for i in range(args.steps):
                    h0 = time.perf_counter()
                    s_ev.record()
                    out = decode_step(model, cache, toks[args.warmup + 1 + i])
                    e_ev.record()
                    e_ev.synchronize()
                    host_ms.append((time.perf_counter() - h0) * 1e3)
                    ms.append(s_ev.elapsed_time(e_ev))
                finite = finite and bool(torch.isfinite(out.logits).all())
            med = percentile(ms, 50)
            rec.update(
                status="ok", steps=args.steps, warmup=args.warmup,
                median_ms=round(med, 4), p10_ms=round(percentile(ms, 10), 4), p90_ms=round(percentile(ms, 90), 4),
                min_ms=round(min(ms), 4), max_ms=round(max(ms), 4),
                per_layer_ms=round(med / len(model.model.layers), 4),
                tokens_per_s=round(b * 1000.0 / med, 2),
                host_median_ms=round(percentile(host_ms, 50), 4),
                step_ms=[round(x, 4) for x in ms],
                experts_touched_per_layer=touched,
                experts_expected_uniform=round(expected_experts(b), 1),
                logits_finite=finite,
                decode_peak_gb=round(torch.cuda.max_memory_allocated() / 1e9, 2),
            )
            log(f"  B={b} L={ctx} experts={impl}: median {med:.3f} ms (p10 {rec['p10_ms']:.3f}, "
                f"p90 {rec['p90_ms']:.3f}), {rec['per_layer_ms']:.3f} ms/layer, {rec['tokens_per_s']:.1f} tok/s, "
                f"experts touched {touched} (uniform ~{rec['experts_expected_uniform']}), finite {finite}")
        except Exception as e:  # noqa: BLE001 - one implementation failing must not lose the others
            oom = isinstance(e, torch.cuda.OutOfMemoryError)
            rec.update(status="oom" if oom else "error", skip_reason=f"{type(e).__name__}: {e}"[:500])
            log(f"  B={b} L={ctx} experts={impl}: {rec['status']}: {rec['skip_reason']}")
            if not oom:
                traceback.print_exc()
        recs.append(rec)
    del cache
    return recs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=3, help="depth (default 3)")
    ap.add_argument("--layer-types", default="",
                    help="comma list, one per layer: sliding|csa|hca (default: sliding, then csa/hca alternating)")
    ap.add_argument("--hash-layers", type=int, default=1, help="first N layers hash-routed (default 1)")
    ap.add_argument("--points", default="1x1024,8x1024,32x1024,1x8192,8x8192",
                    help="comma list of BATCHxCONTEXT (context may end in K), run in this order")
    ap.add_argument("--experts-impls", default="grouped_mm,eager",
                    help="transformers experts implementations to time at every point (first one also pre-fills)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps per point (>= 10)")
    ap.add_argument("--prefill-mem-gb", type=float, default=40.0,
                    help="budget for eager-attention temporaries when choosing the prefill chunk "
                         "(clamped at run time to half the memory free after the build)")
    ap.add_argument("--max-prefill-tokens", type=int, default=16384, help="max B*chunk tokens per prefill forward")
    ap.add_argument("--time-budget-s", type=float, default=150.0,
                    help="no new point starts (and a prefill stops) after this many seconds since start")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "peer_transformers.json"))
    ap.add_argument("--plan", action="store_true", help="print the plan (no torch) and exit")
    args = ap.parse_args()

    layer_types = parse_layer_types(args.layer_types, args.layers)
    n_hash = max(0, min(args.hash_layers, args.layers))
    mlp_types = ["hash_moe"] * n_hash + ["moe"] * (args.layers - n_hash)
    points = parse_points(args.points)
    impls = [s.strip() for s in args.experts_impls.split(",") if s.strip()]
    wbytes = model_bytes(layer_types)
    log(f"depth {args.layers}: {[SHORT[t] for t in layer_types]}, mlp {mlp_types}; "
        f"BF16 weights ~{wbytes / 1e9:.1f} GB ({layer_params(CSA) * 2 / 1e9:.2f} GB per CSA layer)")
    for b, l in points:
        c = plan_prefill(b, l, args.prefill_mem_gb * 1e9, args.max_prefill_tokens)
        log(f"  plan B={b} L={l}: prefill chunk {c} ({-(-l // c)} forwards, ~{prefill_temp_bytes(b, c, l) / 1e9:.1f} GB "
            f"temporaries)")
    if args.plan:
        return 0
    if args.steps < 10:
        log("note: fewer than 10 timed steps requested")

    doc = {"tool": "tools/peer/transformers_decode.py", "source": "transformers",
           "depth": args.layers, "layer_types": [SHORT[t] for t in layer_types], "mlp_layer_types": mlp_types,
           "attn_impl": "eager", "experts_impls": impls, "dtype": "bfloat16",
           "shapes": {k: v for k, v in FLASH.items() if k not in ("rope_parameters",)},
           "weights_gb_estimate": round(wbytes / 1e9, 2), "python": platform.python_version(),
           "argv": sys.argv[1:], "notes": [], "records": []}
    notes = doc["notes"]

    def write():
        d = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(d, exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, args.out)

    hf = import_hf()
    torch = hf.torch
    doc.update(torch=torch.__version__, transformers=hf.transformers.__version__, **gpu_info(torch))
    log(f"torch {torch.__version__}, transformers {hf.transformers.__version__}, {doc['gpu']}, "
        f"driver {doc['driver']}, CUDA {doc['cuda_runtime']}")
    t = time.time()
    cfg, model, kinds = build_model(hf, args, layer_types, mlp_types)
    doc["build_s"] = round(time.time() - t, 2)
    doc["param_bytes_by_dtype"] = dtype_bytes(model)
    doc["fill"] = kinds
    doc["shapes_seen"] = shape_summary(model)
    doc["memory_after_build"] = mem_gb(torch)
    doc["cache_layers"] = [type(l).__name__ for l in getattr(hf.DynamicCache(config=model.config), "layers", [])]
    log(f"built in {doc['build_s']} s; params by dtype (GB) "
        f"{ {k: round(v / 1e9, 2) for k, v in doc['param_bytes_by_dtype'].items()} }; memory {doc['memory_after_build']}")
    log(f"shapes {doc['shapes_seen']}; cache layers {doc['cache_layers']}")
    half_free = doc["memory_after_build"]["free_gb"] * 0.5
    if args.prefill_mem_gb > half_free:
        log(f"prefill temporaries budget clamped from {args.prefill_mem_gb} to {half_free:.1f} GB")
        args.prefill_mem_gb = half_free
    doc["prefill_mem_gb"] = round(args.prefill_mem_gb, 1)
    write()

    ok_impls = []
    for impl in impls:
        try:
            eff, finite = probe_impl(hf, model, impl, notes)
            log(f"probe experts={impl}: effective {eff}, finite logits {finite}")
            if eff[1] != impl:
                notes.append(f"experts implementation {impl} became {eff[1]}")
            ok_impls.append(impl)
        except Exception as e:  # noqa: BLE001
            msg = f"probe experts={impl} failed: {type(e).__name__}: {e}"[:500]
            notes.append(msg)
            log(msg)
            traceback.print_exc()
        gc.collect()
        torch.cuda.empty_cache()
    write()
    if not ok_impls:
        log("no usable experts implementation; stopping")
        return 1

    deadline = T0 + args.time_budget_s
    history = []  # (batch, context, prefill seconds) of the points run, to skip those that cannot finish
    for b, l in points:
        base = dict(batch=b, context=l, depth=args.layers, layer_types=doc["layer_types"], attn_impl="eager")
        left = deadline - time.time()
        pred = predict_prefill_s(history, b, l)
        if left <= 0 or (pred is not None and pred > left):
            why = (f"time budget: {max(left, 0):.0f} s left, predicted prefill {pred:.0f} s"
                   if pred is not None else "time budget spent")
            for impl in impls:
                doc["records"].append(dict(base, experts_impl=impl, status="skipped", skip_reason=why))
            log(f"skip B={b} L={l}: {why}")
            write()
            continue
        try:
            recs = run_point(hf, model, args, b, l, ok_impls, notes, deadline)
            for r in recs:
                doc["records"].append(dict(base, **r))
            history.append((b, l, recs[0]["prefill_s"]))
        except Exception as e:  # noqa: BLE001
            oom = isinstance(e, torch.cuda.OutOfMemoryError)
            timeout = isinstance(e, TimeoutError)
            status = "oom" if oom else ("skipped" if timeout else "error")
            why = f"{type(e).__name__}: {e}"[:500]
            if oom:
                why += f" (prefill chunk {plan_prefill(b, l, args.prefill_mem_gb * 1e9, args.max_prefill_tokens)})"
            for impl in ok_impls:
                doc["records"].append(dict(base, experts_impl=impl, status=status, skip_reason=why))
            log(f"B={b} L={l}: {status}: {why}")
            if not (oom or timeout):
                traceback.print_exc()
        for impl in impls:
            if impl not in ok_impls:
                doc["records"].append(dict(base, experts_impl=impl, status="error",
                                           skip_reason="implementation failed its probe (see notes)"))
        gc.collect()
        torch.cuda.empty_cache()
        write()

    doc["total_s"] = round(time.time() - T0, 1)
    write()
    log(f"wrote {args.out}")
    print(f"{'batch':>6} {'context':>8} {'experts':>11} {'median ms':>10} {'p10':>9} {'p90':>9} "
          f"{'ms/layer':>9} {'tok/s':>9}  status")
    for r in doc["records"]:
        if r.get("status") == "ok":
            print(f"{r['batch']:>6} {r['context']:>8} {r['experts_impl']:>11} {r['median_ms']:>10.3f} "
                  f"{r['p10_ms']:>9.3f} {r['p90_ms']:>9.3f} {r['per_layer_ms']:>9.3f} {r['tokens_per_s']:>9.1f}  ok")
        else:
            print(f"{r['batch']:>6} {r['context']:>8} {r['experts_impl']:>11} {'-':>10} {'-':>9} {'-':>9} "
                  f"{'-':>9} {'-':>9}  {r.get('status')}: {r.get('skip_reason', '')[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
