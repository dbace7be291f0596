/* PyTorch's BLAS sgemm_ (column-major, 32-bit integers), whose address blas.py finds and
   each kernel that calls it is handed at load time. */

#ifndef LATENTLENS_SGEMM_H
#define LATENTLENS_SGEMM_H

typedef void (*sgemm_function)(const char *, const char *, const int *, const int *,
                               const int *, const float *, const float *, const int *,
                               const float *, const int *, const float *, float *,
                               const int *);

#endif
