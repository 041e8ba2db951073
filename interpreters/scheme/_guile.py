"""cffi bindings to the part of libguile 3.0 that ag_scheme uses (ABI mode: no compiler).

Only exported functions are used, never Guile's C macros or immediate constants (SCM_EOL,
SCM_BOOL_F and the like are bit patterns that may change between versions): lists and
booleans are built on the Scheme side of the adapter instead.

A Guile error must never unwind (longjmp) through a Python frame, so every primitive the
adapter registers checks its arguments' types with the scm_is_* predicates before
converting them, and reports failures as return values that Scheme code turns into errors.
"""

from __future__ import annotations

import cffi

ffi = cffi.FFI()
ffi.cdef("""
typedef uintptr_t SCM;
void scm_init_guile(void);
SCM scm_c_eval_string(const char *expr);
SCM scm_c_define_gsubr(const char *name, int req, int opt, int rst, void *fcn);
SCM scm_c_define(const char *name, SCM val);
SCM scm_from_utf8_stringn(const char *str, size_t len);
char *scm_to_utf8_stringn(SCM str, size_t *lenp);
SCM scm_from_int32(int32_t x);
int32_t scm_to_int32(SCM x);
SCM scm_c_make_bytevector(size_t len);
size_t scm_c_bytevector_length(SCM bv);
SCM scm_bytevector_to_pointer(SCM bv, SCM offset);
void *scm_to_pointer(SCM pointer);
int scm_is_bytevector(SCM obj);
int scm_is_string(SCM obj);
int scm_is_signed_integer(SCM val, int64_t min, int64_t max);
void free(void *);
""")

LIBRARY = "libguile-3.0.so.1"


class Guile:
    """libguile, loaded, with conversions between Python values and SCM."""

    def __init__(self) -> None:
        self.lib = ffi.dlopen(LIBRARY)
        self.libc = ffi.dlopen(None)
        self._zero = None

    def init(self) -> None:
        self.lib.scm_init_guile()
        self._zero = self.lib.scm_from_int32(0)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        return int(self.lib.scm_from_utf8_stringn(data, len(data)))

    def to_str(self, value: int) -> str | None:
        if not self.lib.scm_is_string(value):
            return None
        size = ffi.new("size_t *")
        pointer = self.lib.scm_to_utf8_stringn(value, size)
        try:
            return bytes(ffi.unpack(pointer, size[0])).decode("utf-8")
        finally:
            self.libc.free(pointer)

    def from_int(self, value: int) -> int:
        return int(self.lib.scm_from_int32(value))

    def to_int(self, value: int) -> int | None:
        if not self.lib.scm_is_signed_integer(value, -(2**31), 2**31 - 1):
            return None
        return int(self.lib.scm_to_int32(value))

    def _contents(self, bytevector: int) -> object:
        return self.lib.scm_to_pointer(self.lib.scm_bytevector_to_pointer(bytevector,
                                                                          self._zero))

    def bytevector(self, data: bytes) -> int:
        value = self.lib.scm_c_make_bytevector(len(data))
        if data:
            ffi.memmove(self._contents(value), data, len(data))
        return int(value)

    def to_bytes(self, value: int) -> bytes | None:
        if not self.lib.scm_is_bytevector(value):
            return None
        size = self.lib.scm_c_bytevector_length(value)
        if not size:
            return b""
        return bytes(ffi.unpack(ffi.cast("char *", self._contents(value)), size))


_guile: Guile | None = None


def load() -> Guile:
    """libguile, loaded once per process (raises OSError if it is not installed)."""
    global _guile
    if _guile is None:
        _guile = Guile()
    return _guile
