// The tape's recording and its backward walk (include/xgrad/core/tape.hpp).
#include "xgrad/core/tape.hpp"

#include <utility>

namespace xgrad {

std::shared_ptr<Node> Tape::record(const std::type_info& type, std::shared_ptr<Node> (*make)()) {
    if (size_ == nodes_.size()) nodes_.push_back(make());
    auto& slot = nodes_[size_];
    if (slot.use_count() != 1 || typeid(*slot) != type) slot = make();
    Node& node = *slot;
    node.tape_index = size_;
    node.is_leaf = false;
    node.requires_grad = true;
    node.stale = false;
    node.matmul_precision = detail::matmul_precision();
    node.label.clear();  // keeps its capacity: a steady step does not allocate
    node.reset_grad();
    ++size_;
    return slot;
}

namespace detail {
std::shared_ptr<Node> new_node(const std::type_info& type, std::shared_ptr<Node> (*make)(), bool any_input_requires_grad) {
    if (any_input_requires_grad && grad_enabled()) return tape().record(type, make);
    std::shared_ptr<Node> node = make();
    node->requires_grad = false;
    node->is_leaf = true;
    return node;
}
}  // namespace detail

void Tape::clear() {
    for (std::size_t i = 0; i < size_; ++i) {
        nodes_[i]->release_inputs();
        nodes_[i]->stale = true;
    }
    size_ = 0;
}

void Tape::run_backward(std::size_t root, bool release_grads) {
    if (observer_) observer_->backward_begins(*this, root);
    detail::MatmulPrecisionScope restore_precision(detail::matmul_precision());
    struct ReleasingScope {
        bool previous = std::exchange(detail::backward_releases_grads(), false);
        ~ReleasingScope() { detail::backward_releases_grads() = previous; }
    } releasing;
    detail::backward_releases_grads() = release_grads;
    if (detail::anomaly_mode()) return run_backward_checked(root, release_grads);
    for (std::size_t i = root + 1; i-- > 0;) {
        Node& n = *nodes_[i];
        if (n.requires_grad && n.has_grad()) {
            detail::matmul_precision() = n.matmul_precision;
            n.backward();
            if (release_grads) n.release_grad();
        }
        if (observer_) observer_->backward_passed(i);
    }
}

void Tape::reset_grads(std::size_t upto) {
    for (std::size_t i = 0; i <= upto && i < size_; ++i) nodes_[i]->reset_grad();
}

void Tape::run_backward_checked(std::size_t root, bool release_grads) {
    if (const std::string what = nodes_[root]->nonfinite(true); !what.empty())
        throw anomaly_error("anomaly: the gradient seeded into the output of " + detail::describe(*nodes_[root]) +
                            " holds " + what);
    std::vector<Node*> writes;
    struct StopRecording {
        ~StopRecording() { detail::anomaly_grad_writes() = nullptr; }
    } stop;
    detail::anomaly_grad_writes() = &writes;
    for (std::size_t i = root + 1; i-- > 0;) {
        Node& n = *nodes_[i];
        if (!n.requires_grad || !n.has_grad()) continue;
        writes.clear();
        detail::matmul_precision() = n.matmul_precision;
        n.backward();
        for (const Node* input : writes)
            if (const std::string what = input->nonfinite(true); !what.empty())
                throw anomaly_error("anomaly: the backward of " + detail::describe(n) + " produced " + what +
                                    " in the gradient of its input " + detail::describe(*input));
        if (release_grads) n.release_grad();
        if (observer_) observer_->backward_passed(i);
    }
}

}  // namespace xgrad
