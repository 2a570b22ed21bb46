#!/usr/bin/python3
"""gguf_ref.py - an independent GGUF v3 reader and dequantizer in numpy.

This file is the weight side of the numeric reference: it must not share code
or assumptions with the engine's C reader, so it is written from the published
format definitions (the GGUF specification and the ggml block layouts), not
from src/.  Everything is little-endian.

File layout (GGUF v3)::

    u32 magic "GGUF" | u32 version (3) | u64 n_tensors | u64 n_kv
    n_kv x      { string key | u32 value type | value }
    n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type
                  | u64 offset (relative to the data section) }
    padding to general.alignment (default 32)
    data section: each tensor at its offset, which is a multiple of alignment

    string = u64 length + bytes (no terminator)
    array  = u32 element type + u64 count + elements

ne[0] is the fastest-varying dimension (the row length), so a GGUF tensor with
ne = [n_embd, n_vocab] is the numpy array of shape (n_vocab, n_embd).

Block layouts (one block of a quantized row; rows are whole blocks)::

    q8_0  32 elems, 34 B:  f16 d | i8 q[32]               x = d * q
    q4_0  32 elems, 18 B:  f16 d | u8 qs[16]              x[j]    = d * (lo(qs[j]) - 8)
                                                          x[j+16] = d * (hi(qs[j]) - 8)
    q4_K 256 elems, 144 B: f16 d | f16 dmin | u8 sc[12] | u8 qs[128]
        8 sub-blocks of 32, each with a 6-bit scale s and 6-bit min m packed
        in sc: sub-block j < 4:  s = sc[j] & 63,     m = sc[j+4] & 63
                          j >= 4: s = lo(sc[j+4]) | (sc[j-4] >> 6) << 4
                                  m = hi(sc[j+4]) | (sc[j]   >> 6) << 4
        qs byte 32c + l holds element 64c + l (low nibble, sub-block 2c)
        and element 64c + 32 + l (high nibble, sub-block 2c + 1);
        x = d * s * q - dmin * m
    q5_K 256 elems, 176 B: f16 d | f16 dmin | u8 sc[12] | u8 qh[32] | u8 qs[128]
        scales, mins and qs nibbles exactly as q4_K; element e = 32j + l
        (sub-block j, l < 32) adds a fifth bit: q = nibble | ((qh[l] >> j) & 1) << 4,
        0..31; x = d * s * q - dmin * m
    q6_K 256 elems, 210 B: u8 ql[128] | u8 qh[64] | i8 sc[16] | f16 d
        two halves h of 128 elements; in half h, for l < 32, with
        L = ql[64h:], H = qh[32h:]:
            e = 128h + l      : lo(L[l])      | ((H[l] >> 0) & 3) << 4
            e = 128h + 32 + l : lo(L[l + 32]) | ((H[l] >> 2) & 3) << 4
            e = 128h + 64 + l : hi(L[l])      | ((H[l] >> 4) & 3) << 4
            e = 128h + 96 + l : hi(L[l + 32]) | ((H[l] >> 6) & 3) << 4
        x[e] = d * sc[e // 16] * (q - 32)

Tensor data is exposed as numpy views over one read-only memory map, so
opening a 300 MB model costs nothing until rows are dequantized.  Malformed
files raise GGUFError naming the field and offset; nothing here asserts on
file contents.

Run as a script: ``gguf_ref.py --selftest`` checks the reader and every
dequantizer on synthetic files written here; ``gguf_ref.py FILE`` prints a
summary of a model file.
"""

import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml tensor type ids (the numbering is part of the file format).
T_F32 = 0
T_F16 = 1
T_Q4_0 = 2
T_Q8_0 = 8
T_Q4_K = 12
T_Q5_K = 13
T_Q6_K = 14
T_BF16 = 30

# type id -> (name, elements per block, bytes per block)
TYPES = {
    T_F32: ("f32", 1, 4),
    T_F16: ("f16", 1, 2),
    T_Q4_0: ("q4_0", 32, 18),
    T_Q8_0: ("q8_0", 32, 34),
    T_Q4_K: ("q4_k", 256, 144),
    T_Q5_K: ("q5_k", 256, 176),
    T_Q6_K: ("q6_k", 256, 210),
    T_BF16: ("bf16", 1, 2),
}
TYPE_BY_NAME = {v[0]: k for k, v in TYPES.items()}

# metadata value types
V_U8, V_I8, V_U16, V_I16, V_U32, V_I32, V_F32, V_BOOL = 0, 1, 2, 3, 4, 5, 6, 7
V_STRING, V_ARRAY, V_U64, V_I64, V_F64 = 8, 9, 10, 11, 12
SCALAR_FMT = {
    V_U8: "<B", V_I8: "<b", V_U16: "<H", V_I16: "<h", V_U32: "<I", V_I32: "<i",
    V_F32: "<f", V_BOOL: "<?", V_U64: "<Q", V_I64: "<q", V_F64: "<d",
}
SCALAR_DTYPE = {
    V_U8: "<u1", V_I8: "<i1", V_U16: "<u2", V_I16: "<i2", V_U32: "<u4", V_I32: "<i4",
    V_F32: "<f4", V_BOOL: "<u1", V_U64: "<u8", V_I64: "<i8", V_F64: "<f8",
}


class GGUFError(ValueError):
    """A malformed or unsupported GGUF file."""


