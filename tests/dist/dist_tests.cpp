// The proofs of xgrad/dist under mpirun (tests/dist/meson.build runs this with 2 and 3 ranks, and
// over TCP). Every rank runs every test case in the same order; references are computed by each
// rank alone, on its own tape, from the same seeds.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include <xtensor/xview.hpp>

#include "xgrad/dist/checkpoint.hpp"
#include "xgrad/dist/collectives.hpp"
#include "xgrad/dist/data_parallel.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace {

const dist::Context* the_context = nullptr;
const dist::Context& ctx() { return *the_context; }

template <Real T>
struct Net {
    BOOST_HANA_DEFINE_STRUCT(Net, (nn::Linear<T>, l1), (nn::LayerNorm<T>, norm), (nn::Linear<T>, l2));
    Net(std::uint64_t seed, std::size_t out = 3) : Net(Generator(seed), out) {}
    Net(Generator gen, std::size_t out) : l1(4, 8, gen), norm(8), l2(8, out, gen) {}
    Var<T, 2> operator()(const Var<T, 2>& x) const { return l2(norm(l1(x))); }
};

// Batch rows [begin, end) of a (rows, 4) input and its (rows, 3) target, drawn from `seed`.
template <Real T>
std::pair<Var<T, 2>, Var<T, 2>> rows(std::uint64_t seed, std::size_t total, std::size_t begin, std::size_t end) {
    Generator gen(seed);
    xt::xtensor<T, 2> x = xt::xtensor<T, 2>::from_shape({total, 4}), t = xt::xtensor<T, 2>::from_shape({total, 3});
    for (auto& v : x) v = T(gen.normal());
    for (auto& v : t) v = T(gen.normal());
    return {constant(xt::xtensor<T, 2>(xt::view(x, xt::range(begin, end)))),
            constant(xt::xtensor<T, 2>(xt::view(t, xt::range(begin, end))))};
}

template <Real T>
std::vector<std::vector<T>> grads_of(Net<T>& net) {
    std::vector<std::vector<T>> out;
    for (const auto& p : named_parameters<T>(net)) {
        REQUIRE(p.grad() != nullptr);
        out.emplace_back(p.grad(), p.grad() + p.size);
    }
    return out;
}

// The average over ranks of each rank's shard gradient, computed by this process alone: shard
// gradients one after the other on a tape of its own, summed in rank order, divided by the world size.
template <Real T>
std::vector<std::vector<T>> one_process_average(std::uint64_t seed, std::size_t per_rank, int accumulate = 1) {
    const auto world = std::size_t(ctx().world_size());
    Tape local;
    TapeScope scope(local);
    Net<T> net(7);
    std::vector<std::vector<T>> sum;
    for (std::size_t r = 0; r < world; ++r) {
        zero_grad(net);
        for (int a = 0; a < accumulate; ++a) {
            auto [x, t] = rows<T>(seed + std::uint64_t(a), world * per_rank, r * per_rank, (r + 1) * per_rank);
            backward(mse_loss(net(x), t));
            local.clear();
        }
        auto g = grads_of(net);
        if (r == 0) sum = g;
        else
            for (std::size_t i = 0; i < g.size(); ++i)
                for (std::size_t j = 0; j < g[i].size(); ++j) sum[i][j] += g[i][j];
    }
    for (auto& g : sum)
        for (T& v : g) v /= T(world);
    return sum;
}

// True when every rank's parameters are bitwise rank 0's.
template <Real T>
bool same_on_every_rank(Net<T>& net) {
    int differs = 0;
    for (const auto& p : named_parameters<T>(net)) {
        std::vector<T> root(p.value, p.value + p.size);
        dist::broadcast(ctx(), std::span<T>(root));
        differs |= std::memcmp(root.data(), p.value, p.size * sizeof(T)) != 0;
    }
    dist::allreduce_max(ctx(), std::span<int>(&differs, 1));
    return differs == 0;
}

}  // namespace

