// The tape: nodes in recording order, walked backwards by backward().
#pragma once
#include <cstddef>
#include <memory>
#include <typeinfo>
#include <vector>

namespace xgrad {

// One recorded value. Ops derive from TensorNode<T, N> (var.hpp) and override backward().
class Node {
public:
    virtual ~Node() = default;
    // Reads this node's gradient and accumulates (+=) into its inputs' gradients.
    virtual void backward() {}
    // Drops references to input nodes so a cleared tape frees (or reuses) them.
    virtual void release_inputs() {}
    // Forget this pass's gradient (intermediates only; leaves accumulate).
    virtual void reset_grad() = 0;
    virtual bool has_grad() const = 0;
    virtual const char* op_name() const = 0;

    bool requires_grad = false;
    bool is_leaf = true;
    bool stale = false;  // recorded on a tape that has since been cleared
    std::size_t tape_index = 0;  // position on its tape (meaningless for leaves)
};

// Records op nodes in order. clear() keeps the node objects: the next step's i-th node of the
// same type reuses the i-th slot and its buffers, so a steady training loop stops allocating.
class Tape {
public:
    // A node of type NodeT at the next position, reused when the slot holds one nobody else uses.
    template <class NodeT>
    std::shared_ptr<NodeT> record() {
        std::shared_ptr<NodeT> node;
        if (size_ < nodes_.size()) {
            auto& slot = nodes_[size_];
            if (slot.use_count() == 1 && typeid(*slot) == typeid(NodeT))
                node = std::static_pointer_cast<NodeT>(slot);
            else {
                node = std::make_shared<NodeT>();
                slot = node;
            }
        } else {
            node = std::make_shared<NodeT>();
            nodes_.push_back(node);
        }
        node->tape_index = size_;
        node->is_leaf = false;
        node->requires_grad = true;
        node->stale = false;
        node->reset_grad();
        ++size_;
        return node;
    }

    Tape() = default;
    Tape(const Tape&) = delete;
    Tape& operator=(const Tape&) = delete;
    // Releasing inputs first frees a long chain node by node, not by deep recursion.
    ~Tape() { clear(); }

    // Ends the step: nodes release their inputs and wait to be reused. A node the user still holds
    // becomes stale: its value stays readable, but using it as an op input throws.
    void clear() {
        for (std::size_t i = 0; i < size_; ++i) {
            nodes_[i]->release_inputs();
            nodes_[i]->stale = true;
        }
        size_ = 0;
    }
    // Frees every node, used or not.
    void reset() {
        clear();
        nodes_.clear();
    }

    std::size_t size() const { return size_; }
    std::size_t capacity() const { return nodes_.size(); }
    Node& operator[](std::size_t i) { return *nodes_[i]; }
    bool holds(const Node* n) const {
        return !n->is_leaf && n->tape_index < size_ && nodes_[n->tape_index].get() == n;
    }

    // Backpropagates from node `root` (whose gradient is already seeded): every recorded node
    // before it with a gradient passes it on, in reverse recording order.
    void run_backward(std::size_t root) {
        for (std::size_t i = root + 1; i-- > 0;) {
            Node& n = *nodes_[i];
            if (n.requires_grad && n.has_grad()) n.backward();
        }
    }
    // Intermediate gradients from an earlier backward are forgotten before a new one.
    void reset_grads(std::size_t upto) {
        for (std::size_t i = 0; i <= upto && i < size_; ++i) nodes_[i]->reset_grad();
    }

private:
    std::vector<std::shared_ptr<Node>> nodes_;
    std::size_t size_ = 0;
};

namespace detail {
inline Tape*& current_tape_ptr() {
    thread_local Tape default_tape;
    thread_local Tape* current = &default_tape;
    return current;
}
inline bool& grad_mode() {
    thread_local bool enabled = true;
    return enabled;
}
}  // namespace detail

// The tape ops record on (per thread).
inline Tape& tape() { return *detail::current_tape_ptr(); }
inline bool grad_enabled() { return detail::grad_mode(); }

// Makes `t` the current tape for this scope (gradcheck uses one of its own).
class TapeScope {
public:
    explicit TapeScope(Tape& t) : previous_(detail::current_tape_ptr()) { detail::current_tape_ptr() = &t; }
    ~TapeScope() { detail::current_tape_ptr() = previous_; }
    TapeScope(const TapeScope&) = delete;
    TapeScope& operator=(const TapeScope&) = delete;

private:
    Tape* previous_;
};

// Inside this scope ops compute values only: nothing is recorded, nothing requires grad.
class NoGrad {
public:
    NoGrad() : previous_(detail::grad_mode()) { detail::grad_mode() = false; }
    ~NoGrad() { detail::grad_mode() = previous_; }
    NoGrad(const NoGrad&) = delete;
    NoGrad& operator=(const NoGrad&) = delete;

private:
    bool previous_;
};

}  // namespace xgrad
