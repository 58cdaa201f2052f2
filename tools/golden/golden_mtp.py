"""The MTP block (spec §2.11). transformers ignores mtp.* on load and has no module for it, so the
block is assembled here from transformers' own pieces, as the reference MTPBlock defines it: a
DeepseekV4DecoderLayer built as one more layer (sliding window, learned routing), e_proj / h_proj,
enorm / hnorm / norm and a DeepseekV4HyperHead, with the main model's embedding and LM head. This is
a second implementation of the spec's block, not an independent oracle.

Part of tools/golden/make_golden.py (see its docstring)."""

import json
import sys

import numpy as np

from golden_common import log, maxdiff
from golden_configs import LOGIT_LENGTHS, PROBE_POSITIONS
from golden_hf import force_eager
from golden_names import encode_official, hf_tensor_values, official_plan, random_value, storage_kind
from golden_safetensors import ent_f32, ent_i64


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
