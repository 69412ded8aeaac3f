// nn::MultiheadAttention gradchecks over every flag combination (bias, add_bias_kv, add_zero_attn,
// kdim/vdim, batch_first, batched) with each mask kind, with the weights returned and, every
// second case, without (then, without dropout, the attention is one op: fused or memory-efficient,
// in turn); and with dropout.
#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mha_check.hpp"
#include "xgrad/check/registry.hpp"

namespace xgrad::checks {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::size_t E = 4, H = 2, L = 3, NB = 2;  // embed_dim, heads, query length, batch

struct Flags {
    bool bias, add_bias_kv, add_zero_attn, kvdim, batch_first, batched;
    std::string str() const {
        return std::string("bias=") + (bias ? "1" : "0") + " bias_kv=" + (add_bias_kv ? "1" : "0") +
               " zero_attn=" + (add_zero_attn ? "1" : "0") + " kvdim=" + (kvdim ? "1" : "0") +
               " batch_first=" + (batch_first ? "1" : "0") + " batched=" + (batched ? "1" : "0");
    }
};
std::vector<Flags> all_flags() {
    std::vector<Flags> out;
    for (int i = 0; i < 64; ++i)
        out.push_back({bool(i & 1), bool(i & 2), bool(i & 4), bool(i & 8), bool(i & 16), bool(i & 32)});
    return out;
}

Mha make_module(const Flags& f, double dropout = 0) {
    nn::MultiheadAttentionOptions o;
    o.embed_dim = E, o.num_heads = H, o.dropout = dropout, o.bias = f.bias;
    o.add_bias_kv = f.add_bias_kv, o.add_zero_attn = f.add_zero_attn, o.batch_first = f.batch_first;
    if (f.kvdim) o.kdim = 3, o.vdim = 5;
    Generator gen(11);
    return with_random_parameters(Mha(o, gen), 100);
}

// Random bool (true = ignore, ~35%; fully masked rows happen and give zero gradient) and float
// (normal, ~20% -inf) masks of any shape.
xt::xarray<bool> random_bool(std::vector<std::size_t> shape, unsigned seed) {
    std::mt19937_64 rng(seed);
    xt::xarray<bool> m(shape);
    for (auto& x : m) x = rng() % 100 < 35;
    m.data()[0] = false;  // never every key of the first query: then some gradient reaches each input
    return m;
}
xt::xarray<double> random_float(std::vector<std::size_t> shape, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> d;
    xt::xarray<double> m(shape);
    for (auto& x : m) x = rng() % 100 < 20 ? -inf : d(rng);
    return m;
}

enum class Masks { none, kpm_bool, kpm_float, attn2_bool, attn2_float, attn3_bool, attn3_float, causal, mixed, valid_lens };
const char* const mask_names[] = {"none",        "kpm_bool",    "kpm_float", "attn2_bool", "attn2_float",
                                  "attn3_bool",  "attn3_float", "causal",    "mixed",      "valid_lens"};

nn::MhaForwardOptions<double> make_masks(Masks kind, const Flags& f, std::size_t S, unsigned seed) {
    nn::MhaForwardOptions<double> fo;
    const std::size_t n = f.batched ? NB : 1;
    const auto kpm = f.batched ? std::vector<std::size_t>{NB, S} : std::vector<std::size_t>{S};
    switch (kind) {
        case Masks::none: break;
        case Masks::kpm_bool: fo.key_padding_mask = ignore_mask(random_bool(kpm, seed)); break;
        case Masks::kpm_float: fo.key_padding_mask = additive_mask(random_float(kpm, seed)); break;
        case Masks::attn2_bool: fo.attn_mask = ignore_mask(random_bool({L, S}, seed)); break;
        case Masks::attn2_float: fo.attn_mask = additive_mask(random_float({L, S}, seed)); break;
        case Masks::attn3_bool: fo.attn_mask = ignore_mask(random_bool({n * H, L, S}, seed)); break;
        case Masks::attn3_float: fo.attn_mask = additive_mask(random_float({n * H, L, S}, seed)); break;
        case Masks::causal: fo.is_causal = true; break;
        case Masks::mixed:  // bool key padding + float 3-D attn_mask, per-head weights
            fo.key_padding_mask = ignore_mask(random_bool(kpm, seed));
            fo.attn_mask = additive_mask(random_float({n * H, L, S}, seed + 1));
            fo.average_attn_weights = false;
            break;
        case Masks::valid_lens: {  // per query, with a float key padding mask; no weights returned
            xt::xarray<std::int64_t> lens = f.batched ? xt::xarray<std::int64_t>{{1, 2, 0}, {2, 0, 1}}
                                                      : xt::xarray<std::int64_t>{2, 1, 0};
            fo.valid_lens = valid_lens(lens);
            fo.key_padding_mask = additive_mask(random_float(kpm, seed));
            fo.need_weights = false;
            break;
        }
    }
    return fo;
}

GradcheckResult check_case(const Flags& f, Masks kind, std::size_t S, unsigned seed, bool need_weights,
                           nn::AttentionPath path) {
    const std::size_t kd = f.kvdim ? 3 : E, vd = f.kvdim ? 5 : E;
    const Mha m = make_module(f);
    auto fo = make_masks(kind, f, S, seed);
    fo.need_weights = need_weights, fo.path = path;
    if (!f.batched)
        return check_module<2>(m, randn<2>({L, E}, seed), randn<2>({S, kd}, seed + 1), randn<2>({S, vd}, seed + 2), fo);
    auto shape = [&](std::size_t len, std::size_t d) {
        return f.batch_first ? std::array<std::size_t, 3>{NB, len, d} : std::array<std::size_t, 3>{len, NB, d};
    };
    return check_module<3>(m, randn<3>(shape(L, E), seed), randn<3>(shape(S, kd), seed + 1),
                           randn<3>(shape(S, vd), seed + 2), fo);
}

// The cases of one group of mask kinds: every flag combination with each kind, seeds from 1.
void add_combinations(std::vector<GradcheckCase>& cases, const std::vector<Masks>& kinds) {
    unsigned seed = 1;
    for (const auto& f : all_flags())
        for (auto kind : kinds) {
            const std::size_t S = 2 + seed % 2;
            const bool weights_returned = kind != Masks::valid_lens;  // as make_masks sets need_weights
            for (bool need_weights : {true, false}) {
                if (need_weights && !weights_returned) continue;  // this mask kind returns none
                // without the weights, on every second case: the fused op (seed 4k) or the
                // memory-efficient op (4k + 2); their equality with the two ops on each mask kind and
                // flag is tested in tests/nn/attention_paths.cpp (the sanitizer build's time)
                if (!need_weights && weights_returned && seed % 2 != 0) continue;
                const nn::AttentionPath path = need_weights ? nn::AttentionPath::automatic
                                               : seed % 4 == 2 ? nn::AttentionPath::memory_efficient
                                                               : nn::AttentionPath::fused;
                const std::string variant = f.str() + " masks=" + mask_names[int(kind)] + " S=" + std::to_string(S) +
                                            " need_weights=" + (need_weights ? "1" : "0") +
                                            (path == nn::AttentionPath::memory_efficient ? " memory_efficient" : "");
                cases.push_back({"MultiheadAttention", variant,
                                 [=] { return check_case(f, kind, S, seed, need_weights, path); }});
            }
            ++seed;
        }
}

std::vector<GradcheckCase> flag_cases() {
    std::vector<GradcheckCase> cases;
    add_combinations(cases, {Masks::none, Masks::kpm_bool, Masks::kpm_float});
    add_combinations(cases, {Masks::attn2_bool, Masks::attn2_float, Masks::attn3_bool, Masks::attn3_float});
    add_combinations(cases, {Masks::causal, Masks::mixed, Masks::valid_lens});
    for (bool batched : {true, false})  // training, the module's dropout generator reseeded
        cases.push_back({"MultiheadAttention", std::string("dropout 0.3 masks=kpm_bool batched=") + (batched ? "1" : "0"),
                         [batched] {
                             const Flags f{true, true, false, false, false, batched};
                             Mha m = make_module(f, 0.3);
                             Generator& g = *m.dropout_generator;
                             const auto fo = make_masks(Masks::kpm_bool, f, 3, 5);
                             return batched ? check_module<3>(m, randn<3>({L, NB, E}, 1), randn<3>({3, NB, E}, 2),
                                                              randn<3>({3, NB, E}, 3), fo, &g)
                                            : check_module<2>(m, randn<2>({L, E}, 1), randn<2>({3, E}, 2),
                                                              randn<2>({3, E}, 3), fo, &g);
                         }});
    return cases;
}

const RegisterGradchecks registered_attention_flags{"attention_flags", flag_cases()};

}  // namespace
}  // namespace xgrad::checks
