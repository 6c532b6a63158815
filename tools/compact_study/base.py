import common, numpy as np, zstandard
from numcodecs import Shuffle
for kind in ("dcd", "xtc"):
    pos = common.quantize(common.load(kind))
    fr, n = pos.shape[1:]
    xb = common.xtc_bytes(kind)
    for pad in (True, False):
        tot = 0
        for c in range(3):
            col = pos[c]
            for f0 in range(0, fr, 16):
                a = col[f0:f0+16]
                if pad and a.shape[0] < 16:
                    a = np.concatenate([a, np.zeros((16 - a.shape[0], n))])
                b = Shuffle(8).encode(np.ascontiguousarray(a).reshape(-1).astype('<f8'))
                tot += len(zstandard.ZstdCompressor(level=19).compress(bytes(b))) + 4
        print(kind, "pad" if pad else "nopad", tot / (fr*n), tot/(fr*n)/xb)