TEST_CASE_TEMPLATE("collectives are exact on integer-valued floats", T, float, double) {
    const int world = ctx().world_size(), rank = ctx().rank();
    const std::size_t n = 1001;  // not a multiple of the world size: uneven chunks in the ordered sum
    std::vector<T> mine(n), expected(n, T(0));
    for (std::size_t i = 0; i < n; ++i) {
        mine[i] = T(double((std::size_t(rank) + 1) * i % 97) - 40.0);
        for (int r = 0; r < world; ++r) expected[i] += T(double((std::size_t(r) + 1) * i % 97) - 40.0);
    }
    auto sum = mine, ordered = mine, average = mine, root = mine;
    dist::allreduce_sum(ctx(), std::span<T>(sum));
    dist::ordered_allreduce_sum(ctx(), std::span<T>(ordered));
    dist::allreduce_average(ctx(), std::span<T>(average));
    dist::broadcast(ctx(), std::span<T>(root), world - 1);
    for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        REQUIRE(sum[i] == expected[i]);
        REQUIRE(ordered[i] == expected[i]);
        REQUIRE(average[i] == expected[i] / T(world));
        REQUIRE(root[i] == T(double(std::size_t(world) * i % 97) - 40.0));
    }
    const auto gathered = dist::allgather(ctx(), std::span<const T>(mine.data(), 2));
    REQUIRE(gathered.size() == 2 * std::size_t(world));
    for (int r = 0; r < world; ++r) CHECK(gathered[std::size_t(2 * r + 1)] == T(double(r + 1) - 40.0));
}

TEST_CASE("DataParallel broadcasts rank 0's parameters") {
    Net<float> net(100 + std::uint64_t(ctx().rank()));  // a different initialization on every rank
    dist::DataParallel<float> dp(ctx(), net);
    Net<float> rank0(100);
    const auto a = named_parameters<float>(net), b = named_parameters<float>(rank0);
    for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(std::memcmp(a[i].value, b[i].value, a[i].size * sizeof(float)) == 0);
}

TEST_CASE("DataParallel: a model that differs on one rank fails on every rank, naming the first difference") {
    const bool last = ctx().rank() == ctx().world_size() - 1;
    Net<double> net(1, last ? 5 : 3);
    const std::string expected = "DataParallel: the model differs between ranks: parameter 4 is \"l2.weight (5, 8)\" on rank " +
                                 std::to_string(ctx().world_size() - 1) + " but \"l2.weight (3, 8)\" on rank 0";
    CHECK_THROWS_WITH_AS(dist::DataParallel<double>(ctx(), net), expected.c_str(), value_error);
}

TEST_CASE_TEMPLATE("deterministic DataParallel == one process adding the shards' gradients in rank order, bitwise", T,
                   float, double) {
    const std::size_t per_rank = 3;
    const auto expected = one_process_average<T>(11, per_rank);
    Net<T> net(7);
    // 64-byte buckets: parameters are cut across buckets, and buckets hold pieces of several.
    dist::DataParallel<T> dp(ctx(), net, {.bucket_bytes = 64, .deterministic = true});
    CHECK(dp.bucket_count() > 5);
    const auto r = std::size_t(ctx().rank());
    auto [x, t] = rows<T>(11, per_rank * std::size_t(ctx().world_size()), r * per_rank, (r + 1) * per_rank);
    backward(mse_loss(net(x), t));
    dp.synchronize();
    tape().clear();
    const auto got = grads_of(net);
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::memcmp(got[i].data(), expected[i].data(), got[i].size() * sizeof(T)) == 0);
}

