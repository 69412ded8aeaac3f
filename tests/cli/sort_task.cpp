// The data and the decoding of `xgrad train sort` (src/tasks/sort.hpp), and the per-head
// cross-attention weights its picture reads from nn::TransformerDecoder.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include <xtensor/xview.hpp>

#include "tasks/sort.hpp"

namespace test_cli_sort_task {

using namespace xgrad;

TEST_CASE("sort task: targets are the source sorted, the decoder input is BOS then the targets shifted") {
    Generator gen(7);
    const std::size_t batch = 50, n = 6, vocab = 10;
    const auto b = sort_task::make_batch(batch, n, vocab, gen);
    REQUIRE(b.src.shape(0) == batch);
    REQUIRE(b.src.shape(1) == n);
    REQUIRE(b.targets.size() == batch * n);
    std::vector<int> seen(vocab, 0);
    for (std::size_t i = 0; i < batch; ++i) {
        std::vector<std::int64_t> src, sorted;
        for (std::size_t k = 0; k < n; ++k) {
            REQUIRE(b.src(i, k) >= 0);
            REQUIRE(b.src(i, k) < std::int64_t(vocab));
            ++seen[std::size_t(b.src(i, k))];
            src.push_back(b.src(i, k)), sorted.push_back(b.targets(i * n + k));
        }
        CHECK(std::is_sorted(sorted.begin(), sorted.end()));
        std::sort(src.begin(), src.end());
        CHECK(src == sorted);  // the same digits
        CHECK(b.tgt_in(i, 0) == std::int64_t(vocab));
        for (std::size_t k = 1; k < n; ++k) CHECK(b.tgt_in(i, k) == sorted[k - 1]);
    }
    // 300 uniform draws: every digit appears
    CHECK(std::count(seen.begin(), seen.end(), 0) == 0);
    // The same generator state, the same batch.
    Generator a(3), c(3);
    CHECK(sort_task::make_batch(4, n, vocab, a).src == sort_task::make_batch(4, n, vocab, c).src);
}

TEST_CASE("sort task: greedy decoding picks at each position the argmax given the tokens it decoded before") {
    // An untrained model decodes arbitrary digits; whatever they are, feeding BOS + decoded[:-1]
    // back under the causal mask must give those digits as the argmax at every position, and the
    // decoding of one sequence must not depend on the others of its batch.
    Generator init(5), data(6);
    const sort_task::ModelOptions o{.vocab = 10, .seq = 5, .d_model = 16, .heads = 2, .ffn = 32, .layers = 2};
    const sort_task::Model<double> model(o, init);
    const auto b = sort_task::make_batch(8, o.seq, o.vocab, data);
    const auto decoded = sort_task::greedy_decode(model, b.src);
    REQUIRE(decoded.shape(0) == 8);
    REQUIRE(decoded.shape(1) == o.seq);
    NoGrad no_record;
    xt::xtensor<std::int64_t, 2> fed = xt::xtensor<std::int64_t, 2>::from_shape({8, o.seq});
    for (std::size_t i = 0; i < 8; ++i) {
        fed(i, 0) = std::int64_t(o.vocab);
        for (std::size_t k = 1; k < o.seq; ++k) fed(i, k) = decoded(i, k - 1);
    }
    const auto logits = model.decode(fed, model.encode(b.src)).logits;  // (8, seq, vocab)
    std::size_t distinct = 0;
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t k = 0; k < o.seq; ++k) {
            const double* row = logits.value().data() + (i * o.seq + k) * o.vocab;
            CHECK(std::max_element(row, row + o.vocab) - row == decoded(i, k));
            distinct += k > 0 && decoded(i, k) != decoded(i, k - 1);
        }
    CHECK(distinct > 0);  // not a constant output
    const xt::xtensor<std::int64_t, 2> one = xt::view(b.src, xt::range(3, 4), xt::all());
    CHECK(sort_task::greedy_decode(model, one) == xt::xtensor<std::int64_t, 2>(xt::view(decoded, xt::range(3, 4), xt::all())));

    // score: against the decoded digits as targets, everything is right; one digit changed in one of
    // the 8 sequences costs 1/8 exact match and 1/(8·seq) token accuracy.
    sort_task::Batch self = b;
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t k = 0; k < o.seq; ++k) self.targets(i * o.seq + k) = decoded(i, k);
    CHECK(sort_task::score(model, self).exact_match == 1.0);
    CHECK(sort_task::score(model, self).token_accuracy == 1.0);
    self.targets(2 * o.seq + 1) = (self.targets(2 * o.seq + 1) + 1) % std::int64_t(o.vocab);
    const auto s = sort_task::score(model, self);
    CHECK(s.exact_match == doctest::Approx(7.0 / 8));
    CHECK(s.token_accuracy == doctest::Approx(1.0 - 1.0 / double(8 * o.seq)));
}

TEST_CASE("TransformerDecoder: per-head cross-attention weights average to the head-averaged ones") {
    Generator init(11), data(12);
    const sort_task::ModelOptions o{.vocab = 10, .seq = 4, .d_model = 8, .heads = 2, .ffn = 16, .layers = 2};
    const sort_task::Model<double> model(o, init);
    const auto b = sort_task::make_batch(3, o.seq, o.vocab, data);
    NoGrad no_record;
    const auto memory = model.encode(b.src);
    const auto tgt = model.pos(model.embed(b.tgt_in));
    nn::DecoderForwardOptions<double, 3> opts;
    opts.tgt_mask = nn::generate_square_subsequent_mask<double>(o.seq);
    opts.need_weights = true;
    const auto averaged = model.transformer.decoder.forward_with_weights(tgt, memory, opts);
    opts.average_attn_weights = false;
    const auto per_head = model.transformer.decoder.forward_with_weights(tgt, memory, opts);
    REQUIRE(averaged.attn_weights.size() == 2);
    REQUIRE(per_head.attn_weights_per_head.size() == 2);
    CHECK(per_head.attn_weights.empty());
    CHECK(per_head.output.value() == averaged.output.value());
    for (std::size_t l = 0; l < 2; ++l) {
        const auto& h = per_head.attn_weights_per_head[l].value();  // (3, 2, 4, 4)
        REQUIRE(h.shape() == std::array<std::size_t, 4>{3, 2, 4, 4});
        const xt::xtensor<double, 3> mean = (xt::view(h, xt::all(), 0) + xt::view(h, xt::all(), 1)) / 2.0;
        CHECK(xt::allclose(mean, averaged.attn_weights[l].value(), 1e-12, 1e-14));
        CHECK(xt::amax(xt::abs(xt::view(h, xt::all(), 0) - xt::view(h, xt::all(), 1)))() > 1e-3);  // heads differ
    }
}

}  // namespace test_cli_sort_task
