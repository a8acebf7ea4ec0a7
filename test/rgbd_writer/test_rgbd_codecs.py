"""Depth quantisation and codecs, checked with independent decoders (Pillow, imagecodecs, glymur)."""

from __future__ import annotations

import base64
import io
import os
import struct

import glymur
import imagecodecs
import numpy as np
import pytest
from PIL import Image

from rgbd_writer import codecs

from support import rgbd_crash_worker as cw

# Encoding HTJ2K needs an imagecodecs with OpenJPH (codecs.HTJ2K_IMAGECODECS on; none for Python 3.10).
NEEDS_HTJ2K = pytest.mark.skipif(
    not codecs.htj2k_available(), reason=f"imagecodecs {imagecodecs.__version__} encodes no HTJ2K"
)
PROFILES = [pytest.param(p, marks=NEEDS_HTJ2K) if p == "htj2k" else p for p in codecs.DEPTH_PROFILES]


def test_quantize_float_metres_range_and_rounding():
    d = np.array([[np.nan, np.inf, -np.inf, 0.0, 0.0999, 0.1, 1.2346, 1.2344, 5.9996, 6.0, 6.0004, -1.0]])
    q = codecs.quantize_depth(d.astype(np.float64), 0.1, 6.0)
    assert q.dtype == np.uint16
    assert q.tolist() == [[0, 0, 0, 0, 0, 100, 1235, 1234, 6000, 6000, 0, 0]]
    q32 = codecs.quantize_depth(d.astype(np.float32), 0.1, 6.0)
    assert q32.tolist() == q.tolist()


def test_quantize_uint16_millimetres_same_range_rule():
    mm = np.array([[0, 1, 99, 100, 1234, 6000, 6001, 65535]], dtype=np.uint16)
    assert codecs.quantize_depth(mm, 0.1, 6.0).tolist() == [[0, 0, 0, 100, 1234, 6000, 0, 0]]


@pytest.mark.parametrize("lo_m, hi_m", [(0.1, 6.0), (0.0004, 65.535), (0.001, 0.001), (30.0, 65.535)])
def test_quantize_uint16_is_the_range_rule_for_every_value(lo_m, hi_m):
    """The uint16 path (one wrapping subtract + compare) against the rule itself, every value, any range
    the config allows (0 < min <= max <= 65.535 m); a new array each time, a strided input too.
    """
    mm = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    lo, hi = round(lo_m * 1000), round(hi_m * 1000)
    want = np.where((mm >= lo) & (mm <= hi), mm, 0)
    got = codecs.quantize_depth(mm, lo_m, hi_m)
    assert got.dtype == np.uint16 and np.array_equal(got, want) and not np.shares_memory(got, mm)
    assert np.array_equal(codecs.quantize_depth(mm.T, lo_m, hi_m), want.T)


def _codestream(jp2: bytes) -> bytes:
    i = jp2.index(b"jp2c")
    return jp2[i + 4 :]


def _cod(cs: bytes) -> dict:
    i = cs.index(b"\xff\x52")
    _scod, _prog, _layers, _mct, levels, xcb, ycb, style, transform = struct.unpack(">BBHBBBBBB", cs[i + 4 : i + 14])
    return {"levels": levels, "cblk": (4 << xcb, 4 << ycb), "style": style, "transform": transform}


