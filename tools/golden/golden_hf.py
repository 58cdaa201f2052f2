"""The transformers side: importing and building DeepseekV4ForCausalLM, eager forward, hooks that
capture per-layer outputs and indexer selections, margins.

Part of tools/golden/make_golden.py (see its docstring)."""

import numpy as np

from golden_common import log
from golden_configs import COMPRESSED_ROWS, INDEXER_MARGIN_MIN, ROUTER_MARGIN_MIN
from golden_names import hf_tensor_values, make_weights


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