class Tensor:
    """One tensor's directory entry plus a uint8 view of its bytes."""

    def __init__(self, name, ne, ttype, offset):
        self.name = name      # tensor name, e.g. "blk.0.attn_q.weight"
        self.ne = ne          # GGUF dims, ne[0] fastest
        self.type = ttype     # ggml type id
        self.offset = offset  # byte offset inside the data section
        self.data = None      # uint8 view over the mapping, set by GGUFFile

    @property
    def shape(self):
        """numpy shape (slowest first)."""
        return tuple(reversed(self.ne))

    @property
    def type_name(self):
        return TYPES[self.type][0]

    @property
    def n_rows(self):
        n = 1
        for d in self.ne[1:]:
            n *= d
        return n

    def row_bytes(self):
        _, blck, size = TYPES[self.type]
        return self.ne[0] // blck * size

    def nbytes(self):
        return self.row_bytes() * self.n_rows

    def dequant(self, rows=None, dtype=np.float64):
        """Returns the tensor as floats, shape (n_rows, ne[0]) for 2-D and
        more, (ne[0],) for 1-D.  rows: optional index array or slice of rows
        to dequantize (the others are not touched)."""
        rb = self.row_bytes()
        raw = self.data.reshape(self.n_rows, rb)
        if rows is not None:
            raw = raw[rows]
        out = dequantize(np.ascontiguousarray(raw).reshape(-1), self.type, dtype)
        if len(self.ne) == 1:
            return out.reshape(self.ne[0])
        return out.reshape(-1, self.ne[0])


class StringArray:
    """A GGUF array of strings, decoded on access.  Compares equal to a list
    of the same strings."""

    def __init__(self, buf, offsets):
        self.buf = buf          # the file's bytes
        self.offsets = offsets  # (n + 1) start of each string's length field; end

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = int(self.offsets[i]) + 8
        b = bytes(self.buf[start:int(self.offsets[i + 1])])
        return b.decode("utf-8", errors="surrogateescape")

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other):
        return list(self) == list(other)


