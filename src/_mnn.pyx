# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# distutils: language = c++
"""Native core of mnn_engine: MNN's Llm, our generation loop and our sampler.

Everything per token (forward, sampling, stop checks, detokenising, UTF-8
assembly) runs with the GIL released; the per-token callback takes the GIL
only for itself. The Python layer (mnn_engine.runtime) validates arguments,
builds a GenerationSettings and wraps the GenerationOutcome it gets back.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cython.operator cimport dereference as deref
from libc.float cimport FLT_MAX
from libc.math cimport INFINITY, exp, log
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp
from libcpp cimport bool as cbool
from libcpp.atomic cimport atomic
from libcpp.string cimport string
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector


cdef extern from "<algorithm>" namespace "std" nogil:
    void nth_element[Iter](Iter first, Iter nth, Iter last)
    void partial_sort[Iter](Iter first, Iter middle, Iter last)


def build_info() -> dict:
    """How this extension was built (provenance), as compiled into it."""
    return {
        "mnn_engine_version": MNN_ENGINE_BUILD_VERSION.decode(),
        "mode": MNN_ENGINE_BUILD_MODE.decode(),
        "mnn_version": MNN_ENGINE_BUILD_MNN_VERSION.decode(),
        "mnn_commit": MNN_ENGINE_BUILD_MNN_COMMIT.decode(),
        "mnn_source": MNN_ENGINE_BUILD_MNN_SOURCE.decode(),
        "backends_compiled": [b for b in MNN_ENGINE_BUILD_BACKENDS.decode().split(",") if b],
        "compiler": MNN_ENGINE_BUILD_COMPILER.decode(),
        "cpu_family": MNN_ENGINE_BUILD_CPU_FAMILY.decode(),
        "system": MNN_ENGINE_BUILD_SYSTEM.decode(),
        "buildtype": MNN_ENGINE_BUILD_BUILDTYPE.decode(),
        "flags": MNN_ENGINE_BUILD_FLAGS.decode(),
    }


# One extension, a file per concept (uvloop-style includes). The MNN API
# they call is declared once, in _mnn.pxd (from src/mnn_llm_api.h).
include "core/random.pxi"
include "core/text.pxi"
include "core/drafting.pxi"
include "core/sampler.pxi"
include "core/boundary.pxi"
include "core/prefill.pxi"
include "core/loop.pxi"
include "core/llm_core.pxi"
include "core/measure.pxi"
