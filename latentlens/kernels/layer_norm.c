/* A residual add and the layer norm of its sum, as one pass over the rows forward and one
   backward:
     s = x + delta + delta_bias          (delta [N, C] and delta_bias [C] may be absent)
     y = (s - mean(s)) * rstd * weight + bias,  rstd = 1 / sqrt(var(s) + eps)
   over rows of C floats (contiguous). Each row is read once, and its later passes run
   in the L1 cache; PyTorch's compiled layer norm walks the [N, C] arrays three times
   forward and sums its weight gradients in extra strided passes backward.
   The backward pass takes dy and the gradient that reaches s from elsewhere (dsum, may be
   absent) and gives
     dx = dsum + rstd (g - mean(g) - xhat mean(g xhat)),  g = dy weight,
     xhat = (s - mean) rstd,
   which is also delta's gradient, with the column sums dweight = sum dy xhat,
   dbias = sum dy and ddelta_bias = sum dx. The rows are cut into `slices` blocks, a
   number the caller fixes whatever the thread count; each block is summed in row order,
   the threads share the blocks, and the blocks' sums are added in block order: the same
   numbers on any thread count.
   The embedding variant takes s = inputs embed^T + embed_bias (inputs [N, K] with few
   columns, embed [C, K]) in place of the sums, computed in the row's pass; backward it
   sums embed's and embed_bias's gradients from the rows' dx, which it does not write
   (the inputs need none). */

#include <math.h>
#include <stddef.h>

#include "slices.h"

/* The columns the embedding's row loop holds in registers at once, BLOCK, as BLOCK / LANES
   vectors of the machine's width (GCC's and clang's vector extensions): one AVX-512
   register, or two AVX2 ones. GCC lowers a vector wider than the machine's through the
   stack: on an AVX2 Zen 3, the forward pass at fuzzy logic's shapes (2,048 rows of 128
   from 5 inputs, one thread) took 1.73 ms a call that way and takes 0.34 ms. The row's
   total is added lane by lane in column order within a block of BLOCK, so every width
   gives the same numbers. */
#define BLOCK 16
#ifndef LANES /* a build may set it (the tests build both widths) */
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
#endif
#define VECTORS (BLOCK / LANES)
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef float vf_unaligned __attribute__((vector_size(4 * LANES), aligned(4)));

/* The layer norm of the row sr (whose sum is total) into yr, and its statistics. */
static inline void normalise_row(size_t c, const float *restrict sr, float total,
                                 const float *restrict weight, const float *restrict bias,
                                 float eps, float *restrict yr, float *restrict mean_out,
                                 float *restrict rstd_out) {
    const float inverse_c = 1.f / (float)c, mean = total * inverse_c;
    float squares = 0.f;
#pragma omp simd reduction(+ : squares)
    for (size_t j = 0; j < c; j++) {
        const float centred = sr[j] - mean;
        squares += centred * centred;
    }
    const float rstd = 1.f / sqrtf(squares * inverse_c + eps);
#pragma omp simd
    for (size_t j = 0; j < c; j++) yr[j] = (sr[j] - mean) * rstd * weight[j] + bias[j];
    *mean_out = mean;
    *rstd_out = rstd;
}

/* sr[j] = expression for the row's columns j, and their total. One branch-free loop per
   case: a branch or a conditional load inside kept gcc from vectorising (with delta and
   without delta_bias the loop ran element by element, 2.2x slower than with both). An
   absent bias adds 0 as before: every float as it was, inf included, but -0 made +0. */
#define SUM_ROW(expression)                                                                    \
    do {                                                                                       \
        _Pragma("omp simd reduction(+ : total)") for (size_t j = 0; j < c; j++) {             \
            const float s = (expression);                                                      \
            sr[j] = s;                                                                         \
            total += s;                                                                        \
        }                                                                                      \
    } while (0)

