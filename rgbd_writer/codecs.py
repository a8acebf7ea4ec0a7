"""Frame codecs: depth quantisation, RGB JPEG, lossless depth JPEG 2000 (JP2 container).

Depth profiles (all reversible 5/3, lossless, decodable bit-exactly by Pillow/OpenJPEG >= 2.5):

- ``"jpeg2000_strict"``: the reference encoding exactly, OpenJPEG defaults (6 resolutions, one tile, 64x64
  code-blocks): the JP2 boxes and coding parameters of Pillow's ``save(format="JPEG2000", irreversible=False)``
  (only the COM marker differs). Too slow for two cameras at 30 fps on a 2-core machine.
- ``"jpeg2000"`` (default): the same plus the selective arithmetic-coding bypass code-block style (a JPEG 2000
  Part 1 mode switch every decoder handles): less CPU for somewhat larger depth payloads, and it keeps up at 30 fps.
- ``"htj2k"``: High-Throughput JPEG 2000 (Part 15) code-blocks from OpenJPH via imagecodecs, in the same JP2 box
  structure (brand ``jp2 ``, compatibility ``jph ``). Encoding needs imagecodecs >= ``HTJ2K_IMAGECODECS`` (no
  such release is built for Python 3.10): ``depth_profile_problem`` says so before a frame is queued. Any
  OpenJPEG >= 2.5 decodes it.

JPEG 2000 is encoded through glymur (libopenjp2 via ctypes, which releases the GIL, so the writer's encoder
threads run in parallel; Pillow's JPEG 2000 encoder holds the GIL).
"""

from __future__ import annotations

import functools
import io
import logging
import os
import struct
import sys
import threading
from typing import TYPE_CHECKING, cast

import numpy as np
from PIL import Image

if TYPE_CHECKING:  # payloads: bytes, or uint8 rows read from the file (any buffer)
    from typing_extensions import Buffer

DEPTH_PROFILES = ("jpeg2000", "jpeg2000_strict", "htj2k")
HTJ2K_IMAGECODECS = "2026.1.1"  # the first imagecodecs with htj2k_encode/htj2k_decode (OpenJPH)
_JP2_SIGNATURE = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def htj2k_available() -> bool:
    """Whether this imagecodecs encodes and decodes HTJ2K (OpenJPH built in)."""
    import imagecodecs

    return bool(getattr(getattr(imagecodecs, "HTJ2K", None), "available", False))


def depth_profiles_available() -> tuple[str, ...]:
    """The DEPTH_PROFILES this install can encode."""
    return tuple(p for p in DEPTH_PROFILES if p != "htj2k" or htj2k_available())


def depth_profile_problem(profile: str) -> str | None:
    """Why depth cannot be encoded in ``profile`` here (None if it can).

    An unknown name, or HTJ2K without an imagecodecs that has it.
    """
    if profile not in DEPTH_PROFILES:
        return f"unknown depth profile {profile!r}; expected one of {DEPTH_PROFILES}"
    if profile == "htj2k" and not htj2k_available():
        import imagecodecs

        py = ".".join(map(str, sys.version_info[:2]))
        return (
            f"depth profile 'htj2k' is unavailable: it needs imagecodecs >= {HTJ2K_IMAGECODECS} (HTJ2K via "
            f"OpenJPH; no such release supports Python 3.10), and Python {py} has imagecodecs "
            f"{imagecodecs.__version__} without it; available depth profiles: "
            f"{', '.join(depth_profiles_available())}"
        )
    return None


def quantize_depth(depth: np.ndarray, min_m: float, max_m: float) -> np.ndarray:
    """Metres (float) or millimetres (uint16) -> uint16 mm; outside [min, max], NaN, inf -> 0.

    Float input: finite values in [min_m, max_m] (checked in metres, before rounding) are rounded to
    the nearest millimetre. uint16 input is already millimetres: the same range rule applies in mm.
    """
    if depth.dtype == np.uint16:
        lo, hi = int(round(min_m * 1000.0)), int(round(max_m * 1000.0))
        if not 0 <= lo <= hi <= 0xFFFF:
            return np.where((depth >= lo) & (depth <= hi), depth, 0).astype(np.uint16, copy=False)
        # lo <= d <= hi as one unsigned compare: d - lo wraps past hi - lo for d < lo (2 passes, not 5;
        # the same values, test_rgbd_codecs checks every uint16)
        keep = np.subtract(depth, np.uint16(lo), dtype=np.uint16) <= np.uint16(hi - lo)
        return np.multiply(depth, keep, dtype=np.uint16)
    d = depth.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(d) & (d >= min_m) & (d <= max_m)
    out = np.zeros(d.shape, dtype=np.uint16)
    out[valid] = np.rint(d[valid] * 1000.0).astype(np.uint16)
    return out