TEST_CASE("DataParallel no_sync: micro-batches accumulate locally, the last synchronize averages them all") {
    const std::size_t per_rank = 2;
    const auto expected = one_process_average<double>(21, per_rank, 2);
    Net<double> net(7);
    dist::DataParallel<double> dp(ctx(), net, {.deterministic = true});
    const auto r = std::size_t(ctx().rank()), total = per_rank * std::size_t(ctx().world_size());
    {
        auto guard = dp.no_sync();
        auto [x, t] = rows<double>(21, total, r * per_rank, (r + 1) * per_rank);
        backward(mse_loss(net(x), t));
        dp.synchronize();  // skipped
        tape().clear();
    }
    auto [x, t] = rows<double>(22, total, r * per_rank, (r + 1) * per_rank);
    backward(mse_loss(net(x), t));
    dp.synchronize();
    tape().clear();
    const auto got = grads_of(net);
    for (std::size_t i = 0; i < got.size(); ++i)
        CHECK(std::memcmp(got[i].data(), expected[i].data(), got[i].size() * sizeof(double)) == 0);
}

TEST_CASE("DataParallel, overlapped with backward: 10 Adam steps follow one process on the whole batch (float64)") {
    const std::size_t per_rank = 4, total = per_rank * std::size_t(ctx().world_size()), r = std::size_t(ctx().rank());
    Net<double> net(3), whole(3);
    dist::DataParallel<double> dp(ctx(), net, {.bucket_bytes = 128});
    optim::Adam<double> adam(net, {.lr = 0.05}), adam_whole(whole, {.lr = 0.05});
    Tape reference_tape;
    for (int step = 0; step < 10; ++step) {
        CAPTURE(step);
        auto [x, t] = rows<double>(100 + std::uint64_t(step), total, r * per_rank, (r + 1) * per_rank);
        backward(mse_loss(net(x), t));
        if (ctx().world_size() > 1) CHECK(dp.buckets_started_in_backward() > 0);
        dp.synchronize();
        adam.step();
        adam.zero_grad();
        tape().clear();
        {
            TapeScope scope(reference_tape);
            auto [xa, ta] = rows<double>(100 + std::uint64_t(step), total, 0, total);
            backward(mse_loss(whole(xa), ta));
            adam_whole.step();
            adam_whole.zero_grad();
            reference_tape.clear();
        }
        REQUIRE(same_on_every_rank(net));
        const auto a = named_parameters<double>(net), b = named_parameters<double>(whole);
        for (std::size_t i = 0; i < a.size(); ++i)
            for (std::size_t j = 0; j < a[i].size; ++j)
                REQUIRE(std::abs(a[i].value[j] - b[i].value[j]) <= 1e-10 * std::max(1.0, std::abs(b[i].value[j])));
    }
}

TEST_CASE("DataParallel: a parameter no rank reached keeps no gradient; one rank 0 alone reached is averaged") {
    struct WithExtras {
        BOOST_HANA_DEFINE_STRUCT(WithExtras, (Net<double>, net), (Var<double, 1>, only_rank0), (Var<double, 1>, unused));
    };
    WithExtras m{Net<double>(5), parameter(xt::xtensor<double, 1>{1.0, 2.0}), parameter(xt::xtensor<double, 1>{3.0})};
    // 1 MiB buckets pack every parameter into one; 16-byte buckets give each a bucket of its own,
    // reduced in place on its gradient.
    std::size_t bucket_bytes = 1 << 20;
    SUBCASE("packed") {}
    SUBCASE("in place") { bucket_bytes = 16; }
    dist::DataParallel<double> dp(ctx(), m, {.bucket_bytes = bucket_bytes});
    auto [x, t] = rows<double>(9, 2, 0, 2);
    Var<double, 0> loss = mse_loss(m.net(x), t);
    if (ctx().is_root()) loss = loss + sum(m.only_rank0);
    backward(loss);
    dp.synchronize();
    tape().clear();
    CHECK_FALSE(m.unused.has_grad());
    REQUIRE(m.only_rank0.has_grad());
    CHECK(m.only_rank0.grad()(0) == 1.0 / ctx().world_size());
    CHECK(m.only_rank0.grad()(1) == 1.0 / ctx().world_size());
}