void add_layer_norm_forward(int threads, size_t n, size_t c, const float *restrict x,
                            const float *restrict delta, const float *restrict delta_bias,
                            const float *restrict weight, const float *restrict bias,
                            float eps, float *restrict sum, float *restrict y,
                            float *restrict mean_out, float *restrict rstd_out) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t row = 0; row < n; row++) {
        const float *xr = x + row * c;
        float *sr = sum + row * c, *yr = y + row * c;
        const float *dr = delta ? delta + row * c : NULL;
        float total = 0.f;
        if (dr && delta_bias)
            SUM_ROW(xr[j] + dr[j] + delta_bias[j]);
        else if (dr)
            SUM_ROW(xr[j] + dr[j] + 0.f);
        else if (delta_bias)
            SUM_ROW(xr[j] + delta_bias[j]);
        else
            SUM_ROW(xr[j] + 0.f);
        normalise_row(c, sr, total, weight, bias, eps, yr, mean_out + row, rstd_out + row);
    }
}

void embed_layer_norm_forward(int threads, size_t n, size_t c, size_t k,
                              const float *restrict inputs, const float *restrict embed_t,
                              const float *restrict embed_bias, const float *restrict weight,
                              const float *restrict bias, float eps, float *restrict sum,
                              float *restrict y, float *restrict mean_out,
                              float *restrict rstd_out) {
    /* embed_t: embed transposed, [K, C] */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t row = 0; row < n; row++) {
        const float *in = inputs + row * k;
        float *sr = sum + row * c, *yr = y + row * c;
        vf totals[VECTORS] = {{0.f}};
        size_t j = 0;
        for (; j + BLOCK <= c; j += BLOCK) { /* BLOCK columns' sums in registers */
            vf block[VECTORS];
            for (int v = 0; v < VECTORS; v++)
                block[v] = *(const vf_unaligned *)(embed_bias + j + v * LANES);
            for (size_t col = 0; col < k; col++)
                for (int v = 0; v < VECTORS; v++)
                    block[v] += in[col] * *(const vf_unaligned *)(embed_t + col * c + j +
                                                                  v * LANES);
            for (int v = 0; v < VECTORS; v++) {
                *(vf_unaligned *)(sr + j + v * LANES) = block[v];
                totals[v] += block[v];
            }
        }
        float total = 0.f;
        for (int v = 0; v < VECTORS; v++)
            for (int t = 0; t < LANES; t++) total += totals[v][t];
        for (; j < c; j++) {
            float s = embed_bias[j];
            for (size_t col = 0; col < k; col++) s += in[col] * embed_t[col * c + j];
            sr[j] = s;
            total += s;
        }
        normalise_row(c, sr, total, weight, bias, eps, yr, mean_out + row, rstd_out + row);
    }
}

/* One row's dx (into dxr) from dy and dsum (may be absent), adding its terms to the
   thread's sums of dweight (pw), dbias (pb) and dx (pd). */
static inline void row_backward(size_t c, const float *restrict sr, float mu, float r,
                                const float *restrict weight, const float *restrict dyr,
                                const float *restrict dsumr, float *restrict pw,
                                float *restrict pb, float *restrict pd, float *restrict dxr) {
    const float inverse_c = 1.f / (float)c;
    float sum_g = 0.f, sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (size_t j = 0; j < c; j++) {
        const float xhat = (sr[j] - mu) * r, g = dyr[j] * weight[j];
        sum_g += g;
        sum_gx += g * xhat;
        pw[j] += dyr[j] * xhat;
        pb[j] += dyr[j];
    }
    const float mean_g = sum_g * inverse_c, mean_gx = sum_gx * inverse_c;
#pragma omp simd
    for (size_t j = 0; j < c; j++) {
        const float xhat = (sr[j] - mu) * r, g = dyr[j] * weight[j];
        float d = r * (g - mean_g - xhat * mean_gx);
        if (dsumr) d += dsumr[j];
        dxr[j] = d;
        pd[j] += d;
    }
}