def encode_rgb_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    """HxWx3 uint8 RGB -> baseline JPEG bytes, the bytes Pillow's ``save(format="JPEG", quality=...)`` writes.

    imagecodecs' libjpeg-turbo reads the array in place (releasing the GIL); Pillow first copies it into an
    image of 4 bytes a pixel and packs it back for libjpeg.
    """
    import imagecodecs

    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:  # libjpeg would take it as grey or CMYK
        raise ValueError(f"an RGB JPEG needs uint8 HxWx3 pixels, got {rgb.dtype} {rgb.shape}")
    return bytes(imagecodecs.jpeg8_encode(np.ascontiguousarray(rgb), level=quality))


def decode_rgb_jpeg(data: Buffer) -> np.ndarray:
    """JPEG bytes -> HxWx3 uint8 RGB (Pillow, ``.convert("RGB")`` as the reference loader does)."""
    return np.asarray(Image.open(io.BytesIO(bytes(data))).convert("RGB"))


def _codec_input(data: Buffer) -> bytes:
    """``data`` as imagecodecs' decoders take it: any buffer, read without a copy.

    Their stubs declare ``Buffer`` in newer releases and ``bytes | bytearray | mmap`` in older ones; ``bytes`` suits
    both.
    """
    return cast(bytes, data)


def decode_rgb_fast(data: Buffer) -> np.ndarray:
    """JPEG bytes -> HxWx3 uint8 RGB with imagecodecs' libjpeg-turbo: the same pixels as :func:`decode_rgb_jpeg`.

    Cheaper than Pillow, which copies the image twice on the way to numpy.
    """
    import imagecodecs

    rgb = imagecodecs.jpeg8_decode(_codec_input(data))
    if rgb.ndim == 2:  # greyscale: replicate as Pillow's convert("RGB") does
        return np.repeat(rgb[..., None], 3, axis=2)
    if rgb.shape[-1] != 3:  # CMYK and other rarities: Pillow knows the conversions
        return decode_rgb_jpeg(data)
    return rgb