@pytest.mark.parametrize("profile", PROFILES)
def test_depth_round_trip_bit_exact_with_independent_decoders(profile, tmp_path):
    _, depth, _ = cw.frame(3, 1, 120, 160)
    mm = codecs.quantize_depth(depth, 0.1, 6.0)
    assert (mm == 0).any() and (mm > 0).any()
    mm[0, 5:8] = [1, 65535, 32768]  # full uint16 range survives the codec
    data = codecs.encode_depth(mm, profile)
    assert data.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n") and b"jp2h" in data[:100]
    im = Image.open(io.BytesIO(data))
    assert im.format == "JPEG2000" and im.mode == "I;16"
    assert np.array_equal(np.asarray(im), mm)
    assert np.array_equal(imagecodecs.jpeg2k_decode(data), mm)
    p = tmp_path / "d.jp2"
    p.write_bytes(data)
    assert np.array_equal(glymur.Jp2k(str(p))[:], mm)
    assert np.array_equal(codecs.decode_depth_fast(data), mm)
    assert np.array_equal(codecs.decode_depth_pillow(data), mm)
    cod = _cod(_codestream(data))
    assert cod["transform"] == 1  # reversible 5/3 wavelet
    assert codecs.jp2_profile(data) == profile
    if profile == "jpeg2000_strict":  # OpenJPEG defaults, as the reference writes
        assert cod == {"levels": 5, "cblk": (64, 64), "style": 0, "transform": 1}
    elif profile == "jpeg2000":  # the reference parameters + the BYPASS code-block style
        assert cod == {"levels": 5, "cblk": (64, 64), "style": 1, "transform": 1}
    else:
        assert cod["style"] & 0x40  # HT code-blocks
        assert np.array_equal(imagecodecs.htj2k_decode(_codestream(data)), mm)


def test_strict_profile_matches_pillow_encoder_parameters():
    _, depth, _ = cw.frame(1, 0, 96, 128)
    mm = codecs.quantize_depth(depth, 0.1, 6.0)
    buf = io.BytesIO()
    Image.fromarray(mm).save(buf, format="JPEG2000", irreversible=False)
    ours = codecs.encode_depth(mm, "jpeg2000_strict")
    assert ours[: ours.index(b"jp2c")] == buf.getvalue()[: buf.getvalue().index(b"jp2c")]  # same JP2 boxes
    assert _cod(_codestream(ours)) == _cod(_codestream(buf.getvalue()))


def test_rgb_jpeg_decodes_with_pillow_and_libjpeg():
    rgb, _, _ = cw.frame(2, 0, 96, 128)
    data = codecs.encode_rgb_jpeg(rgb, 88)
    a = codecs.decode_rgb_jpeg(data)
    b = imagecodecs.jpeg8_decode(data)
    assert a.shape == rgb.shape and a.dtype == np.uint8 and np.array_equal(a, b)
    mse = np.mean((a.astype(float) - rgb) ** 2)
    assert 10 * np.log10(255**2 / mse) > 28
    assert Image.open(io.BytesIO(data)).info.get("progressive") is None


@pytest.mark.parametrize("quality", [50, 88, 95])
def test_rgb_jpeg_is_the_jpeg_pillow_writes(quality):
    """The encoder reads the array in place, yet writes Pillow's bytes: datasets do not change with it."""
    smooth, _, _ = cw.frame(3, 0, 96, 128)
    noise = np.random.default_rng(quality).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    for rgb in (smooth, noise, smooth[:, ::-1]):  # the last one a view with negative strides
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(rgb), "RGB").save(buf, format="JPEG", quality=quality)
        assert codecs.encode_rgb_jpeg(rgb, quality) == buf.getvalue()
    for bad in (noise[..., 0], np.dstack([noise, noise[..., :1]]), noise.astype(np.float32)):  # grey, RGBA, float
        with pytest.raises(ValueError, match="uint8 HxWx3"):
            codecs.encode_rgb_jpeg(bad, quality)


def test_encode_depth_rejects_bad_input():
    with pytest.raises(ValueError):
        codecs.encode_depth(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError):
        codecs.encode_depth(np.zeros((4, 4), np.uint16), "png")


@pytest.mark.parametrize("profile", PROFILES)
def test_parallel_encoder_threads_stay_bit_exact(profile):
    from concurrent.futures import ThreadPoolExecutor

    mms = [codecs.quantize_depth(cw.frame(e, e)[1], 0.1, 6.0) for e in range(6)]
    with ThreadPoolExecutor(2) as pool:
        out = list(pool.map(lambda m: codecs.encode_depth(m, profile), mms))
    for mm, data in zip(mms, out):
        assert np.array_equal(codecs.decode_depth_pillow(data), mm)


