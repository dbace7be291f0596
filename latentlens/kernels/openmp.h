/* OpenMP's thread queries for the kernels, or their one-thread stand-ins where the kernel
   is built without OpenMP (build.py's fallback: every call on one thread). */

#ifndef LATENTLENS_OPENMP_H
#define LATENTLENS_OPENMP_H

#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
#endif

#endif
