"""xdc: a ctypes binding of libxdc (include/xdc.h; docs/api.md, "Python").

A program run by ``xdc launch ... --exec -- python prog.py`` joins the run as one member with ``Comm()``
and averages float32 buffers over every member of every region::

    import array, xdc
    with xdc.Comm() as comm:
        buf = array.array('f', [float(comm.rank)] * 1000)
        comm.allreduce(buf, tag=0)  # buf is now the mean over every member

A failed call raises ``xdc.Error`` (``xdc.Timeout`` for XDC_STATUS_TIMEOUT) with the status name and the
library's diagnostic.
"""

import ctypes
import ctypes.util
import os
import subprocess

# The libxdc API this binding was written against (include/xdc.h): a library of the same major and a minor
# at least this one has every call used here.
API_VERSION_MAJOR = 0
API_VERSION_MINOR = 3
API_VERSION = (API_VERSION_MAJOR << 16) | API_VERSION_MINOR

# include/xdc.h's status codes, by value (part of the API: never renumbered).
STATUS_NAMES = (
    "XDC_SUCCESS", "XDC_STATUS_INVALID", "XDC_STATUS_NOMEM", "XDC_STATUS_IO", "XDC_STATUS_CONFIG",
    "XDC_STATUS_PROTOCOL", "XDC_STATUS_CORRUPT", "XDC_STATUS_RANGE", "XDC_STATUS_TIMEOUT",
    "XDC_STATUS_IN_PROGRESS", "XDC_STATUS_CLOSED", "XDC_STATUS_UNAVAILABLE", "XDC_STATUS_PEER_LOST",
    "XDC_STATUS_TLS", "XDC_STATUS_AUTH", "XDC_STATUS_UNSUPPORTED", "XDC_STATUS_DEVICE", "XDC_STATUS_INTERNAL",
    "XDC_STATUS_INTERRUPTED",
)
SUCCESS = 0
STATUS_TIMEOUT = STATUS_NAMES.index("XDC_STATUS_TIMEOUT")
STATUS_IN_PROGRESS = STATUS_NAMES.index("XDC_STATUS_IN_PROGRESS")

_ERR_CAP = 1024  # bytes of xdc_comm_create's diagnostic buffer, as the C example


class Error(Exception):
    """A libxdc call failed: ``status`` (int), ``name`` (``XDC_STATUS_...``), ``message`` (the diagnostic)."""

    def __init__(self, status, message):
        self.status = status
        self.name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else "status %d" % status
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


class Timeout(Error):
    """XDC_STATUS_TIMEOUT: ``Request.wait``'s deadline passed (the round goes on), or a peer's (it failed)."""


class LibraryNotFound(Error, OSError):
    """libxdc.so could not be loaded, or its major version is not the binding's."""

    def __init__(self, message):
        Error.__init__(self, STATUS_NAMES.index("XDC_STATUS_UNAVAILABLE"), message)


def _raise(status, message):
    raise (Timeout if status == STATUS_TIMEOUT else Error)(status, message)


def _pkg_config_libdir():
    """pkg-config's libdir of xdc (the installed prefix's lib/), or None."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "xdc"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _candidates():
    """(place, path) pairs in search order: $XDC_LIB, the package's own copy (python/setup.py puts it there),
    pkg-config's libdir, the linker's search."""
    env = os.environ.get("XDC_LIB")
    if env:
        yield "$XDC_LIB", env
        return  # an explicit choice: no falling back to another copy
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libxdc.so")
    yield "the package's libxdc.so", bundled if os.path.isfile(bundled) else None
    libdir = _pkg_config_libdir()
    soname = "libxdc.so.%d" % API_VERSION_MAJOR
    yield "pkg-config --variable=libdir xdc", os.path.join(libdir, soname) if libdir else None
    yield "ctypes.util.find_library('xdc')", ctypes.util.find_library("xdc")


def _load():
    tried = []
    for place, path in _candidates():
        if not path:
            tried.append("%s: nothing" % place)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s" % (place, e))
            continue
        lib.xdc_api_version.restype = ctypes.c_int
        version = lib.xdc_api_version()
        if version >> 16 != API_VERSION_MAJOR or version & 0xFFFF < API_VERSION_MINOR:
            raise LibraryNotFound("%s (from %s) is libxdc %d.%d; this binding needs %d.%d or a later 0.x minor"
                                  % (path, place, version >> 16, version & 0xFFFF, API_VERSION_MAJOR,
                                     API_VERSION_MINOR))
        return lib, path
    raise LibraryNotFound("libxdc.so not found; tried " + "; ".join(tried) +
                          " (pip install the package from python/, which builds it in; or set XDC_LIB to the "
                          "library, or PKG_CONFIG_PATH to the prefix's lib/pkgconfig)")


class _Options(ctypes.Structure):
    """xdc_comm_options (include/xdc.h)."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("api_version", ctypes.c_uint32), ("topology", ctypes.c_char_p),
                ("config", ctypes.c_char_p), ("run_dir", ctypes.c_char_p), ("emulate_wan", ctypes.c_int)]