def _encode_in_child(mm, q):
    q.put((codecs.encode_depth(mm, "jpeg2000"), codecs._scratch.path()[0]))


@pytest.mark.integration
def test_encoder_scratch_is_in_memory_and_per_process():
    import multiprocessing as mp

    mm = codecs.quantize_depth(cw.frame(4, 0)[1], 0.1, 6.0)
    ours = codecs.encode_depth(mm, "jpeg2000")
    fd, path = codecs._scratch.path()
    assert path == f"/proc/self/fd/{fd}" and os.readlink(path).startswith("/memfd:")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_encode_in_child, args=(mm, q))
    p.start()
    data, _ = q.get(timeout=30)
    p.join(30)
    assert data == ours and codecs.encode_depth(mm, "jpeg2000") == ours  # parent's memfd untouched


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
def test_fast_rgb_decoder_gives_pillows_pixels(mode):
    rgb, _, _ = cw.frame(5, 2, 96, 128)
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").convert(mode).save(buf, format="JPEG", quality=88)
    fast = codecs.decode_rgb_fast(buf.getvalue())
    assert fast.shape == rgb.shape and fast.dtype == np.uint8
    assert np.array_equal(fast, codecs.decode_rgb_jpeg(buf.getvalue()))


@NEEDS_HTJ2K
def test_fast_depth_decoder_reads_htj2k_with_openjph(monkeypatch):
    mm = codecs.quantize_depth(cw.frame(2, 4, 96, 128)[1], 0.1, 6.0)
    ht, classic = codecs.encode_depth(mm, "htj2k"), codecs.encode_depth(mm, "jpeg2000")

    def no_openjpeg(*a, **k):
        raise AssertionError("OpenJPEG used")

    monkeypatch.setattr(imagecodecs, "jpeg2k_decode", no_openjpeg)
    assert np.array_equal(codecs.decode_depth_fast(ht), mm)  # OpenJPH, bit-exact
    with pytest.raises(AssertionError, match="OpenJPEG used"):
        codecs.decode_depth_fast(classic)  # Part 1 code-blocks: OpenJPEG


def test_jp2_walk_finds_boxes_and_markers_by_structure():
    # 65362 = 0xFF52: the image width in SIZ holds the COD marker's bytes; a byte search would misread it
    mm = (np.arange(32 * 65362, dtype=np.uint32) % 4000 + 100).astype(np.uint16).reshape(32, -1)
    for profile in codecs.depth_profiles_available():
        data = codecs.encode_depth(mm, profile)
        cs = bytes(codecs.jp2_codestream(data))
        assert cs[2:4] == b"\xff\x51" and cs.index(b"\xff\x52") < 4 + struct.unpack(">H", cs[4:6])[0]  # inside SIZ
        assert codecs.jp2_profile(data) == profile
        assert np.array_equal(codecs.decode_depth_fast(data), mm)
    # an XLBox (64-bit length) and a to-the-end box are boxes too
    head, cs = data[: data.index(b"jp2c") - 4], bytes(codecs.jp2_codestream(data))
    xl = head + struct.pack(">I4sQ", 1, b"jp2c", 16 + len(cs)) + cs
    to_end = head + struct.pack(">I4s", 0, b"jp2c") + cs
    for d in (xl, to_end):
        assert bytes(codecs.jp2_codestream(d)) == cs and codecs.jp2_profile(d) == profile
    with pytest.raises(ValueError, match="not a JP2"):
        codecs.jp2_codestream(cs)
    with pytest.raises(ValueError, match="no jp2c"):
        codecs.jp2_codestream(head)
    with pytest.raises(ValueError, match="no COD"):
        codecs.codestream_style(cs[: cs.index(b"\xff\x51")] + b"\xff\x90\x00\x0a" + bytes(8))


