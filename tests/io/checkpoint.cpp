// Training checkpoints: resume is bit-identical, loading names every problem and changes nothing
// on failure, and a save killed at any moment never leaves a broken file under the final name.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "io/io_test_util.hpp"
#include "xgrad/io/checkpoint.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_io_checkpoint {

using namespace xgrad;
using testing::ScratchDir;

namespace {

// Linear -> dropout -> MultiheadAttention -> Linear: parameters of several ranks, a generator
// that the forward draws from (dropout), and one the data comes from.
struct Net {
    BOOST_HANA_DEFINE_STRUCT(Net, (nn::Linear<double>, in), (nn::Dropout, drop), (nn::MultiheadAttention<double>, attn),
                             (nn::Linear<double>, out));
    Net(Generator& init, std::uint64_t dropout_seed)
        : in(3, 8, init),
          drop(0.25, dropout_seed),
          attn(nn::MultiheadAttentionOptions{.embed_dim = 8, .num_heads = 2, .batch_first = true}, init),
          out(8, 2, init) {}
    Var<double, 2> operator()(const Var<double, 3>& x) const {
        Var<double, 3> h = drop(in(x));
        auto a = attn.forward(h, h, h, {});
        Var<double, 3> y = out(a.output);
        return reshape<2>(y, {-1, 2});
    }
};

struct Run {
    Generator init;
    Net net;
    Generator data{11};
    Run(std::uint64_t init_seed, std::uint64_t dropout_seed) : init(init_seed), net(init, dropout_seed) {}
    io::NamedGenerators generators() { return {{"data", &data}, {"dropout", net.drop.generator.get()}}; }
};

// `steps` training steps; returns the losses.
template <class Opt>
std::vector<double> train(Run& run, Opt& opt, int steps) {
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
        xt::xtensor<double, 3> x = xt::xtensor<double, 3>::from_shape({2, 4, 3});
        xt::xtensor<double, 2> target = xt::xtensor<double, 2>::from_shape({8, 2});
        for (auto& v : x) v = run.data.normal();
        for (auto& v : target) v = run.data.normal();
        auto loss = mse_loss(run.net(constant(x)), constant(target));
        backward(loss);
        opt.step();
        opt.zero_grad();
        tape().clear();
        losses.push_back(loss.value()());
    }
    return losses;
}

template <class Opt, class Options>
void check_resume(const Options& options, const char* file = "ckpt.npz") {
    ScratchDir dir;
    const auto path = dir.path / file;
    Run straight(1, 5);
    Opt straight_opt(straight.net, options);
    const auto all = train(straight, straight_opt, 7);

    Run first(1, 5);
    Opt first_opt(first.net, options);
    const auto head = train(first, first_opt, 4);
    io::save_checkpoint(path, first.net, first_opt, 4, first.generators());

    Run resumed(99, 77);  // other weights, other dropout stream, other data position
    resumed.data.manual_seed(123);
    Opt resumed_opt(resumed.net, options);
    CHECK(io::load_checkpoint(path, resumed.net, resumed_opt, resumed.generators()) == 4);
    const auto tail = train(resumed, resumed_opt, 3);
    for (int s = 0; s < 4; ++s) CHECK(head[s] == all[s]);
    for (int s = 0; s < 3; ++s) CHECK(tail[s] == all[4 + s]);  // bit-identical, not approximately
    CHECK(resumed.net.out.weight.value() == straight.net.out.weight.value());
}

