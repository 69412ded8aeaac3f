// `xgrad attention`'s driver (study/mha_files.hpp): reading and checking the problem, forward +
// backward or Adam steps, the results written through an io::StagingDir.
#include "study/mha_files.hpp"
#include "study/npy_inputs.hpp"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "xgrad/core/random.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/optim/adam.hpp"

namespace xgrad::cli {
namespace {

template <Real T, std::size_t N>
AttentionProblem<T, N> load_typed(const fs::path& in, const AttentionConfig& cfg, const NpyArray& query_file) {
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
void run_typed(AttentionProblem<T, N>& problem, const fs::path& out, const std::optional<AttentionAdamOptions>& adam) {
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
    io::StagingDir stage(out);
    for (const auto& [name, a] : results) io::write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace

AnyAttentionProblem load_attention_problem(const fs::path& in) {
    const AttentionConfig cfg = read_attention_config(in / "config.json");
    const NpyArray q = *read_input(in, "query");
    if (q.shape.size() != 2 && q.shape.size() != 3)
        throw io_error(q.source + ": has shape " + shape_str(q.shape) + ", expected 3-D (batched) or 2-D (unbatched)");
    const bool batched = q.shape.size() == 3;
    if (q.dtype == Dtype::float32)
        return batched ? AnyAttentionProblem(load_typed<float, 3>(in, cfg, q)) : load_typed<float, 2>(in, cfg, q);
    if (q.dtype == Dtype::float64)
        return batched ? AnyAttentionProblem(load_typed<double, 3>(in, cfg, q)) : load_typed<double, 2>(in, cfg, q);
    throw io_error(q.source + ": has dtype " + dtype_name(q.dtype) + ", expected float32 or float64");
}

void run_attention(const fs::path& in, const fs::path& out, const std::optional<AttentionAdamOptions>& adam) {
    if (adam && adam->steps <= 0) throw value_error("--adam-steps must be positive, got " + std::to_string(adam->steps));
    auto problem = load_attention_problem(in);
    io::StagingDir::check_target(out);
    std::visit([&](auto& p) { run_typed(p, out, adam); }, problem);
}

}  // namespace xgrad::cli
