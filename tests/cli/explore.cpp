// `xgrad explore`'s numbers (cli::explore, study/explore.hpp), against oracles of their own: torch's
// outputs for a MultiheadAttention folder, the library's own backward for a GPT and a Llama, and what the
// losses' algebra says (the whole loss is the sum or mean of the positions' losses, so its dP and dS
// are the sum or mean of theirs). The page itself is tested in a browser (tests/explore/).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "io/io_test_util.hpp"
#include "study/explore.hpp"
#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"
#include "xgrad/io/npy.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_explore {

using namespace xgrad;
namespace fs = std::filesystem;

// max |a - scale · Σ_k parts_k| over every element, for one site's arrays
template <class Get>
double sum_gap(const cli::ExploreData& d, std::size_t site, double scale, Get get) {
    const auto& whole = get(d.choices[0].sites[site]);
    double gap = 0;
    for (std::size_t e = 0; e < whole.size(); ++e) {
        double sum = 0;
        for (std::size_t c = 1; c < d.choices.size(); ++c) sum += get(d.choices[c].sites[site])[e];
        gap = std::max(gap, std::abs(whole[e] - scale * sum));
    }
    return gap;
}

TEST_CASE("explore: a MultiheadAttention folder against torch's weights and query gradient") {
    const fs::path basic = fs::path(XGRAD_FIXTURES) / "io" / "attention" / "basic";
    cli::ExploreOptions o;
    o.source = basic / "in", o.positions = 1000;
    const cli::ExploreData d = cli::explore(o);
    REQUIRE(d.sites.size() == 1);
    const auto& s = d.sites[0];
    const std::size_t H = s.heads, L = s.queries, S = s.keys;
    CHECK(d.dtype == "float64");
    CHECK(H == 2);
    CHECK(d.choices.size() == L + 1);
    // torch's attn_weights (B, L, S), averaged over heads; query (L, B, E) and its gradient
    const auto weights = io::read_npy(basic / "expected" / "attn_weights.npy").as<double, 3>();
    const auto grad_query = io::read_npy(basic / "expected" / "grad.query.npy").as<double, 3>();
    double weight_gap = 0, masked_p = 0;
    std::size_t masked = 0;
    for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) {
            double mean = 0;
            for (std::size_t h = 0; h < H; ++h) {
                mean += s.weights[(h * L + i) * S + j] / double(H);
                if (s.masked[(h * L + i) * S + j]) masked += 1, masked_p += std::abs(s.weights[(h * L + i) * S + j]);
            }
            weight_gap = std::max(weight_gap, std::abs(mean - weights(0, i, j)));
        }
    CHECK(weight_gap < 1e-12);
    CHECK(masked > 0);
    CHECK(masked_p == 0);
    for (std::size_t t = 0; t < L; ++t) {
        double norm = 0;
        for (std::size_t e = 0; e < grad_query.shape(2); ++e) norm += grad_query(t, 0, e) * grad_query(t, 0, e);
        CHECK(d.choices[0].saliency[0][t] == doctest::Approx(std::sqrt(norm)).epsilon(1e-12));
    }
    // L = Σ_t L_t: the whole loss's dP and dS are the sum of the positions'
    CHECK(sum_gap(d, 0, 1.0, [](const cli::ExploreSiteGrads& g) { return g.dscores; }) < 1e-12);
    double unmasked_gap = 0, largest = 0;
    for (std::size_t e = 0; e < s.masked.size(); ++e) {
        if (s.masked[e]) continue;
        double sum = 0;
        for (std::size_t c = 1; c < d.choices.size(); ++c) sum += d.choices[c].sites[0].dweights[e];
        unmasked_gap = std::max(unmasked_gap, std::abs(d.choices[0].sites[0].dweights[e] - sum));
        largest = std::max(largest, std::abs(sum));
    }
    CHECK(unmasked_gap < 1e-12);
    CHECK(largest > 1e-3);
    // dS rows sum to 0; masked cells have dS = 0; position t's loss reaches query t only
    for (const auto& c : d.choices)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < L; ++i) {
                double row = 0;
                for (std::size_t j = 0; j < S; ++j) {
                    const std::size_t at = (h * L + i) * S + j;
                    row += c.sites[0].dscores[at];
                    if (s.masked[at] || (c.position >= 0 && long(i) != c.position)) CHECK(c.sites[0].dscores[at] == 0);
                }
                CHECK(std::abs(row) < 1e-12);
            }
}