TEST_CASE("DataParallel: a second backward before synchronize() is an error, not a silent half-reduction") {
    if (ctx().world_size() == 1) return;
    Net<float> net(2);
    dist::DataParallel<float> dp(ctx(), net);
    auto [x, t] = rows<float>(1, 2, 0, 2);
    backward(mse_loss(net(x), t));
    tape().clear();
    CHECK_THROWS_AS(backward(mse_loss(net(x), t)), tape_error);
    tape().clear();
    dp.synchronize();  // finishes the first backward's reductions on every rank
}

namespace {
// y = 2 w, an op whose node does not report its input (no for_each_input): the tape walk cannot
// see that it uses w.
template <Real T>
struct HiddenInputNode final : TensorNode<T, 1> {
    Var<T, 1> w;
    const char* op_name() const override { return "hidden_input"; }
    void release_inputs() override { w = {}; }
    void backward() override {
        // dW (n) += 2 dY (n)
        const T* gy = this->grad_buffer().data();
        T* gw = w.node()->grad_buffer().data();
        for (std::size_t i = 0; i < w.size(); ++i) gw[i] += 2 * gy[i];
    }
};
}  // namespace

TEST_CASE("DataParallel: a bucket started before its parameter's last use is an error, not a wrong average") {
    if (ctx().world_size() == 1) return;
    struct Hidden {
        BOOST_HANA_DEFINE_STRUCT(Hidden, (Var<double, 1>, w), (Var<double, 1>, v));
    };
    Hidden m{parameter(xt::xtensor<double, 1>{1.0, -2.0, 3.0}), parameter(xt::xtensor<double, 1>{0.5})};
    // loss = Σ (2w)² + Σ v²: the hidden node (tape position 0) is the last to run in backward, but
    // the walk sees no use of w, so the one bucket {v, w} looks complete once v's ops have run.
    const auto loss = [&] {
        auto node = make_node<HiddenInputNode<double>>(true);
        node->w = m.w;
        node->value = 2.0 * m.w.value();
        const Var<double, 1> y(node);
        return Var<double, 0>(sum(y * y) + sum(m.v * m.v));
    };
    {
        dist::DataParallel<double> dp(ctx(), m);
        backward(loss());
        CHECK(dp.buckets_started_in_backward() == 1);
        CHECK_THROWS_WITH_AS(dp.synchronize(),
                             doctest::Contains("the gradient of \"w\" changed after its reduction started during backward"),
                             tape_error);
        tape().clear();
    }
    zero_grad(m);
    dist::DataParallel<double> after_backward(ctx(), m, {.overlap = false});  // reducing after backward is right
    backward(loss());
    after_backward.synchronize();
    tape().clear();
    CHECK(m.w.grad()(2) == 8.0 * 3.0);  // d/dw (2w)² = 8w, the same on every rank
    CHECK(m.v.grad()(0) == 1.0);
}

// Linear -> Dropout(0.5): what a rank's dropout stream changes.
struct DropNet {
    BOOST_HANA_DEFINE_STRUCT(DropNet, (nn::Linear<double>, l1), (nn::Dropout, drop));
    DropNet() : DropNet(Generator(5)) {}
    explicit DropNet(Generator gen) : l1(4, 64, gen), drop(0.5, 99) {}
    Var<double, 2> operator()(const Var<double, 2>& x) const { return drop(l1(x)); }
};

