/* A bias's gradient: the column sums of dy [n, c] (row-major float32, contiguous). The
   rows are cut into `slices` blocks, a number the caller fixes whatever the thread
   count; each block is summed in row order, the threads share the blocks, and the
   blocks' sums are added in block order: the same numbers on any thread count, where a
   compiled step's own sum over rows splits them by thread. partial: slices x c zeros. */

#include <stddef.h>

#include "slices.h"

void column_sums(int threads, int slices, size_t n, size_t c, const float *restrict dy,
                 float *restrict sums, float *restrict partial) {
    if ((size_t)slices > n) slices = n ? (int)n : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int part = 0; part < slices; part++) {
        size_t begin, end;
        rows_of(n, part, slices, &begin, &end);
        float *mine = partial + (size_t)part * c;
        for (size_t row = begin; row < end; row++) {
#pragma omp simd
            for (size_t j = 0; j < c; j++) mine[j] += dy[row * c + j];
        }
    }
    for (size_t j = 0; j < c; j++) sums[j] = slice_sum(slices, c, partial, j);
}