// A decoder's site: every head's query i keeps keys j <= i only, and its weights sum to 1.
void check_causal_rows(const cli::ExploreSite& s, std::size_t heads, std::size_t T) {
    for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < T; ++i) {
            double row = 0;
            for (std::size_t j = 0; j < T; ++j) {
                CHECK(bool(s.masked[(h * T + i) * T + j]) == (j > i));
                row += s.weights[(h * T + i) * T + j];
            }
            CHECK(row == doctest::Approx(1).epsilon(1e-6));
        }
}

TEST_CASE("explore: a GPT's gradients follow its losses, and ‖dX_h‖ equals the library's input gradient") {
    xgrad::testing::ScratchDir dir;
    const std::vector<std::int64_t> ids{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    for (const std::size_t heads : {1, 2}) {
        CAPTURE(heads);
        nn::GPTConfig c;
        c.n_layer = 2, c.n_head = heads, c.n_embd = 8, c.block_size = 16, c.vocab_size = 12, c.dropout = 0;
        Generator gen(7);
        nn::GPT<float> model(c, gen);
        optim::AdamW<float> adamw(model);
        const fs::path checkpoint = dir.path / ("gpt" + std::to_string(heads) + ".npz");
        const auto letters = text::Tokenizer::from_vocabulary({U'a', U'b', U'c', U'd', U'e', U'f', U'g', U'h', U'i', U'j', U'k', U'l'});
        io::save_checkpoint(checkpoint, model, adamw, 0, {}, gpt_task::checkpoint_config(c, letters));
        cli::ExploreOptions o;
        o.source = checkpoint, o.tokens = ids, o.positions = 1000, o.head_sequences = 0;
        const cli::ExploreData d = cli::explore(o);
        const std::size_t T = ids.size() - 1;
        REQUIRE(d.sites.size() == 2);
        REQUIRE(d.choices.size() == T + 1);
        CHECK(d.sites[1].name == "transformer.h.1");
        for (std::size_t k = 0; k < 2; ++k) {
            const auto& s = d.sites[k];
            check_causal_rows(s, heads, T);
            // nanoGPT's loss is the mean over positions: the whole loss's dS is the positions' mean
            CHECK(sum_gap(d, k, 1.0 / double(T), [](const cli::ExploreSiteGrads& g) { return g.dscores; }) < 1e-7);
            for (std::size_t ch = 1; ch < d.choices.size(); ++ch) {  // position p reaches queries <= p only
                const auto& g = d.choices[ch].sites[k];
                const auto p = std::size_t(d.choices[ch].position);
                for (std::size_t h = 0; h < heads; ++h)
                    for (std::size_t i = p + 1; i < T; ++i) CHECK(g.dq[h * T + i] == 0);
                CHECK(g.head_input.size() == heads);
            }
        }
        if (heads != 1) continue;
        // One head: ‖dX_0‖ is the whole gradient at c_attn's input (ln_1's output), here taken from
        // the library's own backward, layer by layer.
        Tape tape;
        TapeScope on(tape);
        xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, T}), targets = idx;
        for (std::size_t t = 0; t < T; ++t) idx(0, t) = ids[t], targets(0, t) = ids[t + 1];
        backward(nn::gpt_loss(model(idx), targets));
        for (std::size_t k = 0; k < 2; ++k) {
            const Node* qkv = nullptr;
            for (std::size_t n = 0; n < tape.size(); ++n)
                if (tape[n].label == "transformer.h." + std::to_string(k) + ".qkv") qkv = &tape[n];
            REQUIRE(qkv);
            const auto& x = dynamic_cast<const xgrad::detail::LinearNode<float, 3>&>(*qkv).x;
            double norm = 0;
            for (const float g : x.grad()) norm += double(g) * double(g);
            CHECK(norm > 0);
            CHECK(d.choices[0].sites[k].head_input[0] == doctest::Approx(std::sqrt(norm)).epsilon(1e-5));
        }
    }
}