def _scratch_memfds() -> int:
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:rgbd_j2k")
        except OSError:
            pass
    return n


def test_ended_encoder_threads_close_their_scratch_memfd():
    """Every writer's pool threads end at close(): each used to leak its memfd (threading.local never
    ran the scratch's __del__ per thread).
    """
    import gc
    import threading

    mm = codecs.quantize_depth(cw.frame(1, 1, 48, 64)[1], 0.1, 6.0)
    before = _scratch_memfds()
    threads = [threading.Thread(target=codecs.encode_depth, args=(mm,)) for _ in range(4)]
    for t in threads:
        t.start()
        t.join()
    gc.collect()
    assert _scratch_memfds() == before


def test_a_scratch_descriptor_number_taken_over_by_another_file_is_never_written(tmp_path):
    """Glymur reaches the memfd as /proc/self/fd/N: if N is closed elsewhere and reused, the encoder
    must not truncate and overwrite the file that now holds N (nor read its bytes back as a payload).
    """
    mm = codecs.quantize_depth(cw.frame(3, 1, 48, 64)[1], 0.1, 6.0)
    ref = codecs.encode_depth(mm)
    fd, _ = codecs._scratch.path()
    other = tmp_path / "precious"
    other.write_bytes(b"someone else's data")
    ofd = os.open(other, os.O_RDWR)
    try:
        os.dup2(ofd, fd)  # what a stray close of N followed by an open elsewhere amounts to
        assert codecs.encode_depth(mm) == ref
        assert other.read_bytes() == b"someone else's data"
        assert codecs._scratch.path()[0] != fd
    finally:
        os.close(ofd)
        os.close(fd)  # ours (the dup of the other file): the scratch no longer claims it