class _Stats(ctypes.Structure):
    """xdc_comm_stats (include/xdc.h, since 0.2)."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("wan_tx_bytes", ctypes.c_uint64), ("wan_rx_bytes", ctypes.c_uint64),
                ("wan_raw_bytes", ctypes.c_uint64), ("wan_wire_bytes", ctypes.c_uint64)]


def _declare(lib):
    c_int, c_char_p, c_void_p, c_size_t = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
    sigs = {
        "xdc_status_string": (c_char_p, [c_int]),
        "xdc_comm_create": (c_int, [ctypes.POINTER(_Options), ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
        "xdc_comm_finalize": (c_int, [c_void_p]),
        "xdc_comm_destroy": (None, [c_void_p]),
        "xdc_comm_last_error": (c_char_p, [c_void_p]),
        "xdc_comm_rank": (c_int, [c_void_p]),
        "xdc_comm_size": (c_int, [c_void_p]),
        "xdc_comm_region": (c_int, [c_void_p]),
        "xdc_comm_num_regions": (c_int, [c_void_p]),
        "xdc_comm_region_name": (c_char_p, [c_void_p]),
        "xdc_comm_region_rank": (c_int, [c_void_p]),
        "xdc_comm_region_size": (c_int, [c_void_p]),
        "xdc_allreduce": (c_int, [c_void_p, c_int, c_void_p, c_size_t]),
        "xdc_iallreduce": (c_int, [c_void_p, c_int, c_void_p, c_size_t, ctypes.POINTER(c_void_p)]),
        "xdc_request_test": (c_int, [c_void_p]),
        "xdc_request_wait": (c_int, [c_void_p, ctypes.c_int64]),
        "xdc_outer_init": (c_int, [c_void_p, c_int, c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
        "xdc_outer_round": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p)]),
        "xdc_comm_get_stats": (c_int, [c_void_p, ctypes.POINTER(_Stats)]),
        "xdc_comm_check_same": (c_int, [c_void_p, ctypes.c_uint64]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


_lib = None
library_path = None  # the libxdc.so loaded (after the first Comm or api_version())


def _library():
    global _lib, library_path
    if _lib is None:
        lib, path = _load()
        _declare(lib)
        _lib, library_path = lib, path
    return _lib


def api_version():
    """The loaded library's XDC_API_VERSION: (major, minor)."""
    v = _library().xdc_api_version()
    return v >> 16, v & 0xFFFF


def status_string(status):
    """libxdc's short text for a status code."""
    return _library().xdc_status_string(status).decode()


