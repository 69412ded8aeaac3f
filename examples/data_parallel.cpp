// Data-parallel training, complete (docs/distributed.md): a small regression network trained on
// a fixed dataset of 96 samples for 30 epochs with Adam. Each epoch the DistributedSampler deals
// this rank its share of the shuffled samples; DataParallel averages the gradients over the ranks.
//
//   build/examples/data_parallel                                   # one process
//   tests/dist/mpirun.sh -np 2 build/examples/data_parallel        # 2 ranks, the same model
#include <cstdio>
#include <vector>

#include <xgrad/dist/data_parallel.hpp>
#include <xgrad/dist/sampler.hpp>
#include <xgrad/xgrad.hpp>

using namespace xgrad;

template <Real T>
struct Regressor {
    BOOST_HANA_DEFINE_STRUCT(Regressor, (nn::Linear<T>, hidden), (nn::Linear<T>, out));
    explicit Regressor(Generator& gen) : hidden(3, 16, gen), out(16, 1, gen) {}
    Var<T, 2> operator()(const Var<T, 2>& x) const { return out(Var<T, 2>(tanh(hidden(x)))); }
};

int main(int argc, char** argv) {
    return dist::run(argc, argv, [](dist::Context& ctx) {
        // The dataset: the same on every rank (a fixed seed); y = sin(x0) + x1 * x2.
        const std::size_t samples = 96, per_step = 16;  // per_step samples in all, over the ranks
        Generator data(7);
        xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({samples, 3}), y({samples, 1});
        for (std::size_t i = 0; i < samples; ++i) {
            for (std::size_t j = 0; j < 3; ++j) x(i, j) = float(data.uniform(-1, 1));
            y(i, 0) = std::sin(x(i, 0)) + x(i, 1) * x(i, 2);
        }
        Generator init(1);
        Regressor<float> model(init);
        optim::Adam<float> adam(model, {.lr = 0.01});
        dist::DataParallel<float> dp(ctx, model);  // rank 0's parameters on every rank
        dist::DistributedSampler sampler(samples, ctx.world_size(), ctx.rank(), {.seed = 3});
        const std::size_t mine = per_step / std::size_t(ctx.world_size());  // this rank's rows a step

        double first = 0, last = 0;
        for (std::uint64_t epoch = 0; epoch < 30; ++epoch) {
            sampler.set_epoch(epoch);
            const std::vector<std::int64_t> indices = sampler.indices();
            double epoch_loss = 0;
            std::size_t steps = 0;
            for (std::size_t at = 0; at + mine <= indices.size(); at += mine, ++steps) {
                xt::xtensor<float, 2> xb = xt::xtensor<float, 2>::from_shape({mine, 3}), yb({mine, 1});
                for (std::size_t r = 0; r < mine; ++r) {
                    const auto i = std::size_t(indices[at + r]);
                    for (std::size_t j = 0; j < 3; ++j) xb(r, j) = x(i, j);
                    yb(r, 0) = y(i, 0);
                }
                auto loss = mse_loss(model(constant(xb)), constant(yb));
                backward(loss);
                dp.synchronize();  // the average of every rank's gradient
                adam.step();
                adam.zero_grad();
                tape().clear();
                epoch_loss += double(loss.value()());
            }
            // The mean over every rank's steps (the ranks take equal shares).
            dist::allreduce_average(ctx, std::span<double>(&epoch_loss, 1));
            epoch_loss /= double(steps);
            (epoch == 0 ? first : last) = epoch_loss;
        }
        if (ctx.is_root()) std::printf("%d rank(s): loss %.4f -> %.4f\n", ctx.world_size(), first, last);
        return last < first / 4 ? 0 : 1;
    });
}
