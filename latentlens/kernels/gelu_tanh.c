/* GELU's tanh approximation (gelu_tanh.h) and its gradient, as one vectorised pass each
   (PyTorch's CPU kernel runs about 6x slower than a tanh on this layout).
   x, y, dy, dx: n floats, contiguous; the loops run on `threads` OpenMP threads (the
   runtime PyTorch has loaded). */

#include <stddef.h>

#include "gelu_tanh.h"
#include "slices.h"

void gelu_tanh_forward(int threads, size_t n, const float *restrict x, float *restrict y) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = gelu_of(x[i]);
}

void gelu_tanh_backward(int threads, size_t n, const float *restrict x,
                        const float *restrict dy, float *restrict dx) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * slope_of(x[i]);
}

/* The same after a bias add, over rows of c floats: y = gelu(h + b) with b [c], and
   backward dh = dy gelu'(h + b) with db = the column sums of dh (the rows cut into
   `slices` blocks whatever the thread count, each summed in row order, the blocks added
   in block order: the same numbers on any thread count). */
void bias_gelu_tanh_forward(int threads, size_t n, size_t c, const float *restrict h,
                            const float *restrict b, float *restrict y) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t row = 0; row < n; row++) {
#pragma omp simd
        for (size_t j = 0; j < c; j++) y[row * c + j] = gelu_of(h[row * c + j] + b[j]);
    }
}

void bias_gelu_tanh_backward(int threads, int slices, size_t n, size_t c,
                             const float *restrict h, const float *restrict b,
                             const float *restrict dy, float *restrict dh, float *restrict db,
                             float *restrict partial) {
    /* partial: slices x c zeros, each block's sums of db */
    if ((size_t)slices > n) slices = n ? (int)n : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int part = 0; part < slices; part++) {
        size_t begin, end;
        rows_of(n, part, slices, &begin, &end);
        float *mine = partial + (size_t)part * c;
        for (size_t row = begin; row < end; row++) {
#pragma omp simd
            for (size_t j = 0; j < c; j++) {
                const float d = dy[row * c + j] * slope_of(h[row * c + j] + b[j]);
                dh[row * c + j] = d;
                mine[j] += d;
            }
        }
    }
    for (size_t j = 0; j < c; j++) db[j] = slice_sum(slices, c, partial, j);
}