class _Memfd:
    """One thread's scratch file for glymur (which writes to a path): a memfd, left on no file system even after SIGKILL.

    glymur parses an existing file before writing, so it always holds a valid codestream (a 1x1 one to start with).
    It is reached as ``/proc/self/fd/N``, through a descriptor *number*: had anything in the process closed N by
    mistake and the number gone to another file, glymur would overwrite that file and we would read back whatever it
    holds. So ``intact()`` (the inode the path reaches is still ours) is checked before and after every encode, and
    the descriptor is closed, only while it is still ours, when its thread ends (its ``threading.local`` entry is
    dropped).
    """

    def __init__(self) -> None:
        import imagecodecs

        self.pid = os.getpid()
        self.fd = os.memfd_create("rgbd_j2k", os.MFD_CLOEXEC)
        try:
            os.write(
                self.fd,
                imagecodecs.jpeg2k_encode(np.zeros((1, 1), np.uint16), level=0, codecformat="J2K", reversible=True),
            )
            st = os.fstat(self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.ident = (st.st_dev, st.st_ino)
        self.path = f"/proc/self/fd/{self.fd}"

    def intact(self) -> bool:
        """Descriptor N (and so the path) still reaches this memfd."""
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.ident

    def __del__(self) -> None:
        try:
            if self.intact():  # never close a number that now belongs to someone else
                os.close(self.fd)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class _Scratch(threading.local):
    """Per thread (and process) a :class:`_Memfd`; a forked child or a damaged one gets a new one."""

    def get(self, renew: bool = False) -> _Memfd:
        m: _Memfd | None = getattr(self, "m", None)
        if renew or m is None or m.pid != os.getpid() or not m.intact():
            m = self.m = _Memfd()
        return m

    def path(self) -> tuple[int, str]:
        m = self.get()
        return m.fd, m.path


_scratch = _Scratch()


def codestream_problem(cs: Buffer, height: int, width: int) -> str | None:
    """Why a single-component codestream is not whole (None if it is).

    Whole: SOC, a SIZ of ``width`` x ``height``, tile-parts whose lengths (Psot) chain exactly to an EOC ending it. A
    structural walk, no decode: it catches a truncated or spliced codestream, which no decoder reads.
    """
    mv = memoryview(cs).cast("B")
    n = len(mv)
    if n < 4 or bytes(mv[:2]) != b"\xff\x4f":
        return "does not start with SOC"
    if bytes(mv[n - 2 :]) != b"\xff\xd9":
        return f"does not end with EOC ({n} bytes)"
    segments, i = _main_header(mv)
    for at, marker, length in segments:
        if marker == 0xFF51:
            if length < 38 or at + 2 + length > n:
                return "truncated SIZ"
            xsiz, ysiz, x0, y0 = struct.unpack(">IIII", mv[at + 6 : at + 22])
            if (xsiz - x0, ysiz - y0) != (width, height):
                return f"SIZ is {xsiz - x0}x{ysiz - y0}, expected {width}x{height}"
    if i + 12 > n or bytes(mv[i : i + 2]) != b"\xff\x90":
        return f"no tile-part after the main header (at {i} of {n} bytes)"
    while i + 12 <= n and bytes(mv[i : i + 2]) == b"\xff\x90":
        psot = struct.unpack(">I", mv[i + 6 : i + 10])[0]
        if psot == 0:  # the last tile-part: runs to EOC
            return None
        if psot < 14 or i + psot > n - 2:
            return f"tile-part at {i} claims {psot} bytes, {n - 2 - i} left before EOC"
        i += psot
    return None if i == n - 2 else f"tile-parts end at {i}, EOC at {n - 2}"


def _encode_jp2_openjpeg(mm: np.ndarray, modesw: int = 0) -> bytes:
    import glymur

    problem = ""
    for attempt in range(2):  # a broken result is encoded once more on a fresh memfd, never stored
        m = _scratch.get(renew=attempt > 0)
        glymur.Jp2k(m.path, data=mm, modesw=modesw)  # no .jp2 suffix: a raw codestream, reversible 5/3
        codestream = os.pread(m.fd, os.fstat(m.fd).st_size, 0)
        if not m.intact():
            problem = f"descriptor {m.fd} no longer reaches the encoder's memfd (closed elsewhere and reused)"
        else:
            problem = codestream_problem(codestream, mm.shape[0], mm.shape[1]) or ""
        if not problem:
            # the same boxes OpenJPEG writes for a 16-bit grey JP2 (byte-identical to glymur's .jp2 output)
            return wrap_jp2(codestream, mm.shape[0], mm.shape[1], (b"jp2 ",))
        log.warning("depth JPEG 2000 encode (attempt %d) gave a broken codestream: %s", attempt + 1, problem)
    raise RuntimeError(f"depth JPEG 2000 encoder produced a broken codestream: {problem}")


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def wrap_jp2(codestream: bytes, height: int, width: int, compat: tuple[bytes, ...]) -> bytes:
    """Put a single-component 16-bit unsigned codestream into a minimal JP2 file (ISO 15444-1 I.5)."""
    ftyp = _box(b"ftyp", b"jp2 " + struct.pack(">I", 0) + b"".join(compat))
    ihdr = _box(b"ihdr", struct.pack(">IIHBBBB", height, width, 1, 15, 7, 0, 0))
    colr = _box(b"colr", struct.pack(">BBBI", 1, 0, 0, 17))  # enumerated greyscale
    return _JP2_SIGNATURE + ftyp + _box(b"jp2h", ihdr + colr) + _box(b"jp2c", codestream)


def _encode_htj2k(mm: np.ndarray) -> bytes:
    import imagecodecs

    problem = depth_profile_problem("htj2k")
    if problem:
        raise RuntimeError(problem)
    cs = bytes(imagecodecs.htj2k_encode(mm, reversible=True))
    problem = codestream_problem(cs, mm.shape[0], mm.shape[1])
    if problem:
        raise RuntimeError(f"HTJ2K encoder produced a broken codestream: {problem}")
    return wrap_jp2(cs, mm.shape[0], mm.shape[1], (b"jp2 ", b"jph "))


def encode_depth(mm: np.ndarray, profile: str = "jpeg2000") -> bytes:
    """HxW uint16 millimetres -> lossless JP2 bytes in the given profile."""
    if mm.dtype != np.uint16 or mm.ndim != 2:
        raise ValueError(f"depth to encode must be HxW uint16, got {mm.dtype} {mm.shape}")
    if profile == "jpeg2000":
        return _encode_jp2_openjpeg(np.ascontiguousarray(mm), modesw=1)  # BYPASS (lazy) mode switch
    if profile == "jpeg2000_strict":
        return _encode_jp2_openjpeg(np.ascontiguousarray(mm))
    if profile == "htj2k":
        return _encode_htj2k(np.ascontiguousarray(mm))
    raise ValueError(f"unknown depth profile {profile!r}; expected one of {DEPTH_PROFILES}")


def jp2_codestream(data: Buffer) -> memoryview:
    """The JPEG 2000 codestream inside a JP2 file (its ``jp2c`` box), found by walking the boxes."""
    mv = memoryview(data).cast("B")
    if bytes(mv[:12]) != _JP2_SIGNATURE:
        raise ValueError("not a JP2 file")
    i = 12
    while i + 8 <= len(mv):
        size, kind = struct.unpack(">I4s", mv[i : i + 8])
        head = 8
        if size == 1:  # XLBox: 64-bit length follows
            if i + 16 > len(mv):
                break
            size, head = struct.unpack(">Q", mv[i + 8 : i + 16])[0], 16
        elif size == 0:  # the box runs to the end of the file
            size = len(mv) - i
        if size < head or i + size > len(mv):
            break
        if kind == b"jp2c":
            return mv[i + head : i + size]
        i += size
    raise ValueError("no jp2c box in the JP2 file")


def _main_header(mv: memoryview) -> tuple[list[tuple[int, int, int]], int]:
    """The main header's marker segments after SOC as (offset, marker, length), and where the walk stopped.

    It stops at the first tile-part (SOT), garbage, or the end.
    """
    segments, i = [], 2
    while i + 4 <= len(mv):
        marker, length = struct.unpack(">HH", mv[i : i + 4])
        if marker == 0xFF90 or marker >> 8 != 0xFF:
            break
        segments.append((i, marker, length))
        i += 2 + length
    return segments, i


def codestream_style(cs: Buffer) -> int:
    """The code-block style byte of a codestream's main-header COD marker."""
    mv = memoryview(cs).cast("B")
    if bytes(mv[:2]) != b"\xff\x4f":
        raise ValueError("codestream does not start with SOC")
    for i, marker, length in _main_header(mv)[0]:
        if marker == 0xFF52:  # COD: Scod, SGcod(4), SPcod: levels, xcb, ycb, style, transform
            if length < 12 or i + 2 + length > len(mv):
                break
            return mv[i + 12]
    raise ValueError("no COD marker in the JPEG 2000 main header")


def jp2_profile(data: bytes) -> str:
    """The depth profile a JP2 payload was encoded with, from its COD marker's code-block style."""
    style = codestream_style(jp2_codestream(data))
    return "htj2k" if style & 0x40 else "jpeg2000" if style & 0x01 else "jpeg2000_strict"


def probe(data: bytes, kind: str) -> tuple[int, int]:
    """(width, height) from the header of a JPEG ("rgb") or JP2 ("depth") payload, without decoding."""
    if kind == "rgb" and not data.startswith(b"\xff\xd8"):
        raise ValueError("RGB payload is not a JPEG")
    if kind == "depth" and not data.startswith(_JP2_SIGNATURE):
        raise ValueError("depth payload is not a JP2 file")
    im = Image.open(io.BytesIO(data))
    want = ("RGB", "L") if kind == "rgb" else ("I;16",)
    if im.mode not in want:
        raise ValueError(f"{kind} payload has mode {im.mode}, expected {want[0]}")
    return im.size


def decode_depth_pillow(data: Buffer) -> np.ndarray:
    """JP2 bytes -> HxW uint16 mm with Pillow/OpenJPEG (the reference loader's decoder)."""
    im = Image.open(io.BytesIO(bytes(data)))
    arr = np.asarray(im)
    if arr.dtype != np.uint16:
        arr = arr.astype(np.uint16)
    return arr


def decode_depth_fast(data: Buffer, threads: int = 1) -> np.ndarray:
    """JP2 bytes -> HxW uint16 mm, bit-exact.

    HTJ2K codestreams go to OpenJPH (the cheaper decoder) where imagecodecs has it, everything else (and HTJ2K without
    OpenJPH) to imagecodecs' OpenJPEG 2.5 (``threads`` decoder threads).
    """
    import imagecodecs

    try:
        cs = jp2_codestream(data)
        ht = bool(codestream_style(cs) & 0x40) and htj2k_available()
    except ValueError:
        ht = False  # let OpenJPEG report what is wrong with it
    if ht:
        out = imagecodecs.htj2k_decode(_codec_input(cs))
        if out.dtype == np.uint16 and out.ndim == 2:
            return out
    return imagecodecs.jpeg2k_decode(_codec_input(data), numthreads=threads)
