/* A transformer MLP, out = gelu(x W_in^T + b_in) W_out^T (fc_out's bias left to the caller)
   and its gradients, a block of rows at a time: each block's hidden activations and
   their gradients ([rows, F], a quarter megabyte) stay in the cache from the matmul that
   makes them to the one that reads them, instead of going out to memory and back between
   separate matmuls and GELU passes. The matmuls are MKL's sgemm from PyTorch's own
   library (set_sgemm), the GELU is gelu_tanh.h's.
   Row-major float32, contiguous: x [N, D], w_in [F, D], b_in [F], w_out [D, F];
   forward writes h = x W_in^T [N, F] (without b_in) and y = gelu(h + b_in) [N, F], which
   the backward pass reads, and out [N, D]. Blocks of R rows are shared among `threads`
   OpenMP threads, whose MKL calls then run on one thread each; a call of one block runs
   on the calling thread, its MKL calls on PyTorch's threads. */

#include <stddef.h>
#include <string.h>

#include "gelu_tanh.h"
#include "openmp.h"
#include "sgemm.h"

static sgemm_function sgemm;

/* PyTorch's sgemm (the BLAS interface, column-major, 32-bit integers) */
void mlp_set_sgemm(void *function) { sgemm = (sgemm_function)function; }

/* Row-major C [M, N] = op(A) op(B) + beta C, op: 'N' as stored or 'T' transposed; for
   column-major sgemm that is C^T = op(B)^T op(A)^T. */
static void matmul(char op_a, char op_b, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    const float one = 1.f;
    sgemm(&op_b, &op_a, &N, &M, &K, &one, B, &ldb, A, &lda, &beta, C, &ldc);
}

static int blocks_of(int N, int R) { return (N + R - 1) / R; }

/* One block of mlp_forward's rows. */
static void forward_block(int block, int N, int D, int F, int R, const float *restrict x,
                          const float *restrict w_in, const float *restrict b_in,
                          const float *restrict w_out, float *restrict h, float *restrict y,
                          float *restrict out) {
    const int first = block * R, rows = N - first < R ? N - first : R;
    float *hb = h + (size_t)first * F, *yb = y + (size_t)first * F;
    matmul('N', 'T', rows, F, D, x + (size_t)first * D, D, w_in, D, 0.f, hb, F);
    for (size_t i = 0; i < (size_t)rows; i++) {
#pragma omp simd
        for (int j = 0; j < F; j++) yb[i * F + j] = gelu_of(hb[i * F + j] + b_in[j]);
    }
    matmul('N', 'T', rows, D, F, yb, F, w_out, F, 0.f, out + (size_t)first * D, D);
}

/* Blocks shared among threads; one block (or one thread) opens no parallel region, so
   that MKL's calls parallelise themselves on PyTorch's pool (see mlp_backward). */
void mlp_forward(int threads, int N, int D, int F, int R, const float *restrict x,
                 const float *restrict w_in, const float *restrict b_in,
                 const float *restrict w_out, float *restrict h, float *restrict y,
                 float *restrict out) {
    const int blocks = blocks_of(N, R);
    if (threads > blocks) threads = blocks;
    if (threads <= 1) {
        for (int block = 0; block < blocks; block++)
            forward_block(block, N, D, F, R, x, w_in, b_in, w_out, h, y, out);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int block = 0; block < blocks; block++)
        forward_block(block, N, D, F, R, x, w_in, b_in, w_out, h, y, out);
}

/* Blocks [begin, end) of mlp_backward's rows, their hidden gradients in dh [R, F] and
   their weights' gradients summed in block order into my_dw_in, my_dw_out and my_db. */
static void backward_part(int begin, int end, int N, int D, int F, int R,
                          const float *restrict x, const float *restrict w_in,
                          const float *restrict b_in, const float *restrict w_out,
                          const float *restrict h, const float *restrict y,
                          const float *restrict dout, float *restrict dx, float *restrict dh,
                          float *restrict my_dw_in, float *restrict my_db,
                          float *restrict my_dw_out) {
    memset(my_db, 0, sizeof(float) * F);
    for (int block = begin; block < end; block++) {
        const int first = block * R, rows = N - first < R ? N - first : R;
        const float beta = block == begin ? 0.f : 1.f;
        const float *db = dout + (size_t)first * D, *hb = h + (size_t)first * F;
        matmul('N', 'N', rows, F, D, db, D, w_out, F, 0.f, dh, F); /* dy = dout W_out */
        for (size_t i = 0; i < (size_t)rows; i++) {
#pragma omp simd
            for (int j = 0; j < F; j++) {
                const float d = dh[i * F + j] * slope_of(hb[i * F + j] + b_in[j]);
                dh[i * F + j] = d;
                my_db[j] += d;
            }
        }
        matmul('T', 'N', D, F, rows, db, D, y + (size_t)first * F, F, beta, my_dw_out, F);
        matmul('T', 'N', F, D, rows, dh, F, x + (size_t)first * D, D, beta, my_dw_in, D);
        matmul('N', 'N', rows, D, F, dh, F, w_in, D, 0.f, dx + (size_t)first * D, D);
    }
}

