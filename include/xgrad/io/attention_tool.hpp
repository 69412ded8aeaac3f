// The file-level driver behind `xgrad attention`: reads an nn::MultiheadAttention problem from a
// directory of .npy files and a config.json, runs forward + backward (or N Adam/AdamW steps) and
// writes the results with PyTorch's names. Everything is read and validated before anything is
// computed; the results go to a temporary directory next to OUT that is renamed at the end, so bad
// input (an io_error naming the file or field) leaves OUT untouched.
//
// IN:  config.json, query.npy, key.npy, value.npy, grad_output.npy, <param>.npy for every parameter
//      the config implies (in_proj_weight, out_proj.weight, ...), optional key_padding_mask.npy and
//      attn_mask.npy (bool or float). Float inputs are all float32 or all float64; that is the dtype
//      of the run.
// OUT: output.npy, attn_weights.npy (need_weights), grad.query.npy, grad.key.npy, grad.value.npy,
//      grad.<param>.npy — or, with Adam steps, loss.npy (float64, one per step) and <param>.npy.
#pragma once
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "xgrad/core/random.hpp"
#include "xgrad/io/json_config.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/nn/attention.hpp"
#include "xgrad/optim/adam.hpp"

namespace xgrad::io {

struct AttentionAdamOptions {
    int steps = 1;
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    std::optional<double> weight_decay;  // default: 0 for Adam, 1e-2 for AdamW (torch's defaults)
    bool amsgrad = false;
    bool adamw = false;
};

namespace detail {

namespace fs = std::filesystem;

// Reads IN/<name>.npy; `required` false returns nullopt when the file does not exist.
inline std::optional<NpyArray> read_input(const fs::path& in, const std::string& name, bool required = true) {
    const fs::path p = in / (name + ".npy");
    std::error_code ec;
    if (!required && !fs::exists(p, ec)) return std::nullopt;
    return read_npy(p);
}

inline void expect_shape(const NpyArray& a, const std::vector<std::size_t>& want, const std::string& why) {
    if (a.shape != want)
        throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected " + shape_str(want) + " " + why);
}

// Every element finite; masks may hold -inf (ignore) but not NaN or +inf.
inline void expect_finite(const NpyArray& a, bool allow_minus_inf = false) {
    if (const auto bad = a.first_nonfinite(allow_minus_inf))
        throw io_error(a.source + ": " + *bad + "; inputs must be finite");
}

template <Real T>
void expect_dtype(const NpyArray& a, const std::string& run_source) {
    if (a.dtype != dtype_of<T>())
        throw io_error(a.source + ": has dtype " + dtype_name(a.dtype) + " but " + run_source + " is " +
                       dtype_name(dtype_of<T>()) + "; all float inputs must have the same dtype");
}

template <Real T>
std::optional<AnyMask<T>> read_mask(const fs::path& in, const std::string& name,
                                              const std::vector<std::vector<std::size_t>>& allowed,
                                              const std::string& run_source) {
    auto a = read_input(in, name, false);
    if (!a) return std::nullopt;
    bool ok = false;
    for (const auto& s : allowed) ok = ok || a->shape == s;
    if (!ok) {
        std::string want;
        for (const auto& s : allowed) want += (want.empty() ? "" : " or ") + shape_str(s);
        throw io_error(a->source + ": has shape " + shape_str(a->shape) + ", expected " + want);
    }
    if (a->dtype == Dtype::bool8) return ignore_mask(a->as_xarray<bool>());
    if (!a->is_float()) throw io_error(a->source + ": a mask must be bool or float, got " + dtype_name(a->dtype));
    expect_dtype<T>(*a, run_source);
    expect_finite(*a, true);
    return additive_mask(a->as_xarray<T>());
}

// A directory next to `out` that becomes `out` (or is merged into it) by commit(); removed if never
// committed.
class StagingDir {
public:
    explicit StagingDir(fs::path out) : out_(std::move(out)) {
        const fs::path parent = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
        tmp_ = parent / ("." + out_.filename().string() + ".tmp-" + std::to_string(::getpid()));
        std::error_code ec;
        fs::remove_all(tmp_, ec);
        if (!fs::create_directory(tmp_, ec))
            throw io_error(out_.string() + ": cannot create the staging directory " + tmp_.string() + ": " + ec.message());
    }
    ~StagingDir() {
        std::error_code ec;
        if (!committed_) fs::remove_all(tmp_, ec);
    }
    StagingDir(const StagingDir&) = delete;
    StagingDir& operator=(const StagingDir&) = delete;