std::string load_error(const std::filesystem::path& path) {
    Run run(1, 5);
    optim::Adam adam(run.net, {.lr = 1e-2});
    const auto before = run.net.in.weight.value();
    const double draw_before = Generator(run.data).uniform();
    try {
        io::load_checkpoint(path, run.net, adam, run.generators());
    } catch (const io_error& e) {
        CHECK(run.net.in.weight.value() == before);  // nothing changed
        CHECK(adam.state().empty());
        CHECK(run.data.uniform() == draw_before);
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("checkpoint: N steps, save, load into a fresh model, M steps == N+M steps bit for bit") {
    SUBCASE("Adam with amsgrad and weight decay") { check_resume<optim::Adam<double>>(optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3, .amsgrad = true}); }
    SUBCASE("AdamW") { check_resume<optim::AdamW<double>>(optim::AdamWOptions{.lr = 1e-2}); }
    SUBCASE("SGD with nesterov momentum") {
        check_resume<optim::SGD<double>>(optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    }
    SUBCASE("AdamW, the checkpoint a .safetensors file") {
        check_resume<optim::AdamW<double>>(optim::AdamWOptions{.lr = 1e-2}, "ckpt.safetensors");
    }
}

TEST_CASE("checkpoint: the file is a state dict plus train_state/ entries") {
    ScratchDir dir;
    Run run(1, 5);
    optim::Adam adam(run.net, {.lr = 1e-2});
    train(run, adam, 2);
    io::save_checkpoint(dir.path / "c.npz", run.net, adam, 2, run.generators());
    const auto arrays = io::read_npz(dir.path / "c.npz");
    CHECK(arrays.count("attn.in_proj_weight"));
    CHECK(arrays.at("train_state/optimizer/attn.in_proj_weight/exp_avg").shape == std::vector<std::size_t>{24, 8});
    CHECK(arrays.at("train_state/optimizer/out.bias/step").dtype == io::Dtype::int64);
    CHECK(arrays.at("train_state/rng/data").shape == std::vector<std::size_t>{run.data.state().size()});
    Run other(9, 9);
    io::load_state_dict(other.net, dir.path / "c.npz");  // the training state is skipped
    CHECK(other.net.attn.in_proj_weight.value() == run.net.attn.in_proj_weight.value());
    CHECK(io::read_checkpoint_config(dir.path / "c.npz").empty());

    // a config describing the run comes back as saved; load_checkpoint passes over it
    const io::CheckpointConfig config{{"heads", 2}, {"causal", 1}, {"seq", 5}};
    io::save_checkpoint(dir.path / "cfg.npz", run.net, adam, 2, run.generators(), config);
    CHECK(io::read_checkpoint_config(dir.path / "cfg.npz") == config);
    io::save_checkpoint(dir.path / "cfg.safetensors", run.net, adam, 2, run.generators(), config);  // by the extension
    CHECK(io::read_safetensors(dir.path / "cfg.safetensors").size() == arrays.size() + config.size());
    CHECK(io::read_checkpoint_config(dir.path / "cfg.safetensors") == config);
    optim::Adam other_adam(other.net, {.lr = 1e-2});
    CHECK(io::load_checkpoint(dir.path / "cfg.npz", other.net, other_adam, other.generators()) == 2);
    auto edited = io::read_npz(dir.path / "cfg.npz");
    edited["train_state/config/heads"] = io::NpyArray::from(xt::xtensor<double, 1>{2.0});
    io::write_npz(dir.path / "bad_cfg.npz", edited);
    CHECK_THROWS_WITH_AS(io::read_checkpoint_config(dir.path / "bad_cfg.npz"),
                         ((dir.path / "bad_cfg.npz").string() +
                          ":train_state/config/heads.npy: a checkpoint config entry must be a () int64 array, got "
                          "float64 (1,)")
                             .c_str(),
                         io_error);
}

TEST_CASE("checkpoint: a bad file names every problem and changes nothing") {
    ScratchDir dir;
    Run run(1, 5);
    optim::Adam adam(run.net, {.lr = 1e-2});
    train(run, adam, 2);
    const auto good = dir.path / "good.npz";
    io::save_checkpoint(good, run.net, adam, 2, run.generators());
    const auto arrays = io::read_npz(good);
    auto variant = [&](const std::string& name, auto edit) {
        auto a = arrays;
        edit(a);
        io::write_npz(dir.path / name, a);
        return dir.path / name;
    };
    const auto f1 = variant("missing.npz", [](auto& a) {
        a.erase("out.bias");
        a.erase("train_state/optimizer/in.weight/exp_avg_sq");
        a.erase("train_state/rng/dropout");
    });
    const std::string m1 = load_error(f1);
    CHECK(m1.find(f1.string() + ": cannot load the checkpoint:") == 0);
    CHECK(m1.find("missing train_state/optimizer/in.weight/exp_avg_sq") != std::string::npos);
    CHECK(m1.find("missing train_state/rng/dropout") != std::string::npos);
    CHECK(m1.find("missing keys: out.bias") != std::string::npos);

    const auto f2 = variant("extra.npz", [](auto& a) {
        a["train_state/optimizer/nope/exp_avg"] = a.at("train_state/optimizer/in.weight/exp_avg");
        a["stray.weight"] = a.at("in.weight");
        a["train_state/optimizer/in.weight/exp_avg"] = a.at("train_state/optimizer/in.bias/exp_avg");
    });
    const std::string m2 = load_error(f2);
    CHECK(m2.find("unexpected train_state/optimizer/nope/exp_avg") != std::string::npos);
    CHECK(m2.find("unexpected keys: stray.weight") != std::string::npos);
    CHECK(m2.find("train_state/optimizer/in.weight/exp_avg is float64 (8,), expected float64 (8, 3)") !=
          std::string::npos);

    const auto f3 = variant("types.npz", [](auto& a) {
        a["train_state/step"] = io::NpyArray::from(xt::xtensor<double, 1>{2.0});
        a["train_state/rng/data"] = io::NpyArray::from(xt::xtensor<std::int64_t, 1>{1, 2, 3});
        a["in.weight"] = io::NpyArray::from(xt::xtensor<float, 2>::from_shape({8, 3}));
    });
    const std::string m3 = load_error(f3);
    CHECK(m3.find("train_state/step must be a () int64 array, got float64 (1,)") != std::string::npos);
    CHECK(m3.find("train_state/rng/data is int64 (3,), expected int64 (" + std::to_string(run.data.state().size()) +
                  ",)") != std::string::npos);
    CHECK(m3.find("in.weight has dtype float32, the model expects float64") != std::string::npos);

    const auto f4 = variant("nonfinite.npz", [](auto& a) {
        auto bias = a.at("out.bias").template as_xarray<double>();
        bias(1) = std::nan("");
        a["out.bias"] = io::NpyArray::from(bias);
        auto m = a.at("train_state/optimizer/in.weight/exp_avg").template as_xarray<double>();
        m(2, 1) = -INFINITY;
        a["train_state/optimizer/in.weight/exp_avg"] = io::NpyArray::from(m);
    });
    const std::string m4 = load_error(f4);
    CHECK(m4.find("out.bias: element 1 is NaN") != std::string::npos);
    CHECK(m4.find("train_state/optimizer/in.weight/exp_avg: element 7 is -inf") != std::string::npos);

    CHECK(load_error(dir.path / "absent.npz") == (dir.path / "absent.npz").string() + ": no such file");
}

TEST_CASE("checkpoint: a save killed at any moment leaves the old file or the new one, never a broken one") {
    ScratchDir dir;
    const auto path = dir.path / "ckpt.npz";
    Generator init(3);
    struct Model {
        BOOST_HANA_DEFINE_STRUCT(Model, (nn::Linear<double>, layer));
    };
    Model model{nn::Linear<double>(512, 512, init)};  // ~2 MB per save: kills land mid-write
    optim::SGD sgd(model, {.lr = 0.1});
    const auto t0 = std::chrono::steady_clock::now();
    io::save_checkpoint(path, model, sgd, 0);
    const double save_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::int64_t newest = 0;
    for (int attempt = 0; attempt < 12; ++attempt) {
        int done[2];
        REQUIRE(::pipe(done) == 0);
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {  // saves steps 1, 2, ... until killed, reporting each completed save
            try {
                for (std::int64_t step = 1;; ++step) {
                    io::save_checkpoint(path, model, sgd, step);
                    if (::write(done[1], "s", 1) != 1) ::_exit(1);
                }
            } catch (...) {
                ::_exit(1);
            }
        }
        ::close(done[1]);
        char c;
        REQUIRE(::read(done[0], &c, 1) == 1);  // one save has completed: kill at 0 to 2 save durations later
        ::usleep(useconds_t(save_us * attempt / 6));
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
        ::close(done[0]);
        Model loaded{nn::Linear<double>(512, 512, init)};
        optim::SGD other_sgd(loaded, {.lr = 0.1});
        std::int64_t step = -1;
        CHECK_NOTHROW(step = io::load_checkpoint(path, loaded, other_sgd));
        CHECK(step >= 1);
        CHECK(loaded.layer.weight.value() == model.layer.weight.value());
        newest = std::max(newest, step);
    }
    CHECK(newest >= 1);
    // Kills that landed mid-write left their temporary files, never the final name half-written.
    MESSAGE("largest step found after a kill: " << newest << "; leftover temporaries: " << dir.entries().size() - 1);
}

}  // namespace test_io_checkpoint
