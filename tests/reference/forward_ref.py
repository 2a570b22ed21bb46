#!/usr/bin/python3
"""forward_ref.py - float64 reference forward pass for llama, qwen2 and qwen3.

The engine's logits are checked against this file.  It is written from the
architecture definitions, not from src/, and computes in float64 from the
dequantized weights, so it is the exact-math answer for a given GGUF file:

    x = token_embd[token]                                        (T, n_embd)
    for each layer:
        h = rmsnorm(x) * attn_norm
        q = Wq h (+ bq)   k = Wk h (+ bk)   v = Wv h (+ bv)          biases: qwen2
        q, k = rmsnorm_per_head(q) * q_norm, ... * k_norm          qwen3
        q, k = rope(q, pos), rope(k, pos)       first n_rot dims of each head
               llama: pairs (2i, 2i+1); qwen2/qwen3: pairs (i, i + n_rot/2)
               angle_i = pos * freq_base^(-2i / n_rot)
        o_h = softmax(q_h K_g^T / sqrt(head_dim), causal) V_g,  g = h / (n_head / n_head_kv)
        x = x + Wo o
        h = rmsnorm(x) * ffn_norm
        x = x + Wdown(silu(Wgate h) * Wup h)
    logits = output(rmsnorm(x) * output_norm)    output = token_embd when output.weight is absent

    rmsnorm(x) = x / sqrt(mean(x^2) + eps)

Two kinds of switch exist only for testing the test:

  --perturb NAME   deliberately wrong math (swapped rope style, dropped bias,
                   transposed weight, wrong GQA mapping, mis-decoded q4_K,
                   q5_K...).
                   test_reference.sh checks that compare.py rejects each of
                   these, which proves the tolerances can catch such bugs.
  --emulate-act T / --emulate-kv T
                   round the input of every matmul the way the engine does
                   (q8_0 blocks, q8_K blocks, bf16) and K/V to the cache type.
                   The emulated-minus-exact difference is the error a correct
                   engine is expected to show; README.md derives the
                   tolerances from it.

Usage:
    forward_ref.py MODEL --tokens 1,2,3 -o OUT.npy [--perturb NAME]
                   [--emulate-act auto|f32|bf16|q8_0|q8_k] [--emulate-kv f32|f16|bf16]
    forward_ref.py --selftest
OUT.npy holds float64 logits of shape (n_tokens, n_vocab).
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_ref  # noqa: E402

PERTURBATIONS = {
    "rope_style": "rotate interleaved pairs where halves are right, and vice versa",
    "rope_base": "RoPE base frequency 10x too large",
    "rope_q_pos": "q rotated at position p + 1, k at p (a uniform shift of both is invisible)",
    "no_bias": "drop the q/k/v biases (qwen2)",
    "no_qk_norm": "skip the per-head q/k RMSNorm (qwen3)",
    "gqa_mod": "query head h uses kv head h % n_head_kv instead of h / group",
    "transpose_wq": "use Wq transposed",
    "transpose_wo": "use Wo transposed",
    "swap_gate_up": "swap ffn_gate and ffn_up",
    "no_causal": "attention sees future tokens",
    "attn_scale": "scale scores by 1/head_dim instead of 1/sqrt(head_dim)",
    "norm_eps": "RMSNorm epsilon 1e-2",
    "q4k_scales": "q4_K: swap the high 2 bits of the scales and mins of sub-blocks 4..7",
    "q4k_nibbles": "q4_K: low nibble = second sub-block of each 64-chunk",
    "q5k_high": "q5_K: fifth bit of sub-block j taken from bit j ^ 1 of qh",
    "q6k_high": "q6_K: high 2 bits taken from the wrong qh shift",
    "q4_0_offset": "q4_0: values offset by -7 instead of -8",
    "tied_output": "use token_embd as output even when output.weight exists",
}


class Model:
    """Hyper-parameters and tensors of one GGUF model file."""

    def __init__(self, path):
        self.file = gguf_ref.GGUFFile(path)
        md = self.file.metadata
        arch = md.get("general.architecture")
        if arch not in ("llama", "qwen2", "qwen3"):
            raise gguf_ref.GGUFError("unsupported general.architecture %r" % (arch,))
        self.arch = arch

        def key(name, default=None):
            v = md.get("%s.%s" % (arch, name), default)
            if v is None:
                raise gguf_ref.GGUFError("missing metadata key '%s.%s'" % (arch, name))
            return v

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.n_ff = int(key("feed_forward_length"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(key("rope.dimension_count", self.head_dim))
        self.eps = float(key("attention.layer_norm_rms_epsilon", 1e-6))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.neox = arch in ("qwen2", "qwen3")
        self.qkv_bias = arch == "qwen2"
        self.qk_norm = arch == "qwen3"
        if self.n_head % self.n_head_kv:
            raise gguf_ref.GGUFError("head_count %d not a multiple of head_count_kv %d"
                                     % (self.n_head, self.n_head_kv))
        self.t = self.file.tensors
        emb = self.tensor("token_embd.weight")
        self.n_vocab = emb.shape[0]
        self.tied = "output.weight" not in self.t
        self.cache_output = False   # keep the decoded output matrix between forward() calls
        self.cache = {}             # name -> decoded float64 matrix

    def tensor(self, name):
        if name not in self.t:
            raise gguf_ref.GGUFError("missing tensor '%s'" % name)
        return self.t[name]

    def weight_types(self):
        return sorted({t.type_name for t in self.t.values() if len(t.ne) > 1})


# --- numerics helpers -------------------------------------------------------------------------

def round_bf16(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def round_kv(x, kv):
    if kv == "f16":
        return x.astype(np.float16).astype(np.float64)
    if kv == "bf16":
        return round_bf16(x)
    return x.astype(np.float32).astype(np.float64)


# How the engine rounds the input of a matmul, by the weight's type.
ACT_FOR_WEIGHT = {"f32": "f32", "f16": "f32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q8_0",
                  "q4_k": "q8_k", "q5_k": "q8_k", "q6_k": "q8_k"}


def quant_act(x, act):
    """Rounds activations (T, n) the way the engine quantizes matmul inputs."""
    if act == "f64":
        return x
    if act == "f32":
        return x.astype(np.float32).astype(np.float64)
    if act == "bf16":
        return round_bf16(x)
    if act in ("q8_0", "q8_k"):
        blk = 32 if act == "q8_0" else 256
        xb = x.reshape(x.shape[0], -1, blk)
        if act == "q8_0":
            d = np.abs(xb).max(axis=2, keepdims=True) / 127.0
            d = d.astype(np.float16).astype(np.float64)   # q8_0 keeps d as f16
            lim = 127
        else:
            i = np.abs(xb).argmax(axis=2)[..., None]
            mx = np.take_along_axis(xb, i, axis=2)          # signed value of largest magnitude
            d = mx / -128.0                                 # q8_K keeps d as f32
            d = d.astype(np.float32).astype(np.float64)
            lim = 127
        safe = np.where(d == 0, 1.0, d)
        q = np.clip(np.rint(xb / safe), -128, lim)
        return (np.where(d == 0, 0.0, q * d)).reshape(x.shape)
    raise ValueError("unknown activation type %r" % act)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_rot, base, neox):
    """x: (T, n_heads, head_dim); rotates the first n_rot dims of each head."""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)               # (half)
    ang = pos[:, None].astype(np.float64) * inv[None, :]         # (T, half)
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


# --- weights with optional deliberate decoding errors -----------------------------------------

def load_weight(model, name, perturb, rows=None):
    """Dequantized float64 weight; perturb may mis-decode it on purpose."""
    t = model.tensor(name)
    if perturb in ("q4k_scales", "q4k_nibbles") and t.type == gguf_ref.T_Q4_K:
        return _misdecode_q4k(t, perturb, rows)
    if perturb == "q5k_high" and t.type == gguf_ref.T_Q5_K:
        raw = _rows_raw(t, rows).reshape(-1, 176).copy()
        qh = raw[:, 16:48]
        raw[:, 16:48] = ((qh & 0x55) << 1) | ((qh >> 1) & 0x55)   # sub-blocks 2i <-> 2i + 1
        return gguf_ref.dequantize(raw.reshape(-1), t.type).reshape(-1, t.ne[0])
    if perturb == "q6k_high" and t.type == gguf_ref.T_Q6_K:
        raw = _rows_raw(t, rows).reshape(-1, 210).copy()
        qh = raw[:, 128:192]
        raw[:, 128:192] = ((qh & 0x0F) << 4) | (qh >> 4)   # quarters 0,1 <-> 2,3 high bits
        return gguf_ref.dequantize(raw.reshape(-1), t.type).reshape(-1, t.ne[0])
    if perturb == "q4_0_offset" and t.type == gguf_ref.T_Q4_0:
        raw = _rows_raw(t, rows).reshape(-1, 18)
        d = gguf_ref.f16_to_float(raw[:, 0:2].copy().view("<u2").reshape(-1))[:, None]
        return (gguf_ref.dequantize(raw.reshape(-1), t.type).reshape(-1, 32) + d).reshape(
            -1, t.ne[0])
    w = t.dequant(rows=rows)
    return w


def _misdecodes(perturb, t):
    """True if perturbation `perturb` changes how tensor t is decoded."""
    return ((perturb in ("q4k_scales", "q4k_nibbles") and t.type == gguf_ref.T_Q4_K)
            or (perturb == "q5k_high" and t.type == gguf_ref.T_Q5_K)
            or (perturb == "q6k_high" and t.type == gguf_ref.T_Q6_K)
            or (perturb == "q4_0_offset" and t.type == gguf_ref.T_Q4_0))


def _rows_raw(t, rows):
    raw = t.data.reshape(t.n_rows, t.row_bytes())
    if rows is not None:
        raw = raw[rows]
    return np.ascontiguousarray(raw)


def _misdecode_q4k(t, how, rows):
    raw = _rows_raw(t, rows).reshape(-1, 144)
    n = raw.shape[0]
    d = gguf_ref.f16_to_float(raw[:, 0:2].copy().view("<u2").reshape(-1))[:, None, None]
    dmin = gguf_ref.f16_to_float(raw[:, 2:4].copy().view("<u2").reshape(-1))[:, None, None]
    s, m = gguf_ref.q4k_scale_min(raw[:, 4:16])
    if how == "q4k_scales":
        sc = raw[:, 4:16].astype(np.int64)
        s[:, 4:8] = (sc[:, 8:12] & 0x0F) | ((sc[:, 4:8] >> 6) << 4)
        m[:, 4:8] = (sc[:, 8:12] >> 4) | ((sc[:, 0:4] >> 6) << 4)
    qs = raw[:, 16:144].reshape(n, 4, 32)
    if how == "q4k_nibbles":
        q = np.stack([qs >> 4, qs & 0x0F], axis=2)
    else:
        q = np.stack([qs & 0x0F, qs >> 4], axis=2)
    q = q.reshape(n, 8, 32).astype(np.float64)
    x = d * s[:, :, None] * q - dmin * m[:, :, None]
    return x.reshape(-1, t.ne[0])


# --- the forward pass -------------------------------------------------------------------------

def forward(model, tokens, perturb=None, act="f64", kv="f64", out_chunk=4096):
    """Returns float64 logits (T, n_vocab) for token ids `tokens`."""
    M = model
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 1 or tokens.size == 0:
        raise ValueError("tokens must be a non-empty list")
    if tokens.min() < 0 or tokens.max() >= M.n_vocab:
        raise ValueError("token id out of range [0, %d)" % M.n_vocab)
    T = tokens.size
    hd, nh, nkv = M.head_dim, M.n_head, M.n_head_kv
    eps = 1e-2 if perturb == "norm_eps" else M.eps
    base = M.rope_base * (10.0 if perturb == "rope_base" else 1.0)
    neox = (not M.neox) if perturb == "rope_style" else M.neox
    pos = np.arange(T)
    qpos = pos + (1 if perturb == "rope_q_pos" else 0)
    W = lambda name, rows=None: load_weight(M, name, perturb, rows)  # noqa: E731
    f32 = lambda name: M.tensor(name).dequant()                      # noqa: E731

    def mm_in(x, name):
        """x rounded as the engine rounds the input of a matmul with weight `name`."""
        a = act
        if a == "auto":
            a = ACT_FOR_WEIGHT[M.tensor(name).type_name]
        return quant_act(x, a)

    # Only the rows of the prompt's tokens are decoded from token_embd.
    uniq, inv = np.unique(tokens, return_inverse=True)
    x = W("token_embd.weight", rows=uniq)[inv]                     # (T, n_embd)

    for il in range(M.n_layer):
        p = "blk.%d." % il
        h = rmsnorm(x, f32(p + "attn_norm.weight"), eps)
        wq = W(p + "attn_q.weight")
        if perturb == "transpose_wq":
            if wq.shape[0] != wq.shape[1]:
                raise ValueError("transpose_wq needs a square Wq")
            wq = wq.T
        q = mm_in(h, p + "attn_q.weight") @ wq.T                           # (T, nh*hd)
        k = mm_in(h, p + "attn_k.weight") @ W(p + "attn_k.weight").T       # (T, nkv*hd)
        v = mm_in(h, p + "attn_v.weight") @ W(p + "attn_v.weight").T       # (T, nkv*hd)
        if M.qkv_bias and perturb != "no_bias":
            q = q + f32(p + "attn_q.bias")
            k = k + f32(p + "attn_k.bias")
            v = v + f32(p + "attn_v.bias")
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, nkv, hd)
        v = v.reshape(T, nkv, hd)
        if M.qk_norm and perturb != "no_qk_norm":
            q = rmsnorm(q, f32(p + "attn_q_norm.weight"), eps)
            k = rmsnorm(k, f32(p + "attn_k_norm.weight"), eps)
        q = rope(q, qpos, M.n_rot, base, neox)
        k = rope(k, pos, M.n_rot, base, neox)
        if kv != "f64":
            # the engine caches K after RoPE, and V, in the KV dtype
            k, v = round_kv(k, kv), round_kv(v, kv)
        if kv == "bf16":
            # over a bf16 cache it rounds the queries and the softmax weights
            # to bf16 too (the products are then exact; the sum is not rounded)
            q = round_bf16(q)

        group = nh // nkv
        scale = 1.0 / hd if perturb == "attn_scale" else 1.0 / np.sqrt(hd)
        causal = np.tril(np.ones((T, T), dtype=bool))
        o = np.empty((T, nh, hd))
        for hh in range(nh):
            g = hh % nkv if perturb == "gqa_mod" else hh // group
            s = (q[:, hh, :] @ k[:, g, :].T) * scale               # (T, T)
            if perturb != "no_causal":
                s = np.where(causal, s, -np.inf)
            s = s - s.max(axis=1, keepdims=True)
            pr = np.exp(s)
            total = pr.sum(axis=1, keepdims=True)
            if kv == "bf16":
                pr = round_bf16(pr)
            o[:, hh, :] = (pr @ v[:, g, :]) / total
        wo = W(p + "attn_output.weight")
        if perturb == "transpose_wo":
            if wo.shape[0] != wo.shape[1]:
                raise ValueError("transpose_wo needs a square Wo")
            wo = wo.T
        x = x + mm_in(o.reshape(T, nh * hd), p + "attn_output.weight") @ wo.T

        h = rmsnorm(x, f32(p + "ffn_norm.weight"), eps)
        gate_name, up_name = p + "ffn_gate.weight", p + "ffn_up.weight"
        if perturb == "swap_gate_up":
            gate_name, up_name = up_name, gate_name
        a = silu(mm_in(h, gate_name) @ W(gate_name).T) * (mm_in(h, up_name) @ W(up_name).T)
        x = x + mm_in(a, p + "ffn_down.weight") @ W(p + "ffn_down.weight").T   # a: (T, n_ff)

    out_name = "token_embd.weight" if (M.tied or perturb == "tied_output") else "output.weight"
    h = mm_in(rmsnorm(x, f32("output_norm.weight"), eps), out_name)        # (T, n_embd)
    out_t = M.tensor(out_name)
    logits = np.empty((T, out_t.shape[0]))
    if M.cache_output and not _misdecodes(perturb, out_t):
        # Repeated runs over one model (calibrate.py) decode the output matrix once.
        if out_name not in M.cache:
            M.cache[out_name] = out_t.dequant()
        return h @ M.cache[out_name].T
    for r0 in range(0, out_t.shape[0], out_chunk):
        r1 = min(r0 + out_chunk, out_t.shape[0])
        logits[:, r0:r1] = h @ W(out_name, rows=slice(r0, r1)).T
    return logits


# --- an independent token-by-token implementation for the self-test ---------------------------

def forward_incremental(model, tokens):
    """Decodes one token at a time with an explicit K/V cache and scalar
    loops over heads and pair indices; shares only the weight decoding with
    forward().  Slow; for tiny synthetic models."""
    M = model
    hd = M.head_dim
    wt = {n: t.dequant() for n, t in M.t.items()}
    kcache = [[] for _ in range(M.n_layer)]
    vcache = [[] for _ in range(M.n_layer)]
    out = []

    def norm(vec, w):
        return vec / np.sqrt(np.dot(vec, vec) / vec.size + M.eps) * w

    def rot(vec, p):
        vec = vec.copy()
        for i in range(M.n_rot // 2):
            ang = p * M.rope_base ** (-2.0 * i / M.n_rot)
            if M.neox:
                a, b = i, i + M.n_rot // 2
            else:
                a, b = 2 * i, 2 * i + 1
            x0, x1 = vec[a], vec[b]
            vec[a] = x0 * np.cos(ang) - x1 * np.sin(ang)
            vec[b] = x0 * np.sin(ang) + x1 * np.cos(ang)
        return vec

    for p, tok in enumerate(tokens):
        x = wt["token_embd.weight"][tok].copy()
        for il in range(M.n_layer):
            b = "blk.%d." % il
            h = norm(x, wt[b + "attn_norm.weight"])
            q = wt[b + "attn_q.weight"].dot(h)
            k = wt[b + "attn_k.weight"].dot(h)
            v = wt[b + "attn_v.weight"].dot(h)
            if M.qkv_bias:
                q += wt[b + "attn_q.bias"]
                k += wt[b + "attn_k.bias"]
                v += wt[b + "attn_v.bias"]
            qh = [q[i * hd:(i + 1) * hd] for i in range(M.n_head)]
            kh = [k[i * hd:(i + 1) * hd] for i in range(M.n_head_kv)]
            vh = [v[i * hd:(i + 1) * hd] for i in range(M.n_head_kv)]
            if M.qk_norm:
                qh = [norm(z, wt[b + "attn_q_norm.weight"]) for z in qh]
                kh = [norm(z, wt[b + "attn_k_norm.weight"]) for z in kh]
            qh = [rot(z, p) for z in qh]
            kh = [rot(z, p) for z in kh]
            kcache[il].append(kh)
            vcache[il].append(vh)
            o = np.zeros(M.n_head * hd)
            per_kv = M.n_head // M.n_head_kv
            for i in range(M.n_head):
                g = i // per_kv
                sc = np.array([qh[i].dot(kcache[il][t][g]) / np.sqrt(hd) for t in range(p + 1)])
                w = np.exp(sc - sc.max())
                w /= w.sum()
                o[i * hd:(i + 1) * hd] = sum(w[t] * vcache[il][t][g] for t in range(p + 1))
            x = x + wt[b + "attn_output.weight"].dot(o)
            h = norm(x, wt[b + "ffn_norm.weight"])
            gt = wt[b + "ffn_gate.weight"].dot(h)
            up = wt[b + "ffn_up.weight"].dot(h)
            x = x + wt[b + "ffn_down.weight"].dot(gt / (1 + np.exp(-gt)) * up)
        h = norm(x, wt["output_norm.weight"])
        wout = wt["token_embd.weight"] if M.tied else wt["output.weight"]
        out.append(wout.dot(h))
    return np.array(out)


# --- synthetic models --------------------------------------------------------------------------

def make_synthetic_model(path, arch, wtype, n_vocab=1024, n_embd=256, n_layer=2, n_head=4,
                         n_head_kv=2, head_dim=64, n_ff=768, tied=False, seed=0, n_rot=None):
    """Writes a random-weight model GGUF (weights of type name `wtype`, norms
    and biases f32).  Weights ~ N(0, 1/fan_in), embeddings ~ N(0, 1), norm
    gains ~ 1 + N(0, 0.1^2): attention is neither flat nor one-hot."""
    rng = np.random.default_rng(seed)
    tt = gguf_ref.TYPE_BY_NAME[wtype]
    md = {
        "general.architecture": arch,
        "general.name": "synthetic-%s-%s" % (arch, wtype),
        arch + ".context_length": 4096,
        arch + ".embedding_length": n_embd,
        arch + ".block_count": n_layer,
        arch + ".feed_forward_length": n_ff,
        arch + ".attention.head_count": n_head,
        arch + ".attention.head_count_kv": n_head_kv,
        arch + ".attention.key_length": head_dim,
        arch + ".attention.value_length": head_dim,
        arch + ".attention.layer_norm_rms_epsilon": 1e-6,
        arch + ".rope.freq_base": 10000.0 if arch == "llama" else 1000000.0,
        arch + ".rope.dimension_count": n_rot or head_dim,
    }
    tensors = []

    def add(name, arr, ttype):
        arr = np.asarray(arr)
        tensors.append((name, list(reversed(arr.shape)), ttype, gguf_ref.quantize(arr, ttype)))

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def gain(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    add("token_embd.weight", rng.standard_normal((n_vocab, n_embd)), tt)
    for il in range(n_layer):
        p = "blk.%d." % il
        add(p + "attn_norm.weight", gain(n_embd), gguf_ref.T_F32)
        add(p + "attn_q.weight", mat(n_head * head_dim, n_embd), tt)
        add(p + "attn_k.weight", mat(n_head_kv * head_dim, n_embd), tt)
        add(p + "attn_v.weight", mat(n_head_kv * head_dim, n_embd), tt)
        if arch == "qwen2":
            add(p + "attn_q.bias", 0.5 * rng.standard_normal(n_head * head_dim), gguf_ref.T_F32)
            add(p + "attn_k.bias", 0.5 * rng.standard_normal(n_head_kv * head_dim),
                gguf_ref.T_F32)
            add(p + "attn_v.bias", 0.5 * rng.standard_normal(n_head_kv * head_dim),
                gguf_ref.T_F32)
        if arch == "qwen3":
            add(p + "attn_q_norm.weight", gain(head_dim), gguf_ref.T_F32)
            add(p + "attn_k_norm.weight", gain(head_dim), gguf_ref.T_F32)
        add(p + "attn_output.weight", mat(n_embd, n_head * head_dim), tt)
        add(p + "ffn_norm.weight", gain(n_embd), gguf_ref.T_F32)
        add(p + "ffn_gate.weight", mat(n_ff, n_embd), tt)
        add(p + "ffn_up.weight", mat(n_ff, n_embd), tt)
        add(p + "ffn_down.weight", mat(n_embd, n_ff), tt)
    add("output_norm.weight", gain(n_embd), gguf_ref.T_F32)
    if not tied:
        add("output.weight", mat(n_vocab, n_embd) * 4.0, tt)
    gguf_ref.write_gguf(path, md, tensors)


def selftest(tmpdir):
    rng = np.random.default_rng(7)
    n = 0
    for arch in ("llama", "qwen2", "qwen3"):
        for tied, wtype, n_rot in ((False, "f32", None), (True, "q4_k", 32), (False, "q5_k", None)):
            path = os.path.join(tmpdir, "syn_%s_%s.gguf" % (arch, wtype))
            make_synthetic_model(path, arch, wtype, n_vocab=512, n_embd=256, n_layer=2,
                                 n_head=4, n_head_kv=2, head_dim=64, n_ff=512, tied=tied,
                                 seed=n, n_rot=n_rot)
            m = Model(path)
            if m.tied != tied:
                raise AssertionError("selftest: tied detection")
            toks = rng.integers(0, 512, 9)
            a = forward(m, toks, out_chunk=100)
            b = forward_incremental(m, toks)
            err = np.abs(a - b).max() / np.abs(b).max()
            if not err < 1e-12:
                raise AssertionError("selftest %s/%s: batched vs incremental differ by %.3g"
                                     % (arch, wtype, err))
            # causality: changing the last token leaves earlier positions alone
            toks2 = toks.copy()
            toks2[-1] = (toks2[-1] + 1) % 512
            c = forward(m, toks2)
            if not (np.array_equal(a[:-1], c[:-1]) and not np.allclose(a[-1], c[-1])):
                raise AssertionError("selftest %s: causality" % arch)
            # every perturbation that applies changes the answer
            for pname in PERTURBATIONS:
                if pname == "no_bias" and arch != "qwen2":
                    continue
                if pname == "no_qk_norm" and arch != "qwen3":
                    continue
                if pname == "tied_output" and tied:
                    continue
                if pname.startswith(("q6k", "q4_0")) or (pname.startswith("q4k")
                                                         and wtype != "q4_k"):
                    continue
                if pname.startswith("q5k") and wtype != "q5_k":
                    continue
                d = forward(m, toks, perturb=pname)
                if np.abs(d - a).max() < 1e-6 * np.abs(a).max():
                    raise AssertionError("selftest %s: perturbation %s has no effect"
                                         % (arch, pname))
            n += 1
    return n


def parse_tokens(s):
    try:
        toks = [int(t) for t in s.split(",") if t.strip()]
    except ValueError:
        raise SystemExit("error: --tokens must be comma-separated integers")
    if not toks:
        raise SystemExit("error: --tokens is empty")
    return toks


def main(argv):
    ap = argparse.ArgumentParser(description="float64 reference logits for a GGUF model")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens")
    ap.add_argument("-o", "--out")
    ap.add_argument("--perturb", choices=sorted(PERTURBATIONS))
    ap.add_argument("--emulate-act", default="f64",
                    choices=["f64", "auto", "f32", "bf16", "q8_0", "q8_k"],
                    help="auto: as the engine does for each weight's type")
    ap.add_argument("--emulate-kv", default="f64", choices=["f64", "f32", "f16", "bf16"])
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--info", action="store_true", help="print hyper-parameters")
    args = ap.parse_args(argv[1:])
    if args.selftest:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            t0 = time.time()
            k = selftest(d)
        print("forward_ref selftest: %d models checked (%.1fs)" % (k, time.time() - t0))
        return 0
    if not args.model or (not args.info and (not args.tokens or not args.out)):
        ap.error("need MODEL --tokens LIST -o OUT (or --selftest)")
    try:
        m = Model(args.model)
    except gguf_ref.GGUFError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    if args.info:
        print("arch %s vocab %d embd %d layers %d heads %d/%d head_dim %d rot %d ff %d "
              "eps %g base %g tied %s types %s"
              % (m.arch, m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv, m.head_dim,
                 m.n_rot, m.n_ff, m.eps, m.rope_base, m.tied, ",".join(m.weight_types())))
        if not args.tokens:
            return 0
    try:
        logits = forward(m, parse_tokens(args.tokens), perturb=args.perturb,
                         act=args.emulate_act, kv=args.emulate_kv)
    except (gguf_ref.GGUFError, ValueError) as e:
        # wrong tensor shapes surface here as numpy shape errors
        print("error: %s: %s" % (args.model, e), file=sys.stderr)
        return 1
    np.save(args.out, logits)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
