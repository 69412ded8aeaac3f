// oneDNN's matmul as xgrad's GEMM back end (include/xgrad/kernels/gemm_onednn.hpp says how).
#include "xgrad/kernels/gemm_onednn.hpp"

#if XGRAD_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

namespace xgrad::kernels::detail {
namespace {

void onednn_check(dnnl_status_t status) {
    if (status != dnnl_success) std::abort();  // only on arguments that gemm.hpp has already checked
}

class OnednnMatmul {
public:
    // Shape, layout, scalars and operand type of a product: the primitive is specific to all of them.
    using Key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, bool, bool,
                           float, float, dnnl_data_type_t>;

    explicit OnednnMatmul(const Key& key) {
        const auto [m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, operand_type] = key;
        const dnnl_engine_t eng = engine();
        auto desc = [](dnnl_dim_t rows, dnnl_dim_t cols, dnnl_dim_t ld, bool trans, dnnl_data_type_t type) {
            dnnl_memory_desc_t md;
            const dnnl_dims_t dims{rows, cols}, strides{trans ? 1 : ld, trans ? ld : 1};
            onednn_check(dnnl_memory_desc_init_by_strides(&md, 2, dims, type, strides));
            return md;
        };
        const dnnl_memory_desc_t a_md = desc(dnnl_dim_t(m), dnnl_dim_t(k), dnnl_dim_t(lda), ta, operand_type),
                                 b_md = desc(dnnl_dim_t(k), dnnl_dim_t(n), dnnl_dim_t(ldb), tb, operand_type),
                                 c_md = desc(dnnl_dim_t(m), dnnl_dim_t(n), dnnl_dim_t(ldc), false, dnnl_f32);
        dnnl_matmul_desc_t op;
        onednn_check(dnnl_matmul_desc_init(&op, &a_md, &b_md, nullptr, &c_md));
        dnnl_primitive_attr_t attr;
        onednn_check(dnnl_primitive_attr_create(&attr));
        onednn_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
        if (alpha != 1.0f) onednn_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
        dnnl_post_ops_t post_ops = nullptr;
        if (beta != 0.0f) {
            onednn_check(dnnl_post_ops_create(&post_ops));
            onednn_check(dnnl_post_ops_append_sum(post_ops, beta));
            onednn_check(dnnl_primitive_attr_set_post_ops(attr, post_ops));
        }
        dnnl_primitive_desc_t pd;
        onednn_check(dnnl_primitive_desc_create(&pd, &op, attr, eng, nullptr));
        const dnnl_memory_desc_t* scratch_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        scratch_.resize(dnnl_memory_desc_get_size(scratch_md));
        onednn_check(dnnl_primitive_create(&primitive_, pd));
        for (auto [memory, md] : {std::pair{&a_, &a_md}, {&b_, &b_md}, {&c_, &c_md}})
            onednn_check(dnnl_memory_create(memory, md, eng, DNNL_MEMORY_NONE));
        onednn_check(dnnl_memory_create(&scratch_memory_, scratch_md, eng, scratch_.data()));
        dnnl_primitive_desc_destroy(pd);
        if (post_ops) dnnl_post_ops_destroy(post_ops);
        dnnl_primitive_attr_destroy(attr);
    }
    OnednnMatmul(const OnednnMatmul&) = delete;
    OnednnMatmul& operator=(const OnednnMatmul&) = delete;
    ~OnednnMatmul() {
        for (dnnl_memory_t memory : {a_, b_, c_, scratch_memory_}) dnnl_memory_destroy(memory);
        dnnl_primitive_destroy(primitive_);
    }

    void run(const void* a, const void* b, float* c) {
        onednn_check(dnnl_memory_set_data_handle(a_, const_cast<void*>(a)));
        onednn_check(dnnl_memory_set_data_handle(b_, const_cast<void*>(b)));
        onednn_check(dnnl_memory_set_data_handle(c_, c));
        const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a_},
                                        {DNNL_ARG_WEIGHTS, b_},
                                        {DNNL_ARG_DST, c_},
                                        {DNNL_ARG_SCRATCHPAD, scratch_memory_}};
        const dnnl_stream_t s = stream();
        onednn_check(dnnl_primitive_execute(primitive_, s, 4, args));
        onednn_check(dnnl_stream_wait(s));
    }

    // This thread's primitive for `key`, made on first use.
    static OnednnMatmul& get(const Key& key) {
        thread_local const bool one_thread = (omp_set_num_threads(1), true);
        (void)one_thread;
        thread_local std::map<Key, std::unique_ptr<OnednnMatmul>> made;
        auto& slot = made[key];
        if (!slot) slot = std::make_unique<OnednnMatmul>(key);
        return *slot;
    }

private:
    dnnl_primitive_t primitive_ = nullptr;
    dnnl_memory_t a_ = nullptr, b_ = nullptr, c_ = nullptr, scratch_memory_ = nullptr;
    std::vector<unsigned char> scratch_;

    static dnnl_engine_t engine() {
        static const dnnl_engine_t cpu = [] {
            dnnl_engine_t e;
            onednn_check(dnnl_engine_create(&e, dnnl_cpu, 0));
            return e;
        }();
        return cpu;
    }
    static dnnl_stream_t stream() {  // one per thread, destroyed with it
        struct Destroy {
            void operator()(dnnl_stream_t s) const { dnnl_stream_destroy(s); }
        };
        thread_local const std::unique_ptr<dnnl_stream, Destroy> s = [] {
            dnnl_stream_t created;
            onednn_check(dnnl_stream_create(&created, engine(), dnnl_stream_default_flags));
            return std::unique_ptr<dnnl_stream, Destroy>(created);
        }();
        return s.get();
    }
};

template <class In>
void run_matmul(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const In* a,
                std::size_t lda, const In* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
    const dnnl_data_type_t type = std::is_same_v<In, float> ? dnnl_f32 : dnnl_bf16;
    OnednnMatmul::get({m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, type}).run(a, b, c);
}

}  // namespace

void onednn_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                 std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
    run_matmul(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void onednn_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const bfloat16* a,
                 std::size_t lda, const bfloat16* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
    run_matmul(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Why this process cannot run bfloat16 matmuls at their rate, or "" when it can: oneDNN's native
// code needs AVX512_BF16 (Cooper Lake, Zen 4 and later) or AMX; without them it would emulate.
std::string bfloat16_matmul_unsupported() {
    const unsigned isa = unsigned(dnnl_get_effective_cpu_isa()), bf16 = unsigned(dnnl_cpu_isa_avx512_core_bf16);
    if ((isa & bf16) == bf16) return "";
    const char* level = isa == dnnl_cpu_isa_avx512_core_vnni ? "avx512_core_vnni"
                        : isa == dnnl_cpu_isa_avx512_core    ? "avx512_core"
                        : isa == dnnl_cpu_isa_avx2_vnni      ? "avx2_vnni"
                        : isa == dnnl_cpu_isa_avx2           ? "avx2"
                                                             : "below avx2";
    return std::string("neither AVX512_BF16 nor AMX-BF16 is available (oneDNN runs its ") + level + " code here)";
}

std::string onednn_version() {
    const dnnl_version_t* v = dnnl_version();
    return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace xgrad::kernels::detail
#endif