void add_layer_norm_backward(int threads, int slices, size_t n, size_t c, size_t positions,
                             size_t keep_from, const float *restrict sum,
                             const float *restrict mean, const float *restrict rstd,
                             const float *restrict weight, const float *restrict dy,
                             const float *restrict dy_kept, const float *restrict dsum_kept,
                             float *restrict dx, float *restrict dweight,
                             float *restrict dbias, float *restrict ddelta_bias,
                             float *restrict partial) {
    /* The rows are (batch element, position) pairs of `positions` positions; the sum and
       a copy of the normed output were also given out at the kept positions, keep_from on
       (dy_kept and dsum_kept: their gradients, [batch, positions - keep_from, c], each may
       be absent). The plain add and norm is the case positions = n, keep_from = 0: every
       row kept, dsum_kept the sum's whole gradient. partial: slices x 4 x c zeros, each
       block's sums of dweight, dbias, ddelta_bias and a row's dy. */
    if ((size_t)slices > n) slices = n ? (int)n : 1;
    const size_t kept = positions - keep_from;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int part = 0; part < slices; part++) {
        size_t begin, end;
        rows_of(n, part, slices, &begin, &end);
        float *pw = partial + (size_t)part * 4 * c, *pb = pw + c, *pd = pb + c, *dyr = pd + c;
        for (size_t row = begin; row < end; row++) {
            const size_t position = row % positions;
            const float *dyrow = dy + row * c, *dsumr = NULL;
            if (position >= keep_from) {
                const size_t at = (row / positions * kept + position - keep_from) * c;
                if (dy_kept) {
#pragma omp simd
                    for (size_t j = 0; j < c; j++) dyr[j] = dyrow[j] + dy_kept[at + j];
                    dyrow = dyr;
                }
                if (dsum_kept) dsumr = dsum_kept + at;
            }
            row_backward(c, sum + row * c, mean[row], rstd[row], weight, dyrow, dsumr, pw, pb,
                         pd, dx + row * c);
        }
    }
    for (size_t j = 0; j < c; j++) {
        dweight[j] = slice_sum(slices, 4 * c, partial, j);
        dbias[j] = slice_sum(slices, 4 * c, partial, c + j);
        if (ddelta_bias) ddelta_bias[j] = slice_sum(slices, 4 * c, partial, 2 * c + j);
    }
}

void embed_layer_norm_backward(int threads, int slices, size_t n, size_t c, size_t k,
                               const float *restrict inputs, const float *restrict sum,
                               const float *restrict mean, const float *restrict rstd,
                               const float *restrict weight, const float *restrict dy,
                               const float *restrict dsum, float *restrict dweight,
                               float *restrict dbias, float *restrict dembed,
                               float *restrict dembed_bias, float *restrict partial) {
    /* partial: slices x (4 + K) x c zeros, each block's sums of dweight, dbias,
       dembed_bias, a row's dx, then dembed transposed ([K, C]); dembed is [C, K] */
    if ((size_t)slices > n) slices = n ? (int)n : 1;
    const size_t stride = (4 + k) * c;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int part = 0; part < slices; part++) {
        size_t begin, end;
        rows_of(n, part, slices, &begin, &end);
        float *pw = partial + (size_t)part * stride, *pb = pw + c, *pd = pb + c;
        float *dxr = pd + c, *pe = dxr + c;
        for (size_t row = begin; row < end; row++) {
            row_backward(c, sum + row * c, mean[row], rstd[row], weight, dy + row * c,
                         dsum ? dsum + row * c : NULL, pw, pb, pd, dxr);
            const float *in = inputs + row * k;
            for (size_t col = 0; col < k; col++) {
                const float a = in[col];
                float *pec = pe + col * c;
#pragma omp simd
                for (size_t j = 0; j < c; j++) pec[j] += a * dxr[j];
            }
        }
    }
    for (size_t j = 0; j < c; j++) {
        dweight[j] = slice_sum(slices, stride, partial, j);
        dbias[j] = slice_sum(slices, stride, partial, c + j);
        dembed_bias[j] = slice_sum(slices, stride, partial, 2 * c + j);
        for (size_t col = 0; col < k; col++)
            dembed[j * k + col] = slice_sum(slices, stride, partial, (4 + col) * c + j);
    }
}
