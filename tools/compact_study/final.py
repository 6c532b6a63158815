# candidates: dcd + solvated xtc sizes, single-chunk decode ms, encode MB/s; lossless + numcodecs decode verified
import common, codec, numpy as np, time, zlib, zstandard as Z
from numcodecs import GZip, Shuffle
def cands(n):
    return [
      # name, F, E, endian, params(or level), planeblocks, gzip?
      ("current F16 E8 zstd19",            16, 8, "<", 19, False, False),
      ("F16 E8 zstd19 +planeblocks",       16, 8, "<", 19, True, False),
      ("F32 E8 zstd19 +planeblocks",       32, 8, "<", 19, True, False),
      ("F49 E8 zstd19 +planeblocks",       49, 8, "<", 19, True, False),
      ("F98 E8 zstd22 mml4 +planeblocks",  98, 8, "<", codec.cparams(22, window_log=23, min_match=4), True, False),
      ("F98 E=8*atoms zstd19 btopt",       98, 8 * n, "<", codec.cparams(19, strategy=Z.STRATEGY_BTOPT), False, False),
      ("F98 E=8*atoms big-endian zstd22",  98, 8 * n, ">", codec.cparams(22, window_log=23), False, False),
      ("F16 E8 gzip9",                     16, 8, "<", 9, False, True),
      ("F98 E=8*atoms gzip9",              98, 8 * n, "<", 9, False, True),
    ]
def run(kind, name, F, E, en, lv, pb, gz):
    pos = common.quantize(common.load(kind)); fr, n = pos.shape[1:]
    if E != 8: E = 8 * n
    tot = 0; t = 0; first = None
    for c in range(3):
        for a in common.chunks(pos[c], F):
            t0 = time.perf_counter()
            if gz:
                sh = bytes(Shuffle(E).encode(np.frombuffer(a.astype(en + "f8").tobytes(), np.uint8)))
                z = bytes(GZip(lv).encode(sh)); b = z + b"\0\0\0\0"
            else:
                bl = [k * F * n for k in range(1, 8)] if pb else None
                b = codec.encode(a, E, en, **({"params": lv} if not isinstance(lv, int) else {"level": lv}), blocks=bl)
            t += time.perf_counter() - t0
            tot += len(b)
            if first is None: first = (b, a)
    b, a = first
    if gz:
        dec = lambda: np.frombuffer(bytes(Shuffle(E).decode(np.frombuffer(bytes(GZip(lv).decode(b[:-4])), np.uint8))), en + "f8")
    else:
        assert codec.decode(b, E, en, use_numcodecs=True).tobytes() == a.astype(en + "f8").tobytes()
        dec = lambda: codec.decode(b, E, en)
    assert dec().tobytes() == a.astype(en + "f8").tobytes()
    ts = []
    for _ in range(5):
        t0 = time.perf_counter(); dec(); ts.append(time.perf_counter() - t0)
    return tot / (fr * n), min(ts) * 1e3, pos.nbytes / t / 1e6, a.nbytes / 1e6
xd, xx = common.xtc_bytes("dcd"), common.xtc_bytes("xtc")
n_dcd = common.load("dcd").shape[2]
print(f"XTC(3 digits) dcd {xd:.3f} B/af, xtc-file {xx:.3f} B/af")
print(f"{'setting':<36} {'dcd B/af':>8} {'/XTC':>6} {'xtcfile /XTC':>12} {'dcd chunk dec ms':>16} {'xtcfile chunk dec ms':>20} {'enc MB/s dcd':>12} {'xtcf':>6}")
for cd in cands(n_dcd):
    b1, d1, e1, m1 = run("dcd", *cd)
    b2, d2, e2, m2 = run("xtc", *cd)
    print(f"{cd[0]:<36} {b1:8.3f} {b1/xd:6.3f} {b2/xx:12.3f} {d1:8.2f} ({m1:4.1f}MB) {d2:11.2f} ({m2:5.1f}MB) {e1:12.1f} {e2:6.1f}", flush=True)