class Reader:
    """Bounds-checked little-endian cursor over a byte buffer."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("truncated file reading %s at offset %d (need %d bytes, have %d)"
                            % (what, self.pos, n, len(self.buf) - self.pos))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt, what):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, what))[0]

    def string(self, what):
        n = self.scalar("<Q", what + " length")
        if n > (1 << 30):
            raise GGUFError("%s: string length %d too large at offset %d" % (what, n, self.pos))
        b = bytes(self.take(n, what))
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            # Token texts may hold raw bytes; keep them rather than fail.
            return b.decode("utf-8", errors="surrogateescape")

    def string_array(self, n, what):
        """Skips over n strings, recording where each starts; the texts are
        decoded only when read (a tokenizer's 400k strings cost nothing
        until then)."""
        unpack = struct.Struct("<Q").unpack_from
        buf, pos, end = self.buf, self.pos, len(self.buf)
        offsets = np.empty(n + 1, dtype=np.int64)
        for i in range(n):
            if pos + 8 > end:
                raise GGUFError("truncated file reading %s element %d at offset %d"
                                % (what, i, pos))
            offsets[i] = pos
            pos += 8 + unpack(buf, pos)[0]
        if pos > end:
            raise GGUFError("truncated file reading %s: strings run past the end" % what)
        offsets[n] = pos
        self.pos = pos
        return StringArray(buf, offsets)

    def value(self, vtype, what, depth=0):
        if vtype in SCALAR_FMT:
            v = self.scalar(SCALAR_FMT[vtype], what)
            return bool(v) if vtype == V_BOOL else v
        if vtype == V_STRING:
            return self.string(what)
        if vtype == V_ARRAY:
            if depth > 2:
                raise GGUFError("%s: arrays nested too deep" % what)
            etype = self.scalar("<I", what + " element type")
            n = self.scalar("<Q", what + " count")
            if etype in SCALAR_DTYPE:
                size = np.dtype(SCALAR_DTYPE[etype]).itemsize
                if n > len(self.buf) // size:
                    raise GGUFError("%s: array count %d exceeds file size" % (what, n))
                arr = np.frombuffer(self.take(n * size, what), dtype=SCALAR_DTYPE[etype])
                return arr.astype(bool) if etype == V_BOOL else arr
            if n > len(self.buf) // 8:
                raise GGUFError("%s: array count %d exceeds file size" % (what, n))
            if etype == V_STRING:
                return self.string_array(n, what)
            if etype == V_ARRAY:
                return [self.value(etype, what, depth + 1) for _ in range(n)]
            raise GGUFError("%s: unknown array element type %d" % (what, etype))
        raise GGUFError("%s: unknown value type %d" % (what, vtype))


class GGUFFile:
    """A parsed GGUF file: .metadata (dict key -> value), .tensors (dict
    name -> Tensor, in file order), .version, .alignment, .data_offset."""

    def __init__(self, path):
        self.path = path
        try:
            self.map = np.memmap(path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise GGUFError("cannot map '%s': %s" % (path, e))
        buf = memoryview(self.map)
        r = Reader(buf)
        magic = bytes(r.take(4, "magic"))
        if magic != GGUF_MAGIC:
            raise GGUFError("'%s': bad magic %r" % (path, magic))
        self.version = r.scalar("<I", "version")
        if self.version not in (2, 3):
            raise GGUFError("'%s': unsupported version %d" % (path, self.version))
        n_tensors = r.scalar("<Q", "tensor count")
        n_kv = r.scalar("<Q", "metadata count")
        if n_tensors > len(buf) // 8 or n_kv > len(buf) // 8:
            raise GGUFError("'%s': counts (%d tensors, %d kv) exceed file size"
                            % (path, n_tensors, n_kv))
        self.metadata = {}
        for i in range(n_kv):
            key = r.string("metadata key %d" % i)
            vtype = r.scalar("<I", "type of '%s'" % key)
            if key in self.metadata:
                raise GGUFError("duplicate metadata key '%s'" % key)
            self.metadata[key] = r.value(vtype, "metadata '%s'" % key)
        self.tensors = {}
        for i in range(n_tensors):
            name = r.string("tensor name %d" % i)
            n_dims = r.scalar("<I", "n_dims of '%s'" % name)
            if n_dims < 1 or n_dims > 4:
                raise GGUFError("tensor '%s': n_dims %d out of range" % (name, n_dims))
            ne = [r.scalar("<Q", "ne of '%s'" % name) for _ in range(n_dims)]
            ttype = r.scalar("<I", "type of '%s'" % name)
            offset = r.scalar("<Q", "offset of '%s'" % name)
            if ttype not in TYPES:
                raise GGUFError("tensor '%s': unsupported type %d" % (name, ttype))
            if any(d < 1 or d > (1 << 40) for d in ne):
                raise GGUFError("tensor '%s': bad dimensions %s" % (name, ne))
            if ne[0] % TYPES[ttype][1]:
                raise GGUFError("tensor '%s': row length %d not a multiple of block %d"
                                % (name, ne[0], TYPES[ttype][1]))
            if name in self.tensors:
                raise GGUFError("duplicate tensor '%s'" % name)
            self.tensors[name] = Tensor(name, ne, ttype, offset)
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align < 1 or align & (align - 1):
            raise GGUFError("general.alignment %r is not a power of two" % (align,))
        self.alignment = align
        self.data_offset = (r.pos + align - 1) // align * align
        for t in self.tensors.values():
            if t.offset % align:
                raise GGUFError("tensor '%s': offset %d not aligned to %d"
                                % (t.name, t.offset, align))
            start = self.data_offset + t.offset
            end = start + t.nbytes()
            if end > len(buf):
                raise GGUFError("tensor '%s': data [%d, %d) past end of file (%d bytes)"
                                % (t.name, start, end, len(buf)))
            t.data = self.map[start:end]

    def get(self, key, default=None):
        return self.metadata.get(key, default)


# --- dequantization ---------------------------------------------------------------------------

def f16_to_float(u16):
    """uint16 array of IEEE half bits -> float64."""
    return np.asarray(u16, dtype="<u2").view(np.float16).astype(np.float64)


def bf16_to_float(u16):
    """uint16 array of bfloat16 bits -> float64 (bf16 is the top half of f32)."""
    return (np.asarray(u16, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


def _blocks(raw, size, name):
    if raw.size % size:
        raise GGUFError("%s data of %d bytes is not whole blocks of %d" % (name, raw.size, size))
    return raw.reshape(-1, size)


def _half(blocks, at):
    """The f16 stored at byte offset at of every block -> float64 column (n, 1)."""
    u = blocks[:, at].astype(np.uint16) | (blocks[:, at + 1].astype(np.uint16) << 8)
    return f16_to_float(u)[:, None]


def dequant_q8_0(raw):
    b = _blocks(raw, 34, "q8_0")
    d = _half(b, 0)
    x = b[:, 2:34].view(np.int8).astype(np.float64)
    x *= d
    return x.reshape(-1)


def dequant_q4_0(raw):
    b = _blocks(raw, 18, "q4_0")
    d = _half(b, 0)
    qs = b[:, 2:18]
    x = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)
    x -= 8.0
    x *= d
    return x.reshape(-1)


def q4k_scale_min(sc):
    """Unpacks the 12 scale bytes of each q4_K block (n, 12) into the 6-bit
    scales and mins of its 8 sub-blocks, two (n, 8) int arrays."""
    sc = sc.astype(np.int64)
    s = np.empty((sc.shape[0], 8), dtype=np.int64)
    m = np.empty((sc.shape[0], 8), dtype=np.int64)
    s[:, 0:4] = sc[:, 0:4] & 63
    m[:, 0:4] = sc[:, 4:8] & 63
    s[:, 4:8] = (sc[:, 8:12] & 0x0F) | ((sc[:, 0:4] >> 6) << 4)
    m[:, 4:8] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return s, m


def dequant_q4_k(raw):
    b = _blocks(raw, 144, "q4_k")
    n = b.shape[0]
    d = _half(b, 0)
    dmin = _half(b, 2)
    s, m = q4k_scale_min(b[:, 4:16])
    qs = b[:, 16:144].reshape(n, 4, 32)              # (block, chunk c, l)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2)       # (block, c, nibble, l): sub-block 2c+nibble
    x = q.reshape(n, 8, 32).astype(np.float64)       # (block, sub-block, l)
    x *= (d * s)[:, :, None]
    x -= (dmin * m)[:, :, None]
    return x.reshape(-1)


def dequant_q5_k(raw):
    b = _blocks(raw, 176, "q5_k")
    n = b.shape[0]
    d = _half(b, 0)
    dmin = _half(b, 2)
    s, m = q4k_scale_min(b[:, 4:16])
    qh = b[:, 16:48]                                 # (block, l): bit j -> sub-block j
    qs = b[:, 48:176].reshape(n, 4, 32)              # (block, chunk c, l)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2)       # (block, c, nibble, l): sub-block 2c+nibble
    q = q.reshape(n, 8, 32).astype(np.int64)         # (block, sub-block j, l)
    high = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1
    x = (q | (high.astype(np.int64) << 4)).astype(np.float64)
    x *= (d * s)[:, :, None]
    x -= (dmin * m)[:, :, None]
    return x.reshape(-1)


def dequant_q6_k(raw):
    b = _blocks(raw, 210, "q6_k")
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 64)                     # (block, half, 64) uint8
    qh = b[:, 128:192].reshape(n, 2, 32)                   # (block, half, 32) uint8
    sc = b[:, 192:208].view(np.int8).astype(np.float64)    # (block, 16)
    d = _half(b, 208)
    q = np.empty((n, 2, 4, 32), dtype=np.uint8)            # (block, half, quarter, l), 0..63
    q[:, :, 0] = (ql[:, :, 0:32] & 0x0F) | (((qh >> 0) & 3) << 4)
    q[:, :, 1] = (ql[:, :, 32:64] & 0x0F) | (((qh >> 2) & 3) << 4)
    q[:, :, 2] = (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4)
    q[:, :, 3] = (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)
    x = q.reshape(n, 16, 16).astype(np.float64)            # element e -> (e // 16, e % 16)
    x -= 32.0
    x *= (d * sc)[:, :, None]
    return x.reshape(-1)


def dequantize(raw, ttype, dtype=np.float64):
    """raw: 1-D uint8 array of whole blocks of type ttype -> 1-D floats."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if ttype == T_F32:
        out = raw.view("<f4")
    elif ttype == T_F16:
        out = raw.view("<f2")
    elif ttype == T_BF16:
        out = bf16_to_float(raw.view("<u2"))
    elif ttype == T_Q8_0:
        out = dequant_q8_0(raw)
    elif ttype == T_Q4_0:
        out = dequant_q4_0(raw)
    elif ttype == T_Q4_K:
        out = dequant_q4_k(raw)
    elif ttype == T_Q5_K:
        out = dequant_q5_k(raw)
    elif ttype == T_Q6_K:
        out = dequant_q6_k(raw)
    else:
        raise GGUFError("unsupported tensor type %d" % ttype)
    return out.astype(dtype)


