/* The fixed slices a kernel's sum over rows is cut into (build.py's SLICES, passed in by
   the caller whatever the thread count): the rows of one slice, and an element of the
   slices' partial sums added in slice order. So a sum is the same on any thread count. */

#ifndef LATENTLENS_SLICES_H
#define LATENTLENS_SLICES_H

#include <stddef.h>

/* Rows [begin, end) of slice `part` of `slices` over n rows. */
static inline void rows_of(size_t n, int part, int slices, size_t *begin, size_t *end) {
    *begin = n * (size_t)part / (size_t)slices;
    *end = n * (size_t)(part + 1) / (size_t)slices;
}

/* Element `at` of the slices' partial sums, each slice's `stride` floats apart, added in
   slice order. */
static inline float slice_sum(int slices, size_t stride, const float *partial, size_t at) {
    float total = 0.f;
    for (int part = 0; part < slices; part++) total += partial[(size_t)part * stride + at];
    return total;
}

#endif