/* Run `part` of `slices` runs of mlp_backward's blocks, its hidden gradients in dh: the
   first run sums into dw_in, db_in and dw_out, each other one into its own place in
   `sums` ([F D dw_in, D F dw_out, F db_in] per run after the first). */
static void backward_run(int part, int slices, int blocks, int N, int D, int F, int R,
                         const float *restrict x, const float *restrict w_in,
                         const float *restrict b_in, const float *restrict w_out,
                         const float *restrict h, const float *restrict y,
                         const float *restrict dout, float *restrict dx, float *restrict dh,
                         float *restrict dw_in, float *restrict db_in, float *restrict dw_out,
                         float *restrict sums) {
    if (part) {
        const size_t weights = (size_t)F * D + (size_t)D * F + F;
        dw_in = sums + (size_t)(part - 1) * weights;
        dw_out = dw_in + (size_t)F * D;
        db_in = dw_out + (size_t)D * F;
    }
    backward_part(blocks * part / slices, blocks * (part + 1) / slices, N, D, F, R, x, w_in,
                  b_in, w_out, h, y, dout, dx, dh, dw_in, db_in, dw_out);
}

/* dout [N, D] -> dx [N, D], dw_in [F, D], db_in [F], dw_out [D, F].
   The blocks are cut into `slices` runs of consecutive blocks, a number the caller fixes
   whatever the thread count; each run sums its weights' gradients in block order, the
   threads share the runs, and the runs' sums are added in run order: the same numbers on
   any thread count. work: min(threads, slices) x R F floats (each thread's block of
   hidden gradients), then (slices - 1) x (F D + D F + F) floats (the sums of each run
   after the first, which sums into dw_in, dw_out and db_in). One thread opens no
   parallel region: inside a region of one thread (an inactive one) MKL's own parallel
   region was a nested one, whose fresh threads competed with PyTorch's spinning pool
   (the last block's 128-row backward took 11.8 ms in a fused step instead of 1.6). */
void mlp_backward(int threads, int slices, int N, int D, int F, int R,
                  const float *restrict x, const float *restrict w_in,
                  const float *restrict b_in, const float *restrict w_out,
                  const float *restrict h, const float *restrict y,
                  const float *restrict dout, float *restrict dx, float *restrict dw_in,
                  float *restrict db_in, float *restrict dw_out, float *restrict work) {
    const int blocks = blocks_of(N, R);
    if (!blocks) { /* no rows: zero gradients */
        memset(dw_in, 0, sizeof(float) * F * D);
        memset(dw_out, 0, sizeof(float) * D * F);
        memset(db_in, 0, sizeof(float) * F);
        return;
    }
    if (slices > blocks) slices = blocks;
    if (slices < 1) slices = 1;
    if (threads > slices) threads = slices;
    const size_t weights = (size_t)F * D + (size_t)D * F + F;
    float *sums = work + (size_t)(threads < 1 ? 1 : threads) * R * F;
    if (threads <= 1) {
        for (int part = 0; part < slices; part++)
            backward_run(part, slices, blocks, N, D, F, R, x, w_in, b_in, w_out, h, y, dout,
                         dx, work, dw_in, db_in, dw_out, sums);
    } else {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int part = 0; part < slices; part++)
            backward_run(part, slices, blocks, N, D, F, R, x, w_in, b_in, w_out, h, y, dout,
                         dx, work + (size_t)omp_get_thread_num() * R * F, dw_in, db_in,
                         dw_out, sums);
    }
    for (int part = 1; part < slices; part++) {
        const float *theirs = sums + (size_t)(part - 1) * weights;
        for (size_t i = 0; i < (size_t)F * D; i++) dw_in[i] += theirs[i];
        for (size_t i = 0; i < (size_t)D * F; i++) dw_out[i] += theirs[(size_t)F * D + i];
        for (int j = 0; j < F; j++) db_in[j] += theirs[2 * (size_t)F * D + j];
    }
}