# --- writer (synthetic files for the self-test and forward_ref's own checks) ------------------

def _w_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _w_value(v):
    """Encodes a python value with an inferred GGUF type; returns (type, bytes)."""
    if isinstance(v, bool):
        return V_BOOL, struct.pack("<?", v)
    if isinstance(v, int):
        if 0 <= v < (1 << 32):
            return V_U32, struct.pack("<I", v)
        return V_I64, struct.pack("<q", v)
    if isinstance(v, float):
        return V_F32, struct.pack("<f", v)
    if isinstance(v, str):
        return V_STRING, _w_string(v)
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], int):
        vtype, x = v  # explicit (type, value)
        if vtype == V_STRING:
            return V_STRING, _w_string(x)
        return vtype, struct.pack(SCALAR_FMT[vtype], x)
    if isinstance(v, np.ndarray):
        for vt, dt in SCALAR_DTYPE.items():
            if vt != V_BOOL and np.dtype(dt) == v.dtype.newbyteorder("<"):
                return V_ARRAY, struct.pack("<IQ", vt, v.size) + v.astype(dt).tobytes()
        raise GGUFError("cannot encode array of %s" % v.dtype)
    if isinstance(v, list):
        parts = [_w_value(x) for x in v]
        etype = parts[0][0] if parts else V_STRING
        if any(p[0] != etype for p in parts):
            raise GGUFError("mixed array element types")
        return V_ARRAY, struct.pack("<IQ", etype, len(v)) + b"".join(p[1] for p in parts)
    raise GGUFError("cannot encode %r" % (v,))


def write_gguf(path, metadata, tensors, alignment=DEFAULT_ALIGNMENT):
    """Writes a GGUF v3 file.  metadata: dict key -> value (see _w_value);
    tensors: list of (name, ne list, type id, raw bytes)."""
    meta = dict(metadata)
    if alignment != DEFAULT_ALIGNMENT:
        meta["general.alignment"] = (V_U32, alignment)
    out = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(tensors), len(meta))]
    for k, v in meta.items():
        vt, vb = _w_value(v)
        out.append(_w_string(k) + struct.pack("<I", vt) + vb)
    offset = 0
    for name, ne, ttype, raw in tensors:
        out.append(_w_string(name) + struct.pack("<I", len(ne))
                   + b"".join(struct.pack("<Q", d) for d in ne)
                   + struct.pack("<IQ", ttype, offset))
        offset += (len(raw) + alignment - 1) // alignment * alignment
    head = b"".join(out)
    pad = (-len(head)) % alignment
    with open(path, "wb") as f:
        f.write(head + b"\0" * pad)
        for _, _, _, raw in tensors:
            f.write(raw)
            f.write(b"\0" * ((-len(raw)) % alignment))


# --- quantizers (used to make synthetic models; not a model of the engine's) ------------------

