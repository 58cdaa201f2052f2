// prefill_gemm_lt.h: cuBLASLt matmuls with one algorithm per (shape, token bucket).
#include "kernels/cuda/ops/prefill_gemm_lt.h"

#include <map>
#include <tuple>

namespace dsv4::cuda {

namespace {

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int>;

// The descriptors of one call; destroyed on every path out.
struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    ~Descs() {
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

bool layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int rows, int cols, int64_t ld, int groups,
            int64_t stride) {
    if (cublasLtMatrixLayoutCreate(l, type, uint64_t(rows), uint64_t(cols), ld) != CUBLAS_STATUS_SUCCESS) return false;
    if (groups == 1) return true;
    const int32_t count = groups;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)) ==
               CUBLAS_STATUS_SUCCESS;
}

}  // namespace

class LtGemm {
public:
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<Key, cublasLtMatmulAlgo_t> plans;
};

int lt_gemm_bucket(int t) { return t <= 1024 ? (t + 63) / 64 * 64 : (t + 255) / 256 * 256; }

LtGemm* lt_gemm_create(void* workspace, size_t workspace_bytes) {
    auto* g = new LtGemm;
    if (cublasLtCreate(&g->handle) != CUBLAS_STATUS_SUCCESS) {
        delete g;
        return nullptr;
    }
    g->workspace = workspace;
    g->workspace_bytes = workspace_bytes;
    return g;
}

void lt_gemm_destroy(LtGemm* g) {
    if (!g) return;
    if (g->handle) cublasLtDestroy(g->handle);
    delete g;
}

int lt_gemm_plan_count(const LtGemm* g) { return g ? int(g->plans.size()) : 0; }

cudaError_t lt_gemm_run(LtGemm* g, int n, int t, int k, const void* A, int64_t lda, int64_t a_stride, const void* B,
                        int64_t ldb, int64_t b_stride, void* C, int64_t ldc, int64_t c_stride, bool c_bf16, int groups,
                        cudaStream_t st) {
    if (!g || t <= 0) return t == 0 ? cudaSuccess : cudaErrorInvalidValue;
    const cudaDataType_t ct = c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    // Descriptors for t_desc tokens: the bucket's top for the heuristic query, t for the matmul.
    auto make = [&](Descs& d, int t_desc) {
        if (cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        return cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ==
                   CUBLAS_STATUS_SUCCESS &&
               cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ==
                   CUBLAS_STATUS_SUCCESS &&
               layout(&d.a, CUDA_R_16BF, k, n, lda, groups, a_stride) &&
               layout(&d.b, CUDA_R_16BF, k, t_desc, ldb, groups, b_stride) &&
               layout(&d.c, ct, n, t_desc, ldc, groups, c_stride);
    };
    const int bucket = lt_gemm_bucket(t);
    const Key key{n, k, lda, a_stride, ldb, b_stride, ldc, c_stride, c_bf16, groups, bucket};
    auto it = g->plans.find(key);
    if (it == g->plans.end()) {
        Descs q;
        if (!make(q, bucket)) return cudaErrorUnknown;
        cublasLtMatmulPreference_t pref = nullptr;
        if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
        const uint64_t ws = g->workspace_bytes;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
        // The query assumes 256-byte aligned operands unless told; x slices and grouped operands
        // start only 16-byte aligned (ldx % 8 == 0 bf16 elements).
        const uint32_t align = 16;
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
        cublasLtMatmulHeuristicResult_t r{};
        int found = 0;
        const cublasStatus_t s =
            cublasLtMatmulAlgoGetHeuristic(g->handle, q.op, q.a, q.b, q.c, q.c, pref, 1, &r, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (s != CUBLAS_STATUS_SUCCESS || found < 1) return cudaErrorUnknown;
        it = g->plans.emplace(key, r.algo).first;
    }
    Descs d;
    if (!make(d, t)) return cudaErrorUnknown;
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t s = cublasLtMatmul(g->handle, d.op, &alpha, A, d.a, B, d.b, &beta, C, d.c, C, d.c, &it->second,
                                            g->workspace, g->workspace_bytes, st);
    return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace dsv4::cuda
