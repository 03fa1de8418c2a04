# Random numbers: the sampler's own stream (splitmix64), seeded per generation.
# Included by src/_mnn.pyx: one extension, a file per concept.

cdef inline uint64_t splitmix64(uint64_t* state) noexcept nogil:
    state[0] += <uint64_t>0x9E3779B97F4A7C15
    cdef uint64_t z = state[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef inline double uniform01(uint64_t* state) noexcept nogil:
    # 53 random bits -> [0, 1); identical on every platform for a given seed
    return (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0)