TEST_CASE("explore: a grouped-query Llama: its saliency is the embeddings' gradient, a group shares its dK and dV") {
    xgrad::testing::ScratchDir dir;
    const std::vector<std::int64_t> ids{3, 1, 4, 0, 5, 9, 2, 6, 8, 7, 11};  // distinct: one embedding row each
    nn::LlamaConfig c;
    c.dim = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 12, c.multiple_of = 8, c.max_seq_len = 16;
    c.tie_embeddings = false;  // the embedding rows' gradient is the saliency's alone
    Generator gen(5);
    nn::Llama<float> model(c, gen);
    optim::AdamW<float> adamw(model);
    const fs::path checkpoint = dir.path / "llama.npz";
    const auto letters = text::Tokenizer::from_vocabulary({U'a', U'b', U'c', U'd', U'e', U'f', U'g', U'h', U'i', U'j', U'k', U'l'});
    io::save_checkpoint(checkpoint, model, adamw, 0, {}, llama_task::checkpoint_config(c, letters));
    cli::ExploreOptions o;
    o.source = checkpoint, o.tokens = ids, o.positions = 1000, o.head_sequences = 0;
    const cli::ExploreData d = cli::explore(o);
    const std::size_t T = ids.size() - 1, H = 4;
    REQUIRE(d.sites.size() == 2);
    REQUIRE(d.choices.size() == T + 1);
    CHECK(d.title.rfind("Llama", 0) == 0);
    for (std::size_t k = 0; k < 2; ++k) {
        const auto& s = d.sites[k];
        REQUIRE(s.heads == H);
        check_causal_rows(s, H, T);
        CHECK(sum_gap(d, k, 1.0 / double(T), [](const cli::ExploreSiteGrads& g) { return g.dscores; }) < 1e-7);
        // query heads 0 and 1 read key/value head 0, heads 2 and 3 head 1
        const auto& g = d.choices[0].sites[k];
        REQUIRE(g.dk.size() == H * T);
        REQUIRE(g.dv.size() == H * T);
        double group_gap = 0, between = 0;
        for (std::size_t t = 0; t < T; ++t) {
            group_gap = std::max({group_gap, std::abs(g.dk[t] - g.dk[T + t]), std::abs(g.dv[2 * T + t] - g.dv[3 * T + t])});
            between = std::max(between, std::abs(g.dv[t] - g.dv[2 * T + t]));
        }
        CHECK(group_gap == 0);
        CHECK(between > 0);
    }
    // The saliency ‖dL/dx_t‖ of the whole loss: the gradient of embedding row ids[t], from the
    // library's own backward.
    Tape tape;
    TapeScope on(tape);
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, T}), targets = idx;
    for (std::size_t t = 0; t < T; ++t) idx(0, t) = ids[t], targets(0, t) = ids[t + 1];
    backward(nn::gpt_loss(model(idx), targets));
    const auto& rows = model.tok_embeddings.weight.grad();
    REQUIRE(d.choices[0].saliency.size() == 1);
    for (std::size_t t = 0; t < T; ++t) {
        double norm = 0;
        for (std::size_t e = 0; e < c.dim; ++e) norm += double(rows(std::size_t(ids[t]), e)) * double(rows(std::size_t(ids[t]), e));
        CHECK(norm > 0);
        CHECK(d.choices[0].saliency[0][t] == doctest::Approx(std::sqrt(norm)).epsilon(1e-5));
    }
}

TEST_CASE("explore: a GPT given as nanoGPT's files: its loss is nanoGPT's, every layer read in float64") {
    const fs::path folder = fs::path(XGRAD_FIXTURES) / "gpt" / "gpt_cli";
    cli::ExploreOptions o;
    o.source = folder, o.positions = 1000;
    const cli::ExploreData d = cli::explore(o);
    const double torch_loss = io::read_npy(folder / "expected" / "loss.npy").as_xarray<double>()();
    CHECK(d.dtype == "float64");
    CHECK(d.choices[0].loss == doctest::Approx(torch_loss).epsilon(1e-12));
    REQUIRE(d.sites.size() == 2);
    CHECK(d.sites[0].heads == 2);
    // sequence 0's targets: 3 -1 6 10 12 7; position 1's is ignored, so it offers no loss
    REQUIRE(d.choices.size() == 6);
    for (std::size_t c = 1; c < d.choices.size(); ++c) CHECK(d.choices[c].position != 1);
    for (const double s : d.choices[0].saliency[0]) CHECK(s > 0);
    o.sequence = 2;
    CHECK_THROWS_WITH_AS(cli::explore(o), doctest::Contains("--sequence: the input has 2 sequence(s), got 2"), value_error);
}

}  // namespace test_cli_explore