TEST_CASE("DataParallel: rank r draws dropout masks from stream r; deterministic == one process applying stream r to shard r") {
    const std::size_t per_rank = 2;
    const auto world = std::size_t(ctx().world_size()), r = std::size_t(ctx().rank());
    // The reference, by this process alone: shard q through a model whose dropout is on stream q.
    std::vector<std::vector<double>> expected;
    {
        Tape local;
        TapeScope scope(local);
        for (std::size_t q = 0; q < world; ++q) {
            DropNet net;
            net.drop.generator->set_stream(q);
            auto [x, t] = rows<double>(21, world * per_rank, q * per_rank, (q + 1) * per_rank);
            backward(sum(square(net(x))));
            local.clear();
            const auto p = named_parameters<double>(net);
            for (std::size_t i = 0; i < p.size(); ++i) {
                if (q == 0) expected.emplace_back(p[i].grad(), p[i].grad() + p[i].size);
                else
                    for (std::size_t j = 0; j < p[i].size; ++j) expected[i][j] += p[i].grad()[j];
            }
        }
        for (auto& g : expected)
            for (double& v : g) v /= double(world);
    }
    DropNet net;
    dist::DataParallel<double> dp(ctx(), net, {.deterministic = true});
    CHECK(net.drop.generator->stream() == r);
    auto [x, t] = rows<double>(21, world * per_rank, r * per_rank, (r + 1) * per_rank);
    const auto y = net(x);
    // The masks differ between ranks: rank 0's mask of the same input is not this rank's.
    DropNet rank0;
    const auto y0 = rank0(x);
    if (r != 0) CHECK(y.value() != y0.value());
    else CHECK(y.value() == y0.value());
    backward(sum(square(y)));
    dp.synchronize();
    tape().clear();
    const auto got = named_parameters<double>(net);
    for (std::size_t i = 0; i < got.size(); ++i)
        CHECK(std::memcmp(got[i].grad(), expected[i].data(), got[i].size * sizeof(double)) == 0);
    // per_rank_dropout = false: every rank keeps stream 0 (rank 0's masks).
    DropNet same;
    dist::DataParallel<double> shared(ctx(), same, {.per_rank_dropout = false});
    CHECK(same.drop.generator->stream() == 0);
}

TEST_CASE("dist checkpoints: rank 0 writes, every rank gets back the model, Adam and its own generators") {
    const std::string dir = dist::broadcast_string(
        ctx(), ctx().is_root() ? (std::filesystem::temp_directory_path() /
                                  ("xgrad-dist-test-" + std::to_string(::getpid()))).string()
                               : std::string());
    if (ctx().is_root()) std::filesystem::create_directories(dir);
    dist::barrier(ctx());
    const auto path = std::filesystem::path(dir) / "checkpoint.npz";
    Net<float> net(4);
    optim::Adam<float> adam(net, {.lr = 0.01});
    auto [x, t] = rows<float>(3, 2, 0, 2);
    backward(mse_loss(net(x), t));
    adam.step();
    tape().clear();
    Generator gen(1000 + std::uint64_t(ctx().rank()));
    gen.uniform();
    dist::save_checkpoint(ctx(), path, net, adam, 1, {{"data", &gen}});
    const double next = gen.uniform();
    const std::vector<float> saved(net.l1.weight.value().begin(), net.l1.weight.value().end());
    net.l1.weight.value().fill(0.f);
    // Only rank 0 reads the file (no shared filesystem): the others are given a path that does not exist.
    const auto where = ctx().is_root() ? path : std::filesystem::path(dir) / "not-on-this-machine.npz";
    CHECK(dist::load_checkpoint(ctx(), where, net, adam, {{"data", &gen}}) == 1);
    CHECK(gen.uniform() == next);
    CHECK(std::equal(saved.begin(), saved.end(), net.l1.weight.value().begin()));
    CHECK(dist::read_checkpoint_config(ctx(), path).at("world_size") == ctx().world_size());
    dist::barrier(ctx());
    if (ctx().is_root()) std::filesystem::remove_all(dir);
}

int main(int argc, char** argv) {
    return dist::run(argc, argv, [&](dist::Context& c) {
        the_context = &c;
        doctest::Context tests(argc, argv);
        const int failed = tests.run();
        // A rank whose checks failed makes mpirun's exit status nonzero.
        return failed;
    });
}