    fs::path file(const std::string& name) const { return tmp_ / name; }
    void commit() {
        std::error_code ec;
        if (!fs::exists(out_, ec)) {
            fs::rename(tmp_, out_, ec);
            if (ec) throw io_error(out_.string() + ": cannot rename " + tmp_.string() + ": " + ec.message());
        } else {
            for (const auto& e : fs::directory_iterator(tmp_)) {
                fs::rename(e.path(), out_ / e.path().filename(), ec);
                if (ec) throw io_error((out_ / e.path().filename()).string() + ": cannot move into place: " + ec.message());
            }
            fs::remove(tmp_, ec);
        }
        committed_ = true;
    }

private:
    fs::path out_, tmp_;
    bool committed_ = false;
};

inline fs::path normalize_dir(const fs::path& p) {
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return fs::path(s);
}

inline void check_parent_dir(const fs::path& path) {
    if (!fs::is_directory(path.has_parent_path() ? path.parent_path() : fs::path(".")))
        throw io_error(path.string() + ": the parent directory does not exist");
}

inline void check_out_dir(const fs::path& out) {
    check_parent_dir(out);
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_directory(out, ec)) throw io_error(out.string() + ": exists and is not a directory");
}

}  // namespace detail

// One attention problem read from IN and checked: the module with its parameters, the inputs,
// the forward options (masks) and the output gradient. T and N come from query.npy.
template <Real T, std::size_t N>
struct AttentionProblem {
    AttentionConfig config;
    nn::MultiheadAttention<T> mha;  // eval mode
    xt::xtensor<T, N> query, key, value, grad_output;
    nn::MhaForwardOptions<T> forward_options;
};

namespace detail {

template <Real T, std::size_t N>
AttentionProblem<T, N> load_attention_problem(const fs::path& in, const AttentionConfig& cfg, const NpyArray& query_file) {
    static_assert(N == 2 || N == 3, "xgrad: attention inputs are 2-D or 3-D");
    const auto& o = cfg.mha;
    const std::size_t E = o.embed_dim, H = o.num_heads, kdim = o.kdim.value_or(E), vdim = o.vdim.value_or(E);
    const std::string& run_source = query_file.source;
    const bool batched = N == 3;
    // query (L, B, E) / (B, L, E) batch_first / (L, E): sizes from query, checked against the rest
    const auto& qs = query_file.shape;
    const std::size_t L = batched && o.batch_first ? qs[1] : qs[0], B = batched ? (o.batch_first ? qs[0] : qs[1]) : 1;
    if (qs.back() != E)
        throw io_error(run_source + ": has shape " + shape_str(qs) + ", its last dimension must be embed_dim = " +
                       std::to_string(E));
    auto input = [&](const std::string& name, std::size_t dim) -> NpyArray {
        NpyArray a = *read_input(in, name);
        expect_dtype<T>(a, run_source);
        if (a.shape.size() != N)
            throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected a " + std::to_string(N) +
                           "-D array like query.npy " + shape_str(qs));
        const std::size_t S = a.shape[batched && o.batch_first ? 1 : 0];
        std::vector<std::size_t> want = batched ? (o.batch_first ? std::vector<std::size_t>{B, S, dim}
                                                                 : std::vector<std::size_t>{S, B, dim})
                                                : std::vector<std::size_t>{S, dim};
        expect_shape(a, want, batched ? "(batch size from query.npy, last dimension from config.json)"
                                      : "(last dimension from config.json)");
        expect_finite(a);
        return a;
    };
    expect_finite(query_file);
    const NpyArray key_file = input("key", kdim), value_file = input("value", vdim);
    const std::size_t S = key_file.shape[batched && o.batch_first ? 1 : 0];
    if (value_file.shape[batched && o.batch_first ? 1 : 0] != S)
        throw io_error(value_file.source + ": has shape " + shape_str(value_file.shape) + " but key.npy has shape " +
                       shape_str(key_file.shape) + "; key and value need the same source length");
    const NpyArray grad_file = *read_input(in, "grad_output");
    expect_dtype<T>(grad_file, run_source);
    expect_shape(grad_file, qs, "(the output's shape, as query.npy)");
    expect_finite(grad_file);

    nn::MhaForwardOptions<T> fopts;
    fopts.need_weights = cfg.need_weights;
    fopts.average_attn_weights = cfg.average_attn_weights;
    using Shapes = std::vector<std::vector<std::size_t>>;
    if (auto m = read_mask<T>(in, "key_padding_mask", batched ? Shapes{{B, S}} : Shapes{{S}}, run_source))
        fopts.key_padding_mask = std::move(*m);
    if (auto m = read_mask<T>(in, "attn_mask", Shapes{{L, S}, {B * H, L, S}}, run_source)) fopts.attn_mask = std::move(*m);

    Generator gen;
    nn::MultiheadAttention<T> mha(o, gen);
    mha.training = false;
    for_each_parameter(mha, [&](const std::string& name, auto& var) {
        NpyArray a = *read_input(in, name);
        expect_dtype<T>(a, run_source);
        expect_shape(a, std::vector<std::size_t>(var.shape().begin(), var.shape().end()), "(from config.json)");
        expect_finite(a);
        a.copy_to(var.value().data());
    });
    return {cfg, std::move(mha), query_file.as<T, N>(), key_file.as<T, N>(), value_file.as<T, N>(),
            grad_file.as<T, N>(), std::move(fopts)};
}

