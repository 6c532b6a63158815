"""libzstd through ctypes (``mrec.zarr.codecs.zstd_native``): many zstd frames inflated by one call.

The batch decoder inflates a piece of a column's inner chunks with it (docs/performance.md, issue 16,
stop 17).  It must give exactly python-zstandard's bytes, refuse what libzstd refuses, never write
outside the buffer it is given, and step aside (None) when no usable library is there.  The batch
decoder's own tests (test_batch_decode.py) run through it and through the stream reader."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings, strategies as st

from mrec.zarr.codecs import zstd_native

GUARD = 64


def _guarded(n: int):
    """A uint8 view of ``n`` bytes inside a larger array filled with a guard pattern."""
    whole = np.full(n + 2 * GUARD, 0xA5, dtype=np.uint8)
    return whole, whole[GUARD:GUARD + n]


def _guards_intact(whole) -> bool:
    return bool((whole[:GUARD] == 0xA5).all() and (whole[-GUARD:] == 0xA5).all())


payloads = st.lists(st.one_of(st.binary(min_size=1, max_size=3000),
                              st.builds(lambda b, k: b * k, st.binary(min_size=1, max_size=40), st.integers(1, 400))),
                    min_size=1, max_size=12)


def _frames(parts, levels, sums):
    return [zstandard.ZstdCompressor(level=lv, write_checksum=cs).compress(p)
            for p, lv, cs in zip(parts, levels, sums)]


def test_a_library_is_found_here():
    """This machine has one (python-zstandard's own, or the system's): the native path is what the
    batch decoder uses and what the tests exercise."""
    assert zstd_native.inflater() is not None
    assert zstd_native.library()


@settings(max_examples=150, deadline=None)
@given(payloads, st.lists(st.integers(1, 19), min_size=12, max_size=12), st.lists(st.booleans(), min_size=12,
                                                                                  max_size=12))
def test_frames_back_to_back_inflate_to_zstandards_bytes(parts, levels, sums):
    inflate = zstd_native.inflater()
    frames = _frames(parts, levels, sums)
    want = b"".join(zstandard.ZstdDecompressor().decompress(f) for f in frames)
    assert want == b"".join(parts)
    whole, dst = _guarded(len(want))
    assert inflate(b"".join(frames), dst) == len(want)
    assert dst.tobytes() == want and _guards_intact(whole)
    if len(want) > 1:                   # one byte short: refused, nothing written past the buffer
        whole, dst = _guarded(len(want) - 1)
        assert inflate(b"".join(frames), dst) == -1
        assert _guards_intact(whole)


@settings(max_examples=200, deadline=None)
@given(payloads, st.sampled_from(["flip", "cut", "garbage", "grow"]), st.integers(0, 2**31), st.integers(0, 255),
       st.booleans())
def test_damaged_frames_are_refused_or_stay_inside_the_buffer(parts, how, at, value, checksum):
    """Damage the frames of the batch decoder would have refused on their crc32c: libzstd refuses
    them or writes at most the buffer (the caller compares the size it returns), never past it."""
    inflate = zstd_native.inflater()
    frames = b"".join(_frames(parts, [3] * len(parts), [checksum] * len(parts)))
    size = sum(map(len, parts))
    b = bytearray(frames)
    at %= len(b)
    if how == "flip":
        b[at] ^= 1 << (value % 8)
    elif how == "cut":
        del b[at:]
    elif how == "garbage":
        b += bytes([value]) * (1 + at % 16)
    else:
        b[at:at] = bytes([value]) * (1 + value % 7)
    whole, dst = _guarded(size)
    got = inflate(bytes(b), dst)
    assert got == -1 or 0 <= got <= size
    assert _guards_intact(whole)
    if how == "garbage":                 # bytes after the last frame that are not a frame: refused
        assert got == -1


def test_each_thread_inflates_with_its_own_context():
    inflate = zstd_native.inflater()
    rng = np.random.default_rng(5)
    jobs = []
    for k in range(8):
        parts = [np.round(rng.normal(size=2000), 2).tobytes() for _ in range(20)]
        jobs.append((b"".join(_frames(parts, [3] * 20, [k % 2 == 0] * 20)), b"".join(parts)))
    bad = []

    def work(k):
        for _ in range(30):
            frames, want = jobs[k]
            dst = np.empty(len(want), dtype=np.uint8)
            if inflate(frames, dst) != len(want) or dst.tobytes() != want:
                bad.append(k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_a_buffer_it_cannot_write_is_refused_before_any_call():
    inflate = zstd_native.inflater()
    frames = zstandard.ZstdCompressor().compress(b"x" * 100)
    for dst in (np.empty(200, dtype=np.uint8)[::2], np.empty(25, dtype=np.uint32),
                np.frombuffer(b"\0" * 100, dtype=np.uint8)):
        with pytest.raises(ValueError, match="C-contiguous writable uint8"):
            inflate(frames, dst)


@pytest.mark.parametrize("env, self_test, found", [("0", True, False), ("/no/such/libzstd.so", True, False),
                                                    ("libzstd.so.1", False, False), ("", True, True)])
def test_no_usable_library_means_none(monkeypatch, env, self_test, found):
    """MREC_LIBZSTD=0, a path that does not load, or a library failing the self-test: None, and the
    batch decoder takes zstandard's stream reader.  Unset: python-zstandard's own or the system's."""
    monkeypatch.setattr(zstd_native, "_resolved", None)
    monkeypatch.setenv("MREC_LIBZSTD", env)
    if not self_test:
        monkeypatch.setattr(zstd_native, "_self_test", lambda fn: False)
    assert (zstd_native.inflater() is not None) is found
    assert (zstd_native.library() is not None) is found
    monkeypatch.setattr(zstd_native, "_resolved", None)      # the next test resolves afresh


def test_the_batch_decoder_declines_to_the_stream_reader_without_a_library(monkeypatch):
    """With no library the batch decoder still decodes (through the stream reader): same bytes."""
    from mrec.zarr.codecs.base import ChunkSpec
    from mrec.zarr.dtypes import DATA_TYPES
    from test_read_fastpaths import _pipeline
    pipe = _pipeline(8)
    spec = ChunkSpec((300,), DATA_TYPES["float64"], 0.0)
    rows = np.round(np.random.default_rng(2).normal(size=(9, 300)), 3)
    raws = [pipe.encode(r, spec) for r in rows]
    outs = []
    for lib in (True, False):
        if not lib:
            monkeypatch.setattr(zstd_native, "inflater", lambda: None)
        out = np.empty((9, 300))
        assert pipe.batch_decoder(spec)(raws, out, 2)
        outs.append(out.tobytes())
    assert outs[0] == outs[1] == rows.tobytes()
