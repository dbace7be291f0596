/* dst [cols, rows] = src [rows, cols]^T (row-major float32, contiguous): a copy, so the
   same bits on any thread count. In square tiles, so that a tile's rows of src and of dst
   stay in cache while it is turned; the threads share the tiles. Where PyTorch copies a
   transposed view element by element with the view's strides (0.6 ms for 2,048 x 256 on
   2 threads of an AVX2 EPYC), the weight gradients' operands on oneDNN were a tenth of a
   fused-compile step.

   Inside a tile, each whole 8 x 8 block is turned in eight AVX registers (eight loads, 24
   shuffles, eight stores) where the machine has AVX; element by element, the block's
   scalar loads and inserts took 6% of a one-thread SRAVEN step (4,608 x 128 copies for
   every weight gradient). The tile's ragged edges, and every block on a machine without
   AVX (or a build with SCALAR_TRANSPOSE set, which the tests compare), go element by
   element. */

#include <stddef.h>

#if defined(__AVX__) && !SCALAR_TRANSPOSE
#include <immintrin.h>
#define VECTOR_BLOCKS 1
#else
#define VECTOR_BLOCKS 0
#endif

#define TILE 32
#define BLOCK 8

static void copy_elements(size_t rows, size_t cols, const float *restrict src,
                          float *restrict dst, size_t r0, size_t r1, size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; c++)
        for (size_t r = r0; r < r1; r++) dst[c * rows + r] = src[r * cols + c];
}

#if VECTOR_BLOCKS
/* The 8 x 8 block of src at (r, c) into dst at (c, r). */
static inline void turn_block(size_t rows, size_t cols, const float *restrict src,
                              float *restrict dst, size_t r, size_t c) {
    const float *s = src + r * cols + c;
    __m256 a[BLOCK], b[BLOCK];
    for (int i = 0; i < BLOCK; i++) a[i] = _mm256_loadu_ps(s + i * cols);
    for (int i = 0; i < BLOCK; i += 2) { /* pairs of rows interleaved */
        b[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
        b[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
    }
    for (int i = 0; i < BLOCK; i += 4) { /* then pairs of pairs */
        a[i] = _mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        a[i + 1] = _mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        a[i + 2] = _mm256_shuffle_ps(b[i + 1], b[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        a[i + 3] = _mm256_shuffle_ps(b[i + 1], b[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    float *d = dst + c * rows + r;
    for (int i = 0; i < 4; i++) { /* the 128-bit halves of rows 0-3 and 4-7 */
        _mm256_storeu_ps(d + i * rows, _mm256_permute2f128_ps(a[i], a[i + 4], 0x20));
        _mm256_storeu_ps(d + (i + 4) * rows, _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
    }
}
#endif

void transpose(int threads, size_t rows, size_t cols, const float *restrict src,
               float *restrict dst) {
    const size_t col_tiles = (cols + TILE - 1) / TILE, row_tiles = (rows + TILE - 1) / TILE;
    /* the tiles in column-major order, cut into one run per thread (a matrix of one
       column of tiles, 2,048 x 32, is shared too) */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t tile = 0; tile < col_tiles * row_tiles; tile++) {
        const size_t c0 = tile / row_tiles * TILE, r0 = tile % row_tiles * TILE;
        const size_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
        const size_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
#if VECTOR_BLOCKS
        /* whole blocks up to (r8, c8), the rest element by element */
        const size_t r8 = r0 + (r1 - r0) / BLOCK * BLOCK, c8 = c0 + (c1 - c0) / BLOCK * BLOCK;
        for (size_t c = c0; c < c8; c += BLOCK)
            for (size_t r = r0; r < r8; r += BLOCK) turn_block(rows, cols, src, dst, r, c);
        copy_elements(rows, cols, src, dst, r8, r1, c0, c1);
        copy_elements(rows, cols, src, dst, r0, r8, c8, c1);
#else
        copy_elements(rows, cols, src, dst, r0, r1, c0, c1);
#endif
    }
}