def _tensor_float32(t):
    """(ctypes view of t's memory, count) for a tensor-like object (torch.Tensor: data_ptr(), numel(), dtype):
    CPU, float32, contiguous. No torch import here: only the object's own methods are used. The view keeps a
    reference to t, so its storage lives as long as the view (a request in flight)."""
    dtype = str(getattr(t, "dtype", "?"))
    device = getattr(t, "device", None)
    kind = getattr(device, "type", "cpu") if device is not None else "cpu"
    if kind != "cpu":
        raise TypeError("xdc: a tensor on %s: only CPU tensors are supported (CUDA tensors are not yet)" % device)
    if dtype not in ("torch.float32", "float32"):
        raise TypeError("xdc: want a float32 tensor, got dtype %s" % dtype)
    if not t.is_contiguous():
        raise TypeError("xdc: the tensor is not contiguous (shape %s, strides %s): pass t.contiguous() and copy "
                        "the result back" % (tuple(t.shape), tuple(t.stride())))
    count = t.numel()
    if count == 0:
        raise ValueError("xdc: the buffer is empty")
    view = (ctypes.c_float * count).from_address(t.data_ptr())
    view.tensor = t  # t's storage outlives every use of the view
    return view, count


def _float32(buf):
    """(ctypes view pinning buf, count) for a writable, C-contiguous buffer of float32 (array('f'), a
    memoryview, a numpy float32 array) or a CPU float32 contiguous tensor (anything with data_ptr() and
    numel()). The view holds buf's buffer export, or the tensor: buf cannot be resized (a buffer) or freed
    while it lives."""
    if hasattr(buf, "data_ptr") and hasattr(buf, "numel"):
        return _tensor_float32(buf)
    mv = memoryview(buf)
    if mv.readonly:
        raise TypeError("xdc: the buffer is read-only; the all-reduce writes the mean into it")
    if mv.itemsize != 4 or mv.format.lstrip("@=<") != "f" or not mv.c_contiguous:
        raise TypeError("xdc: want a C-contiguous buffer of float32 (format 'f'), got format %r, itemsize %d%s"
                        % (mv.format, mv.itemsize, "" if mv.c_contiguous else ", not contiguous"))
    count = mv.nbytes // 4
    if count == 0:
        raise ValueError("xdc: the buffer is empty")
    return (ctypes.c_float * count).from_buffer(mv.cast("B")), count


class Request:
    """A non-blocking all-reduce in flight (``Comm.iallreduce``). Its buffer is the library's, and kept
    alive here, until the request completed: ``test()`` returned True, ``wait()`` returned, or either
    raised an error other than ``wait``'s own deadline."""

    __slots__ = ("_comm", "_handle", "_view", "done")

    def __init__(self, comm, handle, view):
        self._comm, self._handle, self._view = comm, handle, view
        self.done = False

    def _settle(self, status):
        """The request completed with status: the buffer is the caller's again."""
        self.done, self._view = True, None
        if status != SUCCESS:
            self._comm._raise(status)
        return True

    def test(self):
        """True when complete (the mean is in the buffer), False when still in flight; never blocks."""
        if self.done:
            return True
        status = _library().xdc_request_test(self._handle)
        return False if status == STATUS_IN_PROGRESS else self._settle(status)

    def wait(self, timeout_ms=-1):
        """Wait at most timeout_ms (< 0: no deadline). Raises xdc.Timeout when the deadline passed first:
        the round goes on, and the request is still pending (wait or test again)."""
        if self.done:
            return
        status = _library().xdc_request_wait(self._handle, timeout_ms)
        if status == STATUS_TIMEOUT and timeout_ms >= 0:
            self._comm._raise(status)  # still pending: keep the buffer
        self._settle(status)


