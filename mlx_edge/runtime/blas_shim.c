/* The CBLAS entry points libmlx calls, answered by an OpenBLAS that stays out of the global scope.
 *
 * Loading OpenBLAS itself with RTLD_GLOBAL (so that libmlx's cblas_sgemm finds it before the wheel's
 * reference BLAS) also makes it answer every other BLAS symbol looked up afterwards, among them the
 * sgemm_ that libtorch_cpu exports: PyTorch then runs its matmuls through OpenBLAS, and its training
 * loop ran 9% slower here. This library is loaded globally instead; it exports only the three
 * cblas_?gemm functions libmlx imports and OpenBLAS's thread and kernel queries, and forwards them to
 * an OpenBLAS opened with RTLD_LOCAL by mlx_edge_blas_shim_open. Built on first use by
 * mlx_edge/runtime/blas.py (cc -O2 -shared -fPIC ... -ldl).
 */
#include <dlfcn.h>
#include <stddef.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int,
                         double, double *, int);
typedef void (*cgemm_fn)(int, int, int, int, int, int, const void *, const void *, int, const void *, int,
                         const void *, void *, int);
typedef void (*set_threads_fn)(int);
typedef int (*get_threads_fn)(void);
typedef char *(*corename_fn)(void);

static sgemm_fn sgemm_impl;
static dgemm_fn dgemm_impl;
static cgemm_fn cgemm_impl;
static set_threads_fn set_threads_impl;
static get_threads_fn get_threads_impl;
static corename_fn corename_impl;

/* 0 when the library at `path` was opened and has the three gemm functions; -1 otherwise. */
int mlx_edge_blas_shim_open(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return -1;
    sgemm_impl = (sgemm_fn)dlsym(lib, "cblas_sgemm");
    dgemm_impl = (dgemm_fn)dlsym(lib, "cblas_dgemm");
    cgemm_impl = (cgemm_fn)dlsym(lib, "cblas_cgemm");
    set_threads_impl = (set_threads_fn)dlsym(lib, "openblas_set_num_threads");
    get_threads_impl = (get_threads_fn)dlsym(lib, "openblas_get_num_threads");
    corename_impl = (corename_fn)dlsym(lib, "openblas_get_corename");
    if (sgemm_impl == NULL || dgemm_impl == NULL || cgemm_impl == NULL) {
        sgemm_impl = NULL;
        return -1;
    }
    return 0;
}

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    sgemm_impl(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a, int lda,
                 const double *b, int ldb, double beta, double *c, int ldc) {
    dgemm_impl(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_cgemm(int order, int trans_a, int trans_b, int m, int n, int k, const void *alpha, const void *a,
                 int lda, const void *b, int ldb, const void *beta, void *c, int ldc) {
    cgemm_impl(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void openblas_set_num_threads(int threads) {
    if (set_threads_impl != NULL) set_threads_impl(threads);
}

int openblas_get_num_threads(void) { return get_threads_impl != NULL ? get_threads_impl() : 1; }

char *openblas_get_corename(void) { return corename_impl != NULL ? corename_impl() : NULL; }