def quantize(x, ttype, rng=None):
    """Quantizes a float array (rows of whole blocks) to type ttype; returns
    bytes.  Plain round-to-nearest encoders: good enough to make test weights,
    and an independent second path (bytes built element by element from the
    layout) against which the vectorized decoders are checked."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if ttype == T_F32:
        return x.astype("<f4").tobytes()
    if ttype == T_F16:
        return x.astype("<f2").tobytes()
    if ttype == T_BF16:
        bits = x.astype("<f4").view("<u4").astype(np.uint64)
        # round to nearest even on the dropped 16 bits
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype("<u2").tobytes()
    if ttype == T_Q8_0:
        xb = x.reshape(-1, 32)
        d = np.abs(xb).max(axis=1) / 127.0
        d16 = d.astype("<f2")
        inv = np.where(d16 > 0, 1.0 / np.maximum(d16.astype(np.float64), 1e-30), 0.0)
        q = np.clip(np.rint(xb * inv[:, None]), -127, 127).astype(np.int8)
        blocks = np.zeros((xb.shape[0], 34), dtype=np.uint8)
        blocks[:, 0:2] = d16.view(np.uint8).reshape(-1, 2)
        blocks[:, 2:] = q.view(np.uint8)
        return blocks.tobytes()
    if ttype == T_Q4_0:
        xb = x.reshape(-1, 32)
        idx = np.abs(xb).argmax(axis=1)
        mx = xb[np.arange(xb.shape[0]), idx]
        d16 = (mx / -8.0).astype("<f2")
        d = d16.astype(np.float64)
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1.0), 0.0)
        q = np.clip(np.rint(xb * inv[:, None]) + 8, 0, 15).astype(np.uint8)
        blocks = np.zeros((xb.shape[0], 18), dtype=np.uint8)
        blocks[:, 0:2] = d16.view(np.uint8).reshape(-1, 2)
        blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
        return blocks.tobytes()
    if ttype == T_Q4_K:
        return _quantize_q4_k(x)
    if ttype == T_Q5_K:
        return _quantize_q5_k(x)
    if ttype == T_Q6_K:
        return _quantize_q6_k(x)
    raise GGUFError("cannot quantize to type %d" % ttype)


def pack_q4_k(d16, dmin16, s, m, q):
    """Packs q4_K blocks from their fields: d16, dmin16 (n,) float16; s, m
    (n, 8) ints in [0, 63]; q (n, 256) ints in [0, 15]."""
    n = q.shape[0]
    blocks = np.zeros((n, 144), dtype=np.uint8)
    blocks[:, 0:2] = np.asarray(d16, "<f2").view(np.uint8).reshape(-1, 2)
    blocks[:, 2:4] = np.asarray(dmin16, "<f2").view(np.uint8).reshape(-1, 2)
    sc = np.zeros((n, 12), dtype=np.int64)
    for j in range(8):
        if j < 4:
            sc[:, j] |= s[:, j] & 63
            sc[:, j + 4] |= m[:, j] & 63
        else:
            sc[:, j + 4] |= (s[:, j] & 15) | ((m[:, j] & 15) << 4)
            sc[:, j - 4] |= (s[:, j] >> 4) << 6
            sc[:, j] |= (m[:, j] >> 4) << 6
    blocks[:, 4:16] = sc
    for e in range(256):
        c, r = divmod(e, 64)
        if r < 32:
            blocks[:, 16 + 32 * c + r] |= q[:, e].astype(np.uint8)
        else:
            blocks[:, 16 + 32 * c + r - 32] |= (q[:, e] << 4).astype(np.uint8)
    return blocks.tobytes()


def pack_q5_k(d16, dmin16, s, m, q):
    """Packs q5_K blocks from their fields: as pack_q4_k, q (n, 256) ints in
    [0, 31]; the low 4 bits go where q4_K keeps them, bit 4 of element
    32j + l to bit j of qh[l]."""
    n = q.shape[0]
    q = np.asarray(q, dtype=np.int64)
    low = np.frombuffer(pack_q4_k(d16, dmin16, s, m, q & 15), np.uint8).reshape(n, 144)
    blocks = np.zeros((n, 176), dtype=np.uint8)
    blocks[:, 0:16] = low[:, 0:16]
    blocks[:, 48:176] = low[:, 16:144]
    for e in range(256):
        j, l = divmod(e, 32)
        blocks[:, 16 + l] |= ((q[:, e] >> 4) << j).astype(np.uint8)
    return blocks.tobytes()


def pack_q6_k(d16, sc, q):
    """Packs q6_K blocks: d16 (n,) float16, sc (n, 16) ints in [-128, 127],
    q (n, 256) ints in [0, 63] (stored value, i.e. signed value + 32)."""
    n = q.shape[0]
    blocks = np.zeros((n, 210), dtype=np.uint8)
    for e in range(256):
        h, r = divmod(e, 128)
        quarter, l = divmod(r, 32)
        lo = q[:, e] & 15
        hi = q[:, e] >> 4
        li = 64 * h + l + (32 if quarter in (1, 3) else 0)
        if quarter < 2:
            blocks[:, li] |= lo.astype(np.uint8)
        else:
            blocks[:, li] |= (lo << 4).astype(np.uint8)
        blocks[:, 128 + 32 * h + l] |= (hi << (2 * quarter)).astype(np.uint8)
    blocks[:, 192:208] = np.asarray(sc, dtype=np.int8).view(np.uint8)
    blocks[:, 208:210] = np.asarray(d16, "<f2").view(np.uint8).reshape(-1, 2)
    return blocks.tobytes()


def _quantize_q4_k(x, qmax=15):
    """q4_K (qmax 15) or, as _quantize_q5_k, q5_K's fields (qmax 31)."""
    xb = x.reshape(-1, 8, 32)
    lo = np.minimum(xb.min(axis=2), 0.0)         # (n, 8) sub-block minimum (<= 0)
    rng_ = xb.max(axis=2) - lo                   # (n, 8) range
    sub_scale = rng_ / float(qmax)
    sub_min = -lo
    d = sub_scale.max(axis=1) / 63.0
    dmin = sub_min.max(axis=1) / 63.0
    d16 = d.astype("<f2")
    dmin16 = dmin.astype("<f2")
    dd = np.where(d16 > 0, d16.astype(np.float64), 1.0)
    dm = np.where(dmin16 > 0, dmin16.astype(np.float64), 1.0)
    s = np.clip(np.rint(sub_scale / dd[:, None]), 0, 63).astype(np.int64)
    m = np.clip(np.rint(sub_min / dm[:, None]), 0, 63).astype(np.int64)
    eff_s = d16.astype(np.float64)[:, None] * s
    eff_m = dmin16.astype(np.float64)[:, None] * m
    inv = np.where(eff_s > 0, 1.0 / np.where(eff_s > 0, eff_s, 1.0), 0.0)
    q = np.clip(np.rint((xb + eff_m[:, :, None]) * inv[:, :, None]), 0, qmax).astype(np.int64)
    pack = pack_q4_k if qmax == 15 else pack_q5_k
    return pack(d16, dmin16, s, m, q.reshape(-1, 256))


def _quantize_q5_k(x):
    return _quantize_q4_k(x, qmax=31)