class Comm:
    """One member of an xdc run (xdc_comm). Fields left None come from the environment ``xdc launch --exec``
    sets (docs/api.md, "The environment"). Collective: every member creates one. As a context manager, a
    clean exit finalizes (waits for every member) before it destroys; an exception destroys only, so the
    others see this member fail."""

    def __init__(self, topology=None, config=None, run_dir=None, emulate_wan=None):
        lib = _library()
        opts = _Options(ctypes.sizeof(_Options), API_VERSION, _bytes(topology), _bytes(config), _bytes(run_dir),
                        -1 if emulate_wan is None else int(bool(emulate_wan)))
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERR_CAP)
        status = lib.xdc_comm_create(ctypes.byref(opts), ctypes.byref(handle), err, _ERR_CAP)
        if status != SUCCESS:
            _raise(status, err.value.decode(errors="replace"))
        self._handle = handle

    def _raise(self, status):
        _raise(status, _library().xdc_comm_last_error(self._handle).decode(errors="replace"))

    def _check(self, status):
        if status != SUCCESS:
            self._raise(status)

    def _live(self):
        if self._handle is None:
            raise Error(STATUS_NAMES.index("XDC_STATUS_CLOSED"), "the communicator was closed")
        return self._handle

    @property
    def rank(self):
        """Global rank over every region (regions in topology order, ranks within)."""
        return _library().xdc_comm_rank(self._live())

    @property
    def size(self):
        """Number of members of the run."""
        return _library().xdc_comm_size(self._live())

    @property
    def region(self):
        """This member's region index (topology order)."""
        return _library().xdc_comm_region(self._live())

    @property
    def num_regions(self):
        return _library().xdc_comm_num_regions(self._live())

    @property
    def region_name(self):
        return _library().xdc_comm_region_name(self._live()).decode()

    @property
    def region_rank(self):
        """Rank within this member's region (since 0.3)."""
        return _library().xdc_comm_region_rank(self._live())

    @property
    def region_size(self):
        """Members of this member's region (since 0.3)."""
        return _library().xdc_comm_region_size(self._live())

    def allreduce(self, buffer, tag=0):
        """buffer (writable float32) becomes the mean over every member, in place; blocks."""
        view, count = _float32(buffer)
        self._check(_library().xdc_allreduce(self._live(), tag, view, count))

    def iallreduce(self, buffer, tag=0):
        """The same round, started at once; returns a Request that keeps buffer until it completed."""
        view, count = _float32(buffer)
        req = ctypes.c_void_p()
        self._check(_library().xdc_iallreduce(self._live(), tag, view, count, ctypes.byref(req)))
        return Request(self, req, view)

    def outer_init(self, tag, params):
        """DiLoCo outer state on tag for the list of float32 buffers params (their values now: the global
        parameters); allocates once in the library."""
        views = [_float32(p) for p in params]
        ptrs = (ctypes.c_void_p * len(views))(*[ctypes.addressof(v) for v, _ in views])
        counts = (ctypes.c_size_t * len(views))(*[n for _, n in views])
        self._check(_library().xdc_outer_init(self._live(), tag, len(views), ptrs, counts))

    def outer_round(self, tag, params):
        """One outer round (collective, blocking) over params, a list of the shape given to outer_init:
        every member ends with the same values in every buffer."""
        views = [_float32(p)[0] for p in params]
        ptrs = (ctypes.c_void_p * len(views))(*[ctypes.addressof(v) for v in views])
        self._check(_library().xdc_outer_round(self._live(), tag, ptrs))

    def stats(self):
        """What this member's WAN connections carried so far (xdc_comm_get_stats), in bytes: a dict with
        wan_tx_bytes (sent, after the codec), wan_rx_bytes (received), wan_raw_bytes (the fp32 bytes the sent
        payload stands for) and wan_wire_bytes (frame headers included)."""
        st = _Stats(struct_size=ctypes.sizeof(_Stats))
        self._check(_library().xdc_comm_get_stats(self._live(), ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in _Stats._fields_[1:]}

    def check_same(self, value):
        """Collective: raises xdc.Error XDC_STATUS_CORRUPT (on every member) unless every member passed the
        same value, an int of 64 bits (e.g. a hash of the starting parameters). Exact whatever the codec."""
        self._check(_library().xdc_comm_check_same(self._live(), value & 0xFFFFFFFFFFFFFFFF))

    def finalize(self):
        """The end of the run for this member (collective): returns when every member reached it."""
        self._check(_library().xdc_comm_finalize(self._live()))

    def close(self):
        """Tear the communicator down (xdc_comm_destroy); without finalize() first the others see this
        member leave as a failure. A second close does nothing."""
        if self._handle is not None:
            _library().xdc_comm_destroy(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.finalize()
        finally:
            self.close()
        return False


def _bytes(s):
    return None if s is None else os.fsencode(s)