template <Real T, std::size_t N>
void run_attention_typed(AttentionProblem<T, N>& problem, const fs::path& out,
                         const std::optional<AttentionAdamOptions>& adam) {
    const AttentionConfig& cfg = problem.config;
    auto& mha = problem.mha;
    const auto& fopts = problem.forward_options;
    std::map<std::string, NpyArray> results;
    const auto& go = problem.grad_output;
    if (!adam) {
        auto q = parameter(problem.query), k = parameter(problem.key), v = parameter(problem.value);
        auto r = mha.forward(q, k, v, fopts);
        backward(r.output, go);
        results["output"] = NpyArray::from(r.output.value());
        if (cfg.need_weights)
            results["attn_weights"] = cfg.average_attn_weights ? NpyArray::from(r.attn_weights.value())
                                                               : NpyArray::from(r.attn_weights_per_head.value());
        results["grad.query"] = NpyArray::from(q.grad());
        results["grad.key"] = NpyArray::from(k.grad());
        results["grad.value"] = NpyArray::from(v.grad());
        for_each_parameter(mha, [&](const std::string& name, const auto& var) {
            results["grad." + name] = NpyArray::from(var.grad());
        });
    } else {
        auto q = constant(problem.query), k = constant(problem.key), v = constant(problem.value);
        xt::xtensor<double, 1> losses = xt::zeros<double>({std::size_t(adam->steps)});
        auto train = [&](auto& opt) {
            for (int step = 0; step < adam->steps; ++step) {
                opt.zero_grad();
                auto r = mha.forward(q, k, v, fopts);
                double loss = 0;  // sum(output · grad_output)
                for (std::size_t i = 0; i < go.size(); ++i) loss += double(r.output.value().data()[i]) * double(go.data()[i]);
                losses(step) = loss;
                backward(r.output, go);
                opt.step();
                tape().clear();
            }
        };
        const std::pair<double, double> betas{adam->beta1, adam->beta2};
        if (adam->adamw) {
            optim::AdamW<T> opt(mha, optim::AdamWOptions{adam->lr, betas, adam->eps, adam->weight_decay.value_or(1e-2),
                                                         adam->amsgrad, false});
            train(opt);
        } else {
            optim::Adam<T> opt(mha, optim::AdamOptions{adam->lr, betas, adam->eps, adam->weight_decay.value_or(0),
                                                       adam->amsgrad, false});
            train(opt);
        }
        results["loss"] = NpyArray::from(losses);
        for_each_parameter(mha, [&](const std::string& name, const auto& var) {
            results[name] = NpyArray::from(var.value());
        });
    }
    StagingDir stage(out);
    for (const auto& [name, a] : results) write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace detail

// Reads and checks the attention problem in directory `in` (see the top of this file) and calls
// fn(AttentionProblem<T, N>&) with T and N from query.npy. Bad input throws io_error (naming the
// file or field), value_error or shape_error before fn runs.
template <class Fn>
void with_attention_problem(const std::filesystem::path& in_dir, Fn&& fn) {
    const auto in = detail::normalize_dir(in_dir);
    const AttentionConfig cfg = read_attention_config(in / "config.json");
    const NpyArray q = *detail::read_input(in, "query");
    if (q.shape.size() != 2 && q.shape.size() != 3)
        throw io_error(q.source + ": has shape " + shape_str(q.shape) + ", expected 3-D (batched) or 2-D (unbatched)");
    auto run = [&]<Real T, std::size_t N>() {
        auto problem = detail::load_attention_problem<T, N>(in, cfg, q);
        fn(problem);
    };
    if (q.dtype == Dtype::float32)
        q.shape.size() == 3 ? run.template operator()<float, 3>() : run.template operator()<float, 2>();
    else if (q.dtype == Dtype::float64)
        q.shape.size() == 3 ? run.template operator()<double, 3>() : run.template operator()<double, 2>();
    else
        throw io_error(q.source + ": has dtype " + dtype_name(q.dtype) + ", expected float32 or float64");
}

// Runs one attention problem from directory `in` into directory `out` (see the top of this file).
// Throws io_error (bad files or config), value_error or shape_error; nothing is written then.
inline void run_attention(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                          const std::optional<AttentionAdamOptions>& adam = std::nullopt) {
    const auto out = detail::normalize_dir(out_dir);
    if (adam && adam->steps <= 0) throw value_error("--adam-steps must be positive, got " + std::to_string(adam->steps));
    with_attention_problem(in_dir, [&](auto& problem) {
        detail::check_out_dir(out);
        detail::run_attention_typed(problem, out, adam);
    });
}

}  // namespace xgrad::io