def _quantize_q6_k(x):
    xb = x.reshape(-1, 16, 16)
    amax_i = np.abs(xb).argmax(axis=2)
    mx = np.take_along_axis(xb, amax_i[:, :, None], axis=2)[:, :, 0]   # (n, 16) signed max
    sub = mx / -32.0
    d = np.abs(sub).max(axis=1) / 127.0
    d16 = d.astype("<f2")
    dd = np.where(d16 > 0, d16.astype(np.float64), 1.0)
    sc = np.clip(np.rint(sub / dd[:, None]), -128, 127).astype(np.int64)
    eff = d16.astype(np.float64)[:, None] * sc
    inv = np.where(eff != 0, 1.0 / np.where(eff != 0, eff, 1.0), 0.0)
    q = np.clip(np.rint(xb * inv[:, :, None]) + 32, 0, 63).astype(np.int64)
    return pack_q6_k(d16, sc, q.reshape(-1, 256))


# --- self-test ---------------------------------------------------------------------------------

def _scalar_dequant(raw, ttype):
    """Element-by-element decoder, written straight from the layout table in
    the file comment, independent of the vectorized decoders above."""
    raw = bytes(raw)
    out = []

    def half(off):
        return float(np.frombuffer(raw[off:off + 2], dtype="<f2")[0])

    name, blck, size = TYPES[ttype]
    for base in range(0, len(raw), size):
        blk = raw[base:base + size]
        if ttype == T_Q8_0:
            d = half(base)
            out += [d * (v - 256 if v > 127 else v) for v in blk[2:34]]
        elif ttype == T_Q4_0:
            d = half(base)
            vals = [0.0] * 32
            for j in range(16):
                vals[j] = d * ((blk[2 + j] & 15) - 8)
                vals[j + 16] = d * ((blk[2 + j] >> 4) - 8)
            out += vals
        elif ttype == T_Q4_K:
            d, dmin = half(base), half(base + 2)
            sc = blk[4:16]
            qs = blk[16:144]
            for e in range(256):
                j = e // 32
                if j < 4:
                    s, m = sc[j] & 63, sc[j + 4] & 63
                else:
                    s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4)
                    m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
                c, r = divmod(e, 64)
                byte = qs[32 * c + (r % 32)]
                q = (byte & 15) if r < 32 else (byte >> 4)
                out.append(d * s * q - dmin * m)
        elif ttype == T_Q5_K:
            d, dmin = half(base), half(base + 2)
            sc, qh, qs = blk[4:16], blk[16:48], blk[48:176]
            for e in range(256):
                j, l = divmod(e, 32)
                if j < 4:
                    s, m = sc[j] & 63, sc[j + 4] & 63
                else:
                    s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4)
                    m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
                c, r = divmod(e, 64)
                byte = qs[32 * c + l]
                q = (byte & 15) if r < 32 else (byte >> 4)
                if qh[l] & (1 << j):
                    q += 16
                out.append(d * s * q - dmin * m)
        elif ttype == T_Q6_K:
            ql, qh = blk[0:128], blk[128:192]
            sc = [v - 256 if v > 127 else v for v in blk[192:208]]
            d = half(base + 208)
            for e in range(256):
                h, r = divmod(e, 128)
                quarter, l = divmod(r, 32)
                lbyte = ql[64 * h + l + (32 if quarter in (1, 3) else 0)]
                low = (lbyte & 15) if quarter < 2 else (lbyte >> 4)
                high = (qh[32 * h + l] >> (2 * quarter)) & 3
                out.append(d * sc[e // 16] * ((low | (high << 4)) - 32))
        else:
            raise GGUFError("no scalar decoder for %s" % name)
    return np.array(out, dtype=np.float64)


def _check(cond, what):
    if not cond:
        raise AssertionError("selftest: " + what)


def selftest(tmpdir):
    import os
    rng = np.random.default_rng(1234)
    n_checks = 0

    # 1. Hand-made blocks whose values are worked out by hand from the layout.
    # q8_0: d = 0.5, q = [-128, 127, 3, 0, ...]
    blk = np.zeros(34, np.uint8)
    blk[0:2] = np.array([0.5], "<f2").view(np.uint8)
    blk[2], blk[3], blk[4] = 0x80, 0x7F, 3
    v = dequantize(blk, T_Q8_0)
    _check(v[0] == -64.0 and v[1] == 63.5 and v[2] == 1.5 and v[3] == 0.0, "q8_0 hand block")
    # q4_0: d = 2, byte 0 = 0xF1 -> x[0] = 2*(1-8) = -14, x[16] = 2*(15-8) = 14
    blk = np.zeros(18, np.uint8)
    blk[0:2] = np.array([2.0], "<f2").view(np.uint8)
    blk[2] = 0xF1
    v = dequantize(blk, T_Q4_0)
    _check(v[0] == -14.0 and v[16] == 14.0 and v[1] == -16.0 and v[17] == -16.0, "q4_0 hand block")
    # q4_K: d = 1, dmin = 0.5.  sub-block 0: s = sc[0]&63 = 5, m = sc[4]&63 = 2;
    # sub-block 4: s = (sc[8]&15) | (sc[0]>>6)<<4 = 3 | 2<<4 = 35,
    #              m = (sc[8]>>4) | (sc[4]>>6)<<4 = 1 | 1<<4 = 17.
    # qs[0] = 0x97: element 0 = lo = 7 (sub-block 0), element 32 = hi = 9 (sub-block 1,
    # s = sc[1]&63 = 0, m = sc[5]&63 = 0); qs[64] = 0x0B: element 128 (sub-block 4) = 11.
    blk = np.zeros(144, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:4] = np.array([0.5], "<f2").view(np.uint8)
    blk[4 + 0] = 5 | (2 << 6)
    blk[4 + 4] = 2 | (1 << 6)
    blk[4 + 8] = 3 | (1 << 4)
    blk[16 + 0] = 0x97
    blk[16 + 64] = 0x0B
    v = dequantize(blk, T_Q4_K)
    _check(v[0] == 5 * 7 - 0.5 * 2, "q4_k hand block element 0")
    _check(v[1] == -1.0, "q4_k hand block element 1 (q=0 -> -dmin*m)")
    _check(v[32] == 0.0, "q4_k hand block element 32")
    _check(v[128] == 35 * 11 - 0.5 * 17, "q4_k hand block element 128 (high scale bits)")
    _check(v[129] == -0.5 * 17, "q4_k hand block element 129")
    # q5_K: the q4_K block above with qh in between: d = 1, dmin = 0.5, sub-block 0
    # s = 5, m = 2, sub-block 4 s = 35, m = 17.  qh[0] = 0b00010001: element 0 (bit 0)
    # gets q = 7 + 16 = 23, element 128 (sub-block 4, bit 4) q = 11 + 16 = 27; qh[1] = 0x04:
    # element 65 (sub-block 2, l = 1, s = m = 0) stays 0, element 1 (bit 0 clear) stays q = 0.
    blk5 = np.zeros(176, np.uint8)
    blk5[0:16] = blk[0:16]
    blk5[48:176] = blk[16:144]
    blk5[16 + 0] = 0b00010001
    blk5[16 + 1] = 0x04
    v = dequantize(blk5, T_Q5_K)
    _check(v[0] == 5 * 23 - 0.5 * 2, "q5_k hand block element 0 (fifth bit)")
    _check(v[1] == -1.0, "q5_k hand block element 1 (no fifth bit)")
    _check(v[32] == 0.0 and v[65] == 0.0, "q5_k hand block elements 32, 65")
    _check(v[128] == 35 * 27 - 0.5 * 17, "q5_k hand block element 128 (bit 4 of qh[0])")
    _check(v[129] == -0.5 * 17, "q5_k hand block element 129")
    # q6_K: d = 0.25, sc[0] = 2, sc[6] = -3, sc[8] = 4.
    # element 0: ql[0] lo = 0x5, qh[0] bits 0-1 = 2 -> q = 5 | 2<<4 = 37 -> x = 0.25*2*5 = 2.5
    # element 96 (quarter 3, l 0): ql[32] hi = 0xA, qh[0] bits 6-7 = 1 -> q = 10|16 = 26 -> -6
    #   x = 0.25 * sc[6] * -6 = 4.5
    # element 128 (half 1): ql[64] lo = 0, qh[32] bits 0-1 = 3 -> q = 48 -> 16; x = 0.25*4*16
    blk = np.zeros(210, np.uint8)
    blk[0] = 0x05
    blk[32] = 0xA0
    blk[128] = 2 | (1 << 6)
    blk[128 + 32] = 3
    blk[192 + 0] = 2
    blk[192 + 6] = np.array([-3], np.int8).view(np.uint8)[0]
    blk[192 + 8] = 4
    blk[208:210] = np.array([0.25], "<f2").view(np.uint8)
    v = dequantize(blk, T_Q6_K)
    _check(v[0] == 2.5, "q6_k hand block element 0")
    _check(v[96] == 4.5, "q6_k hand block element 96")
    _check(v[128] == 16.0, "q6_k hand block element 128")
    _check(v[1] == 0.25 * 2 * -32, "q6_k hand block element 1")
    # bf16: 0x3FC0 = 1.5, 0xC000 = -2
    v = dequantize(np.array([0x3FC0, 0xC000], "<u2").view(np.uint8), T_BF16)
    _check(v[0] == 1.5 and v[1] == -2.0, "bf16 hand values")
    n_checks += 6

    # 2. Random bytes: vectorized decoders == element-by-element decoders.
    for ttype in (T_Q8_0, T_Q4_0, T_Q4_K, T_Q5_K, T_Q6_K):
        size = TYPES[ttype][2]
        raw = rng.integers(0, 256, size=size * 6, dtype=np.uint8)
        # keep the f16 scales finite (exponent field not all ones)
        for b in range(6):
            for off in ((0, 2) if ttype in (T_Q4_K, T_Q5_K)
                        else ((208,) if ttype == T_Q6_K else (0,))):
                raw[b * size + off + 1] &= 0x3B
        want = _scalar_dequant(raw, ttype)
        got = dequantize(raw, ttype)
        _check(np.array_equal(want, got), "%s vectorized vs scalar decode" % TYPES[ttype][0])
        n_checks += 1

    # 3. Known field values -> packed by the writers -> decoded.
    n = 3
    d16 = rng.uniform(0.01, 0.1, n).astype("<f2")
    dmin16 = rng.uniform(0.01, 0.1, n).astype("<f2")
    s = rng.integers(0, 64, (n, 8))
    m = rng.integers(0, 64, (n, 8))
    q = rng.integers(0, 16, (n, 256))
    want = (d16.astype(np.float64)[:, None, None] * s[:, :, None] * q.reshape(n, 8, 32)
            - dmin16.astype(np.float64)[:, None, None] * m[:, :, None]).reshape(-1)
    got = dequantize(np.frombuffer(pack_q4_k(d16, dmin16, s, m, q), np.uint8), T_Q4_K)
    _check(np.array_equal(want, got), "q4_k fields round trip")
    q = rng.integers(0, 32, (n, 256))
    want = (d16.astype(np.float64)[:, None, None] * s[:, :, None] * q.reshape(n, 8, 32)
            - dmin16.astype(np.float64)[:, None, None] * m[:, :, None]).reshape(-1)
    got = dequantize(np.frombuffer(pack_q5_k(d16, dmin16, s, m, q), np.uint8), T_Q5_K)
    _check(np.array_equal(want, got), "q5_k fields round trip")
    sc = rng.integers(-128, 128, (n, 16))
    q = rng.integers(0, 64, (n, 256))
    want = (d16.astype(np.float64)[:, None, None] * sc[:, :, None]
            * (q.reshape(n, 16, 16) - 32)).reshape(-1)
    got = dequantize(np.frombuffer(pack_q6_k(d16, sc, q), np.uint8), T_Q6_K)
    _check(np.array_equal(want, got), "q6_k fields round trip")
    n_checks += 3

    # 4. A whole file: metadata of every value type, tensors of every type,
    # a non-default alignment, 1-D and 2-D tensors; values read back exactly
    # (float types) or within the quantizer's error (quantized types).
    x = rng.standard_normal((4, 512))
    tensors = []
    for name, ttype in TYPE_BY_NAME.items():
        tensors.append(("w." + name, [512, 4], ttype, quantize(x, ttype)))
    tensors.append(("norm", [512], T_F32, x[0].astype("<f4").tobytes()))
    meta = {
        "general.architecture": "llama",
        "u8": (V_U8, 200), "i8": (V_I8, -5), "u16": (V_U16, 60000), "i16": (V_I16, -300),
        "u32": 123456, "i32": (V_I32, -7), "f32": 0.5, "bool": True,
        "u64": (V_U64, 1 << 40), "i64": (V_I64, -(1 << 40)), "f64": (V_F64, 0.1),
        "arr.i32": np.array([1, -2, 3], np.int32),
        "arr.str": ["a", "bc", "\u00e9"],
        "arr.f32": np.array([0.25, 0.5], np.float32),
    }
    for align in (32, 64):
        path = os.path.join(tmpdir, "selftest_%d.gguf" % align)
        write_gguf(path, meta, tensors, alignment=align)
        f = GGUFFile(path)
        _check(f.alignment == align and f.data_offset % align == 0, "alignment")
        _check(f.get("u8") == 200 and f.get("i8") == -5 and f.get("u16") == 60000
               and f.get("i16") == -300 and f.get("u32") == 123456 and f.get("i32") == -7
               and f.get("f32") == 0.5 and f.get("bool") is True and f.get("u64") == 1 << 40
               and f.get("i64") == -(1 << 40) and f.get("f64") == 0.1, "scalar metadata")
        _check(list(f.get("arr.i32")) == [1, -2, 3] and f.get("arr.str") == ["a", "bc", "\u00e9"]
               and list(f.get("arr.f32")) == [0.25, 0.5], "array metadata")
        _check(f.get("general.architecture") == "llama", "string metadata")
        _check(np.array_equal(f.tensors["norm"].dequant(), x[0].astype(np.float32)), "1-D f32")
        _check(f.tensors["norm"].shape == (512,), "1-D shape")
        tol = {"f32": 1e-7, "f16": 1e-3, "bf16": 8e-3, "q8_0": 0.02, "q4_0": 0.35,
               "q4_k": 0.35, "q5_k": 0.18, "q6_k": 0.09}
        for name, ttype in TYPE_BY_NAME.items():
            t = f.tensors["w." + name]
            _check(t.shape == (4, 512) and t.type == ttype, "%s shape/type" % name)
            v = t.dequant()
            err = np.abs(v - x).max() / np.abs(x).max()
            _check(err <= tol[name], "%s round trip error %.4g > %g" % (name, err, tol[name]))
            # row selection decodes exactly the same rows
            _check(np.array_equal(t.dequant(rows=[2, 0]), v[[2, 0]]), "%s row select" % name)
        _check(np.array_equal(f.tensors["w.f16"].dequant(), x.astype(np.float16)), "f16 exact")
        _check(np.array_equal(f.tensors["w.f32"].dequant(), x.astype(np.float32)), "f32 exact")
        n_checks += 1

    # 5. Malformed files raise GGUFError, never anything else.
    good = open(os.path.join(tmpdir, "selftest_32.gguf"), "rb").read()
    bad_cases = {
        "magic": b"GGUX" + good[4:],
        "version": good[:4] + struct.pack("<I", 9) + good[8:],
        "truncated header": good[:40],
        "truncated data": good[:len(good) - 100],
        "huge count": good[:8] + struct.pack("<Q", 1 << 60) + good[16:],
    }
    for what, data in bad_cases.items():
        path = os.path.join(tmpdir, "bad.gguf")
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            GGUFFile(path)
        except GGUFError:
            n_checks += 1
            continue
        raise AssertionError("selftest: malformed file (%s) accepted" % what)
    # Random truncations and byte flips in the header region.
    for i in range(200):
        data = bytearray(good[:2048])
        data[rng.integers(4, len(data))] = rng.integers(0, 256)
        if i % 2:
            data = data[:rng.integers(0, len(data))]
        path = os.path.join(tmpdir, "bad.gguf")
        with open(path, "wb") as fh:
            fh.write(bytes(data))
        try:
            GGUFFile(path)
        except GGUFError:
            pass
    n_checks += 1
    return n_checks


def main(argv):
    if len(argv) >= 2 and argv[1] == "--selftest":
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            n = selftest(argv[2] if len(argv) > 2 else d)
        print("gguf_ref selftest: %d groups of checks passed" % n)
        return 0
    if len(argv) != 2:
        print("usage: gguf_ref.py FILE | --selftest [DIR]", file=sys.stderr)
        return 2
    try:
        f = GGUFFile(argv[1])
    except GGUFError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    print("version %d, alignment %d, %d tensors, %d metadata keys"
          % (f.version, f.alignment, len(f.tensors), len(f.metadata)))
    for k, v in f.metadata.items():
        if isinstance(v, (list, np.ndarray, StringArray)):
            v = "[%d items]" % len(v)
        print("  %-45s %s" % (k, v))
    for t in f.tensors.values():
        print("  %-32s %-6s %s" % (t.name, t.type_name, t.shape))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
