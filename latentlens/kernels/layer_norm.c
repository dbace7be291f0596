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
   dbias = sum dy and ddelta_bias = sum dx. Each thread sums its block of rows, and the
   blocks are added in thread order: the same numbers on the same thread count. */

#include <math.h>
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#else /* built without OpenMP: one thread */
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

static void rows_of(size_t n, int part, int parts, size_t *begin, size_t *end) {
    *begin = n * (size_t)part / (size_t)parts;
    *end = n * (size_t)(part + 1) / (size_t)parts;
}

void add_layer_norm_forward(int threads, size_t n, size_t c, const float *restrict x,
                            const float *restrict delta, const float *restrict delta_bias,
                            const float *restrict weight, const float *restrict bias,
                            float eps, float *restrict sum, float *restrict y,
                            float *restrict mean_out, float *restrict rstd_out) {
    const float inverse_c = 1.f / (float)c;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t row = 0; row < n; row++) {
        const float *xr = x + row * c;
        float *sr = sum + row * c, *yr = y + row * c;
        /* one branch-free loop per case (a branch inside kept gcc from vectorising);
           an absent bias adds 0, which leaves every float, inf included, as it was */
        float total = 0.f;
        if (delta) {
            const float *dr = delta + row * c;
#pragma omp simd reduction(+ : total)
            for (size_t j = 0; j < c; j++) {
                const float s = xr[j] + dr[j] + (delta_bias ? delta_bias[j] : 0.f);
                sr[j] = s;
                total += s;
            }
        } else {
#pragma omp simd reduction(+ : total)
            for (size_t j = 0; j < c; j++) {
                const float s = xr[j] + (delta_bias ? delta_bias[j] : 0.f);
                sr[j] = s;
                total += s;
            }
        }
        const float mean = total * inverse_c;
        float squares = 0.f;
#pragma omp simd reduction(+ : squares)
        for (size_t j = 0; j < c; j++) {
            const float centred = sr[j] - mean;
            squares += centred * centred;
        }
        const float rstd = 1.f / sqrtf(squares * inverse_c + eps);
#pragma omp simd
        for (size_t j = 0; j < c; j++) yr[j] = (sr[j] - mean) * rstd * weight[j] + bias[j];
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

void add_layer_norm_backward(int threads, size_t n, size_t c, const float *restrict sum,
                             const float *restrict mean, const float *restrict rstd,
                             const float *restrict weight, const float *restrict dy,
                             const float *restrict dsum, float *restrict dx,
                             float *restrict dweight, float *restrict dbias,
                             float *restrict ddelta_bias, float *restrict partial) {
    /* partial: threads x 3 x c zeros, each thread's sums of dweight, dbias, ddelta_bias */
    if ((size_t)threads > n) threads = n ? (int)n : 1;
    const float inverse_c = 1.f / (float)c;
#pragma omp parallel num_threads(threads)
    {
        const int part = omp_get_thread_num(), parts = omp_get_num_threads();
        size_t begin, end;
        rows_of(n, part, parts, &begin, &end);
        float *pw = partial + (size_t)part * 3 * c, *pb = pw + c, *pd = pb + c;
        for (size_t row = begin; row < end; row++) {
            const float *sr = sum + row * c, *dyr = dy + row * c;
            float *dxr = dx + row * c;
            const float mu = mean[row], r = rstd[row];
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
                if (dsum) d += dsum[row * c + j];
                dxr[j] = d;
                pd[j] += d;
            }
        }
    }
    for (size_t j = 0; j < c; j++) {
        float w = 0.f, b = 0.f, d = 0.f;
        for (int part = 0; part < threads; part++) {
            const float *pw = partial + (size_t)part * 3 * c;
            w += pw[j];
            b += pw[c + j];
            d += pw[2 * c + j];
        }
        dweight[j] = w;
        dbias[j] = b;
        if (ddelta_bias) ddelta_bias[j] = d;
    }
}
