"""Minimal safetensors reading and writing with torch alone (Debian's python3-torch has no safetensors)."""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32, "I64": torch.int64}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read(path):
    """{name: tensor} (CPU, stored dtype) and the __metadata__ dict."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=_DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def write(path, tensors, metadata=None):
    """tensors: {name: tensor}; metadata: {str: str}. Data aligned to 8 bytes as the Python writer does."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_folder(folder):
    """All tensors of a Hugging Face folder (model.safetensors or its shards)."""
    import glob
    import os
    tensors = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        if os.path.basename(path).startswith("golden"):
            continue
        tensors.update(read(path)[0])
    return tensors
