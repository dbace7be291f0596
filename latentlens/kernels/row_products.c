/* A weight's gradient, out = dy^T x summed over the rows, each core summing rows it wrote.

   oneDNN splits such a matmul over its outputs, so each of two cores reads every row of
   dy and x, half of them written by the other core in the layer's kernels (which split
   the rows in halves): on a cloud machine whose two vCPUs sit on different core complexes
   those rows cross between them at every weight of every step. Here the rows are cut
   into PARTS consecutive parts, a number the caller fixes whatever the thread count;
   each part's sum is one sgemm call on one thread (MKL's, from PyTorch's own library:
   row_products_set_sgemm), and the parts' sums are added as a fixed tree, ((0 + 1) +
   (2 + 3)) for four: the same numbers on any thread count. With two threads the first
   two parts, the first half of the rows, are the first thread's.

   Row-major float32: dy [N, A] (row stride lda), x [N, B] (row stride ldb), out [A, B]
   contiguous; work: (parts - 1) x A x B floats, the sums of parts 1 .. parts - 1. parts:
   a power of two. One thread opens no parallel region (see mlp.c's mlp_backward). */

#include <stddef.h>

#include "openmp.h"
#include "sgemm.h"

static sgemm_function sgemm;

/* PyTorch's sgemm (the BLAS interface, column-major, 32-bit integers) */
void row_products_set_sgemm(void *function) { sgemm = (sgemm_function)function; }

/* The sum of part p: out for the first, else its place in work. */
static float *sum_of(int p, float *out, float *work, size_t n) {
    return p ? work + (size_t)(p - 1) * n : out;
}

/* Part p's sum, dy^T x over its rows: row-major C [A, B] = dy_p^T x_p is, column-major,
   C^T [B, A] = x_p^T dy_p. */
static void part_sum(int p, int parts, int N, int A, int B, const float *dy, int lda,
                     const float *x, int ldb, float *out, float *work) {
    const int first = (int)((size_t)N * p / parts), rows = (int)((size_t)N * (p + 1) / parts) - first;
    const float one = 1.f, zero = 0.f;
    sgemm("N", "T", &B, &A, &rows, &one, x + (size_t)first * ldb, &ldb,
          dy + (size_t)first * lda, &lda, &zero, sum_of(p, out, work, (size_t)A * B), &B);
}

/* Adds the sum of part p + stride into part p's, elements [begin, end). */
static void add_part(int p, int stride, size_t begin, size_t end, float *out, float *work,
                     size_t n) {
    float *restrict into = sum_of(p, out, work, n);
    const float *restrict from = sum_of(p + stride, out, work, n);
    for (size_t i = begin; i < end; i++) into[i] += from[i];
}

void row_products(int threads, int parts, int N, int A, int B, const float *dy, int lda,
                  const float *x, int ldb, float *out, float *work) {
    const size_t n = (size_t)A * B;
    if (threads > parts) threads = parts;
    if (threads <= 1) {
        for (int p = 0; p < parts; p++) part_sum(p, parts, N, A, B, dy, lda, x, ldb, out, work);
        for (int stride = 1; stride < parts; stride *= 2)
            for (int p = 0; p < parts; p += 2 * stride) add_part(p, stride, 0, n, out, work, n);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int p = 0; p < parts; p++) part_sum(p, parts, N, A, B, dy, lda, x, ldb, out, work);
        for (int stride = 1; stride < parts; stride *= 2) {
            /* each add on the thread that summed its first part; the last split by element */
            if (2 * stride < parts) {
#pragma omp for schedule(static)
                for (int p = 0; p < parts; p += 2 * stride) add_part(p, stride, 0, n, out, work, n);
            } else {
                const int me = omp_get_thread_num(), count = omp_get_num_threads();
                add_part(0, stride, n * me / count, n * (me + 1) / count, out, work, n);
            }
        }
    }
}