def test_a_truncated_codestream_is_encoded_again_never_returned(monkeypatch, caplog):
    mm = codecs.quantize_depth(cw.frame(2, 2, 48, 64)[1], 0.1, 6.0)
    ref = codecs.encode_depth(mm)
    real = os.pread
    calls = []

    def short_once(fd, n, off):
        calls.append(n)
        return real(fd, n - 1 if len(calls) == 1 else n, off)

    monkeypatch.setattr(codecs.os, "pread", short_once)
    assert codecs.encode_depth(mm) == ref and len(calls) == 2
    assert "broken codestream" in caplog.text
    monkeypatch.setattr(codecs.os, "pread", lambda fd, n, off: real(fd, n // 2, off))
    with pytest.raises(RuntimeError, match="broken codestream"):
        codecs.encode_depth(mm)


@pytest.mark.parametrize("profile", PROFILES)
def test_codestream_check_accepts_every_profile_and_finds_any_truncation(profile):
    mm = codecs.quantize_depth(cw.frame(4, 3, 48, 64)[1], 0.1, 6.0)
    cs = bytes(codecs.jp2_codestream(codecs.encode_depth(mm, profile)))
    assert codecs.codestream_problem(cs, 48, 64) is None
    assert "SIZ is 64x48" in codecs.codestream_problem(cs, 64, 48)
    for cut in range(2, len(cs)):
        assert codecs.codestream_problem(cs[:cut], 48, 64), cut


# codecs.encode_depth(HT_MM, "htj2k") by imagecodecs 2026.11.11 (OpenJPH 0.33): an HTJ2K file recorded elsewhere
HT_JP2 = base64.b64decode("""
AAAADGpQICANCocKAAAAGGZ0eXBqcDIgAAAAAGpwMiBqcGggAAAALWpwMmgAAAAWaWhkcgAAABAAAAAYAAEPBwAAAAAAD2NvbHIBAAAAAAAR
AAACAmpwMmP/T/9RAClAAAAAABgAAAAQAAAAAAAAAAAAAAAYAAAAEAAAAAAAAAAAAAEPAQH/UAAIAAIAAAAK/1IADAACAAEABQQEQAH/XAAT
IIiQkJCQkJCQkJCQkJCIiIj/ZAAXAAFPcGVuSlBIIFZlciAwLjMzLjAu/5AACgAAAAABhQAB/5PAACZB7QQHdADAABMADlQFh3QAwAATQAAV
EAAEwH35Awd0AOavVvwBAjQAsOIEB3QAwAAV0AAFoQAAV4DOrgk2i5n5mwDiAXm2AC2ktNgg7hk+V/4AMwB9lgBf40I8ju+Av7gCTAbwdgDA
ABdBAABdHAABbYD+234bqiN18A/8AwBA/3MPh/84/TT6zfwZiCQrUJM4AP1tqqf+wx/99g8qUSVUQiX+N5XE353GAyQ8A8swpEYD0XwA/dtU
x3/gP+L/ef95/37/eT/3v/0yShyoAXcAwAAu2gABehQAAugA+z//T/4XVYeqpqr/D/y/paqZqsL/e/99/0WqgqrC/2P/b/8PVBVUFXPiwOeC
h4B6ECVQkL4A/j9TLar+/38//D//f/9P/2//b/8H0IMOOuiggw466KAH/x/Qg/8P6AH08DfIGkSlA9+ylA9lqOBTKh9A9CoA9jcB/H+p+v9/
/2//f/9//3//X/9/c9YoEakgHyz6h6kCPgD/2Q==""")


def _ht_mm() -> np.ndarray:
    y, x = np.mgrid[0:16, 0:24]
    mm = ((x * 2731 + y * 977) % 65536).astype(np.uint16)
    mm[0, :3] = [0, 1, 65535]
    return mm


def test_htj2k_files_decode_bit_exact_with_or_without_openjph(monkeypatch):
    """A file recorded with HTJ2K reads on every install: OpenJPH where imagecodecs has it, else OpenJPEG."""
    assert codecs.jp2_profile(HT_JP2) == "htj2k"
    assert np.array_equal(codecs.decode_depth_fast(HT_JP2), _ht_mm())
    assert np.array_equal(codecs.decode_depth_pillow(HT_JP2), _ht_mm())
    monkeypatch.setattr(codecs, "htj2k_available", lambda: False)
    assert np.array_equal(codecs.decode_depth_fast(HT_JP2), _ht_mm())


@NEEDS_HTJ2K
def test_htj2k_encodes_what_the_stored_file_holds():
    assert np.array_equal(codecs.decode_depth_fast(codecs.encode_depth(_ht_mm(), "htj2k")), _ht_mm())


def test_htj2k_availability_is_what_imagecodecs_has():
    assert codecs.htj2k_available() == hasattr(imagecodecs, "htj2k_encode")
    assert codecs.depth_profiles_available() == tuple(
        p for p in codecs.DEPTH_PROFILES if p != "htj2k" or hasattr(imagecodecs, "htj2k_encode")
    )


def test_without_htj2k_encoding_it_says_so_and_names_the_profiles_there_are(monkeypatch):
    monkeypatch.setattr(codecs, "htj2k_available", lambda: False)
    assert codecs.depth_profiles_available() == ("jpeg2000", "jpeg2000_strict")
    problem = codecs.depth_profile_problem("htj2k")
    assert problem is not None and f"imagecodecs >= {codecs.HTJ2K_IMAGECODECS}" in problem
    assert imagecodecs.__version__ in problem and problem.endswith(
        "available depth profiles: jpeg2000, jpeg2000_strict"
    )
    with pytest.raises(RuntimeError) as e:
        codecs.encode_depth(np.zeros((8, 8), np.uint16), "htj2k")
    assert str(e.value) == problem
    assert codecs.depth_profile_problem("jpeg2000") is None
    assert "unknown depth profile 'png'" in codecs.depth_profile_problem("png")
