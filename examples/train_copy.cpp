// A complete training loop: attention learns the copy task with Adam (the task and the model are
// those of `xgrad train copy`, in src/tasks/copy.hpp; the tool adds logging, metrics and a checkpoint).
#include <iostream>

#include "tasks/copy.hpp"

using namespace xgrad;

int main() {
    Generator init_gen(1), data_gen(2), eval_gen(3);
    copy_task::Model<float> model(copy_task::ModelOptions{}, init_gen);  // vocab 10, 8 tokens, E 32, 4 heads
    optim::Adam adam(model, {.lr = 3e-3});
    const auto held_out = copy_task::make_batch(256, 8, 10, eval_gen);

    for (int step = 1; step <= 600; ++step) {
        const auto batch = copy_task::make_batch(32, 8, 10, data_gen);
        auto loss = cross_entropy(model(batch.tokens), batch.targets);  // records the forward on the tape
        backward(loss);                                                  // gradients of every parameter
        adam.step();
        adam.zero_grad();
        tape().clear();  // end of step: the next step reuses the nodes' storage
        if (step % 100 == 0) std::cout << "step " << step << " loss " << loss.value()() << '\n';
    }
    const double accuracy = copy_task::accuracy(model, held_out);
    std::cout << "held-out token accuracy " << accuracy << '\n';
    return accuracy >= 0.99 ? 0 : 1;
}
