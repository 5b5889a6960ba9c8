"""xdc: a ctypes binding of libxdc (include/xdc.h; docs/api.md, "Python").

A program run by ``xdc launch ... --exec -- python prog.py`` joins the run as one member with ``Comm()``
and averages float32 buffers over every member of every region::

    import array, xdc
    with xdc.Comm() as comm:
        buf = array.array('f', [float(comm.rank)] * 1000)
        comm.allreduce(buf, tag=0)  # buf is now the mean over every member

A failed call raises ``xdc.Error`` (``xdc.Timeout`` for XDC_STATUS_TIMEOUT) with the status name and the
library's diagnostic.

Device memory: an object with ``__cuda_array_interface__`` (a torch CUDA tensor, a CuPy array) is taken as
device memory on its device and its stream (libxdc's ``*_device`` calls; docs/api.md, "Device memory").
"""

import ctypes
import ctypes.util
import os
import subprocess
import sys

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


class _OuterOptions(ctypes.Structure):
    """xdc_outer_options (include/xdc.h, since 0.3)."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("keep_unsent", ctypes.c_int), ("final_codec", ctypes.c_char_p)]


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
        "xdc_outer_configure": (c_int, [c_void_p, c_int, ctypes.POINTER(_OuterOptions)]),
        "xdc_outer_last_round": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p)]),
        "xdc_outer_begin": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p)]),
        "xdc_outer_apply": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p)]),
        "xdc_outer_state_size": (c_int, [c_void_p, c_int, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)]),
        "xdc_outer_get_state": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_void_p]),
        "xdc_outer_set_state": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_void_p]),
        "xdc_allreduce_device": (c_int, [c_void_p, c_int, c_void_p, c_size_t, c_int, c_void_p]),
        "xdc_iallreduce_device": (c_int, [c_void_p, c_int, c_void_p, c_size_t, c_int, c_void_p,
                                          ctypes.POINTER(c_void_p)]),
        "xdc_outer_init_device": (c_int, [c_void_p, c_int, c_int, ctypes.POINTER(c_void_p),
                                          ctypes.POINTER(c_size_t), c_int, c_void_p]),
        "xdc_outer_round_device": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), c_void_p]),
        "xdc_outer_last_round_device": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), c_void_p]),
        "xdc_outer_begin_device": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), c_void_p]),
        "xdc_outer_apply_device": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), c_void_p]),
        "xdc_device_alloc": (c_int, [c_void_p, c_int, c_size_t, ctypes.POINTER(c_void_p)]),
        "xdc_device_free": (None, [c_void_p, c_void_p]),
        "xdc_device_copy": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
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


class DeviceBuffer:
    """float32 device memory as libxdc's device calls take it, from an object's ``__cuda_array_interface__``:
    ``ptr``, ``count``, ``device`` (the ordinal: the object's ``device`` as an int, a ``.index`` (torch) or
    an ``.id`` (CuPy); 0 without one) and ``stream`` (the interface's, None: NULL, the legacy default stream).
    Keeps the object alive (a request in flight)."""

    __slots__ = ("obj", "ptr", "count", "device", "stream")

    def __init__(self, obj):
        cai = obj.__cuda_array_interface__
        shape = tuple(cai["shape"])
        count = 1
        for n in shape:
            count *= n
        if cai["typestr"] != "<f4":
            raise TypeError("xdc: want float32 device memory (typestr '<f4'), got %r" % cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != tuple(4 * _prod(shape[i + 1:]) for i in range(len(shape))):
            raise TypeError("xdc: the device buffer is not C-contiguous (shape %s, strides %s)" % (shape, strides))
        ptr, readonly = cai["data"]
        if readonly:
            raise TypeError("xdc: the device buffer is read-only; the call writes into it")
        if count == 0:
            raise ValueError("xdc: the buffer is empty")
        self.obj, self.ptr, self.count = obj, ptr, count
        self.device = device_of(obj)
        self.stream = cai.get("stream")
        if "stream" not in cai and "torch" in sys.modules and isinstance(obj, sys.modules["torch"].Tensor):
            # torch's interface (version 2) names no stream: the work on it is queued on torch's current one
            self.stream = sys.modules["torch"].cuda.current_stream(self.device).cuda_stream or None


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def device_of(obj):
    """The device ordinal of device memory obj (see DeviceBuffer), or None for host memory (no
    ``__cuda_array_interface__``, or a tensor whose device type is cpu)."""
    dev = getattr(obj, "device", None)
    if getattr(dev, "type", None) == "cpu" or not hasattr(obj, "__cuda_array_interface__"):
        return None
    if isinstance(dev, int):
        return dev
    for field in ("index", "id"):
        if isinstance(getattr(dev, field, None), int):
            return getattr(dev, field)
    return 0


def _tensor_float32(t):
    """(ctypes view of t's memory, count) for a tensor-like object (torch.Tensor: data_ptr(), numel(), dtype):
    CPU, float32, contiguous. No torch import here: only the object's own methods are used. The view keeps a
    reference to t, so its storage lives as long as the view (a request in flight)."""
    dtype = str(getattr(t, "dtype", "?"))
    device = getattr(t, "device", None)
    kind = getattr(device, "type", "cpu") if device is not None else "cpu"
    if kind != "cpu":
        raise TypeError("xdc: a tensor on %s: host memory here, or device memory through __cuda_array_interface__ "
                        "(a CUDA tensor)" % device)
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

    __slots__ = ("_comm", "_handle", "_view", "done")  # _view: the buffer's ctypes view or DeviceBuffer

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
        """buffer (writable float32) becomes the mean over every member, in place; blocks. Device memory
        (``__cuda_array_interface__``): ordered on its stream, which reads the mean after the call."""
        if device_of(buffer) is not None:
            self.iallreduce(buffer, tag).wait()
            return
        view, count = _float32(buffer)
        self._check(_library().xdc_allreduce(self._live(), tag, view, count))

    def iallreduce(self, buffer, tag=0):
        """The same round, started at once; returns a Request that keeps buffer until it completed."""
        req = ctypes.c_void_p()
        if device_of(buffer) is not None:
            view = DeviceBuffer(buffer)
            self._check(_library().xdc_iallreduce_device(self._live(), tag, view.ptr, view.count, view.device,
                                                         view.stream, ctypes.byref(req)))
        else:
            view, count = _float32(buffer)
            self._check(_library().xdc_iallreduce(self._live(), tag, view, count, ctypes.byref(req)))
        return Request(self, req, view)

    @staticmethod
    def _params(params):
        """(pointers, counts, views, device) of a parameter list: host buffers (device None) or device memory
        of one device; a list that mixes them, or devices, is refused naming the first parameter that
        differs."""
        devices = [device_of(p) for p in params]
        for i, d in enumerate(devices):
            if d != devices[0]:
                raise ValueError("xdc: parameter %d is on %s, parameter 0 on %s: one device per parameter list"
                                 % (i, _place(d), _place(devices[0])))
        if devices and devices[0] is not None:
            views = [DeviceBuffer(p) for p in params]
            ptrs, counts = [v.ptr for v in views], [v.count for v in views]
        else:
            pairs = [_float32(p) for p in params]
            views = [v for v, _ in pairs]
            ptrs, counts = [ctypes.addressof(v) for v in views], [n for _, n in pairs]
        return ((ctypes.c_void_p * len(ptrs))(*ptrs), (ctypes.c_size_t * len(counts))(*counts), views,
                devices[0] if devices else None)

    def outer_init(self, tag, params):
        """DiLoCo outer state on tag for the list of float32 buffers params (their values now: the global
        parameters); allocates once in the library. Device memory: the outer state on its device."""
        ptrs, counts, views, device = self._params(params)
        if device is None:
            self._check(_library().xdc_outer_init(self._live(), tag, len(views), ptrs, counts))
        else:
            self._check(_library().xdc_outer_init_device(self._live(), tag, len(views), ptrs, counts, device,
                                                         views[0].stream))

    def _outer(self, name, tag, params):
        """xdc_<name> over params: host buffers, or device memory of one device (xdc_<name>_device, on the
        first parameter's stream)."""
        ptrs, _, views, device = self._params(params)
        if device is None:
            self._check(getattr(_library(), "xdc_" + name)(self._live(), tag, ptrs))
        else:
            self._check(getattr(_library(), "xdc_" + name + "_device")(self._live(), tag, ptrs, views[0].stream))

    def outer_round(self, tag, params):
        """One outer round (collective, blocking) over params, a list of the shape given to outer_init:
        every member ends with the same values in every buffer (device memory: on its stream)."""
        self._outer("outer_round", tag, params)

    def outer_configure(self, tag, keep_unsent=False, final_codec=None):
        """Before the tag's first round (xdc_outer_configure): keep_unsent (the codec's unsent part stays in
        the parameters; one member per region), and the codec of outer_last_round (None: the run file's
        diloco.final_codec; "": the run's codec)."""
        o = _OuterOptions(struct_size=ctypes.sizeof(_OuterOptions), keep_unsent=1 if keep_unsent else 0,
                          final_codec=None if final_codec is None else final_codec.encode())
        self._check(_library().xdc_outer_configure(self._live(), tag, ctypes.byref(o)))

    def outer_last_round(self, tag, params):
        """The tag's last round (collective, blocking), in its final codec (with keep_unsent the plain mean):
        every member ends with the same values; the tag takes no round after it."""
        self._outer("outer_last_round", tag, params)

    def outer_begin(self, tag, params):
        """Begin an overlapped outer round over params now (returns at once; train on, then outer_apply)."""
        self._outer("outer_begin", tag, params)

    def outer_apply(self, tag, params):
        """Apply the round in flight (collective, waits for its exchange): params = new global + the progress
        made since outer_begin (- the unsent part with keep_unsent)."""
        self._outer("outer_apply", tag, params)

    def outer_state_size(self, tag):
        """(parameters, residual): the float32 counts of the tag's outer state (global and momentum have the
        first each; the codec's error-feedback residual the second, 0 for an exact codec or one region)."""
        n, r = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(_library().xdc_outer_state_size(self._live(), tag, ctypes.byref(n), ctypes.byref(r)))
        return n.value, r.value

    def outer_get_state(self, tag, global_params, momentum, residual):
        """Copy the tag's outer state (between rounds) into three writable float32 buffers of the sizes
        outer_state_size gives (residual may be None when it is 0)."""
        self._outer_state(_library().xdc_outer_get_state, tag, global_params, momentum, residual)

    def outer_set_state(self, tag, global_params, momentum, residual):
        """Set the tag's outer state (between rounds) from three float32 buffers, as outer_get_state gave them."""
        self._outer_state(_library().xdc_outer_set_state, tag, global_params, momentum, residual)

    def _outer_state(self, fn, tag, global_params, momentum, residual):
        n, r = self.outer_state_size(tag)
        views = [_float32(b) if b is not None else (None, 0) for b in (global_params, momentum, residual)]
        if [c for _, c in views] != [n, n, r]:
            raise ValueError("xdc: outer state of tag %d: want %d, %d and %d float32 values, got %s"
                             % (tag, n, n, r, [c for _, c in views]))
        ptrs = [ctypes.addressof(v) if v is not None else None for v, _ in views]
        self._check(fn(self._live(), tag, *ptrs))

    def device_alloc(self, nbytes, device=0):
        """Device memory of XDC_DEVICE's device (zero-filled): its address, for a program without a runtime
        of its own (xdc_device_alloc; free it with device_free)."""
        out = ctypes.c_void_p()
        self._check(_library().xdc_device_alloc(self._live(), device, nbytes, ctypes.byref(out)))
        return out.value

    def device_free(self, ptr):
        _library().xdc_device_free(self._live(), ptr)

    def device_copy(self, dst, src, nbytes, to_device, device=0, stream=None):
        """Copy nbytes between host and device memory (addresses; to_device: src is host), waited for."""
        self._check(_library().xdc_device_copy(self._live(), device, dst, src, nbytes, int(bool(to_device)),
                                               stream))

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


def _place(device):
    return "the host" if device is None else "device %d" % device


def _bytes(s):
    return None if s is None else os.fsencode(s)
