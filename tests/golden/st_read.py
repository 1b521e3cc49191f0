"""st_read: a small safetensors reader for the golden test's reference.

It loads a whole file back into an ordered state_dict of torch tensors, with
F16 and BF16 widened exactly to float32, so that the torchvision reference runs
on precisely the weights inferd reads (not on a regenerated model). It checks
the layout it relies on (header length, offsets in range, contiguous data,
sizes matching shapes) and raises ValueError otherwise.

It is not inferd's reader (src/core/st.c, which is held to the reference rules by
its own unit tests and fuzzer) and it reads only the dtypes the exporter
writes: F32, F16, BF16 and I64.
"""

import collections
import json

import numpy as np

_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8"}
_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8}


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset, file bytes)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = int.from_bytes(blob[:8], "little")
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"),
                        object_pairs_hook=collections.OrderedDict)
    meta = header.pop("__metadata__", {})
    return header, meta, 8 + n, blob


def load(path):
    """An OrderedDict name -> torch tensor (float32 or int64), in header order."""
    import torch

    header, _, start, blob = read_header(path)
    data_len = len(blob) - start
    out = collections.OrderedDict()
    spans = []
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _NP:
            raise ValueError(f"{path}: tensor '{name}' has dtype {dt}, not F32/F16/BF16/I64")
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(v) for v in info["data_offsets"])
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= begin <= end <= data_len or end - begin != numel * _SIZE[dt]:
            raise ValueError(f"{path}: tensor '{name}' has bad data_offsets [{begin}, {end}] "
                             f"for {dt} {list(shape)} in {data_len} data bytes")
        spans.append((begin, end))
        raw = np.frombuffer(blob, dtype=_NP[dt], count=numel, offset=start + begin)
        if dt == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)  # exact widening
        elif dt == "F16":
            arr = raw.astype(np.float32)  # exact widening
        else:
            arr = raw.astype(raw.dtype.newbyteorder("="))
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            raise ValueError(f"{path}: data is not contiguous at byte {pos}")
        pos = end
    if pos != data_len:
        raise ValueError(f"{path}: {data_len - pos} bytes after the last tensor")
    return out


def resnet(path, arch="resnet50", classes=1000):
    """torchvision's arch (resnet18 ... wide_resnet101_2) with classes outputs and
    the weights in path, float64, in eval mode. The architecture is the caller's
    to say (not detected from the file), so that the reference is independent."""
    import torchvision

    model = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
    model.load_state_dict(load(path), strict=True)
    return model.double().eval()


def resnet50(path):
    """torchvision's resnet50 with the weights in path, float64, in eval mode."""
    return resnet(path, "resnet50", 1000)
