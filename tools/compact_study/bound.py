# information bounds per byte plane (dcd, q=2^-7 A): why byte-granular LZ + order-0 Huffman stalls near 3.9 B/af
import common, numpy as np
pos = common.quantize(common.load("dcd")); fr, n = pos.shape[1:]
b = pos.astype("<f8").view(np.uint8).reshape(3, fr, n, 8)
def H(*cols):
    key = np.zeros(cols[0].size, np.int64)
    for c in cols: key = key * 256 + c.reshape(-1).astype(np.int64)
    p = np.unique(key, return_counts=True)[1] / key.size
    return -(p * np.log2(p)).sum()
def Hc(x, *ctx): return H(x, *ctx) - H(*ctx)
b5, b6, b7 = b[..., 5], b[..., 6], b[..., 7]
s = 3 / 8   # bits per coordinate -> B/atom/frame
print("H(b5) %.3f  H(b5|b6,b7) %.3f  H(b5|b5 prev frame) %.3f  B/af" % (H(b5) * s, Hc(b5, b6, b7) * s, Hc(b5[:, 1:], b5[:, :-1]) * s))
print("H(b6) %.3f  H(b6|b6 prev) %.3f  H(b6|b6,b7 prev) %.3f" % (H(b6) * s, Hc(b6[:, 1:], b6[:, :-1]) * s, Hc(b6[:, 1:], b6[:, :-1], b7[:, :-1]) * s))
print("H(b7) %.3f  H(b7|b7 prev) %.3f" % (H(b7) * s, Hc(b7[:, 1:], b7[:, :-1]) * s))
print("H(b5,b6,b7 | prev frame same bytes) %.3f  (order-1 temporal context, no arithmetic delta)" % (Hc(b5[:, 1:], b6[:, 1:], b7[:, 1:]) * 0 + (Hc(b6[:, 1:], b6[:, :-1], b7[:, :-1]) + Hc(b7[:, 1:], b7[:, :-1]) + Hc(b5[:, 1:], b6[:, 1:], b7[:, 1:])) * s))
