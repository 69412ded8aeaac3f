// The tape: nodes in recording order, walked backwards by backward().
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "xgrad/core/error.hpp"
#include "xgrad/core/precision.hpp"

namespace xgrad {

// A read-only view of an array a node holds, for inspection (listings, dumps): row-major, float32
// or float64. data is nullptr when there is no such array (a gradient nothing reached this pass).
struct ArrayView {
    std::vector<std::size_t> shape;
    const void* data = nullptr;
    bool is_double = false;
};

// One recorded value. An op's node derives from OpNode<ItsNode, T, N> (var.hpp), which derives
// the input methods below from the op's inputs(); a leaf is a LeafNode (var.hpp).
class Node {
public:
    virtual ~Node() = default;
    // Reads this node's gradient and accumulates (+=) into its inputs' gradients.
    virtual void backward() {}
    // Drops references to input nodes so a cleared tape frees (or reuses) them.
    virtual void release_inputs() {}
    // Calls f on every input node this op holds (held until the tape is cleared). Tape listings
    // read it, and so does dist::DataParallel: a parameter's gradient is final once the backward
    // walk has passed the last node that reports it.
    using InputVisitor = std::function<void(const Node&)>;
    virtual void for_each_input(const InputVisitor&) const {}
    // Forget this pass's gradient (intermediates only; leaves accumulate).
    virtual void reset_grad() = 0;
    // Forget it and give its buffer back (a backward releasing intermediate gradients).
    virtual void release_grad() = 0;
    virtual bool has_grad() const = 0;
    virtual const char* op_name() const = 0;
    // Anomaly mode: "" when the value (or, with in_grad, the gradient) is all finite, else the
    // first offender and where, e.g. "NaN at element 3 of (2, 4)".
    virtual std::string nonfinite(bool in_grad) const = 0;
    // A value of -inf is a result, not an anomaly (log_softmax of a masked entry).
    virtual bool allows_negative_infinity() const { return false; }

    // ---- inspection: the tape listings (inspect/), `xgrad inspect` and the explorer read these;
    //      none of it is used by forward or backward ----
    using InternalVisitor =
        std::function<void(const char* name, const char* formula, const ArrayView& value, const ArrayView& grad)>;
    virtual ArrayView value_view() const = 0;
    virtual ArrayView grad_view() const = 0;  // data nullptr when no gradient reached this node
    // A fused op's steps that are not nodes of their own (the scores inside attention_weights),
    // computed on request from the values and gradients the node holds.
    virtual void for_each_internal(const InternalVisitor&) const {}
    // A name for listings ("weights", "in_proj_weight"); set with named(); cleared on reuse.
    std::string label;

    bool requires_grad = false;
    bool is_leaf = true;
    bool stale = false;  // recorded on a tape that has since been cleared
    MatmulPrecision matmul_precision = MatmulPrecision::float32;  // at recording; its backward runs in it too
    std::size_t tape_index = 0;  // position on its tape (meaningless for leaves)
};

namespace detail {
inline bool& anomaly_mode() {
    thread_local bool enabled = false;
    return enabled;
}
// While a backward that gives intermediate gradients back runs (BackwardOptions): a reshape may
// then hand its gradient's buffer to its input instead of copying it (FlatCopyNode, ops/shape_view.hpp).
inline bool& backward_releases_grads() {
    thread_local bool releasing = false;
    return releasing;
}
// While an anomaly-mode backward runs: every node whose gradient buffer was touched, so the
// gradients an op's backward wrote can be checked right after it.
inline std::vector<Node*>*& anomaly_grad_writes() {
    thread_local std::vector<Node*>* writes = nullptr;
    return writes;
}
// "exp(x) (tape position 4)" for an op, "parameter" or "constant" for a leaf.
inline std::string describe(const Node& n) {
    return n.is_leaf ? std::string(n.op_name()) : n.op_name() + std::string(" (tape position ") +
                                                      std::to_string(n.tape_index) + ")";
}
// Anomaly mode, forward: the op that just computed n must not have produced NaN or inf.
inline void check_forward(const Node& n) {
    if (const std::string what = n.nonfinite(false); !what.empty())
        throw anomaly_error("anomaly: the forward of " + describe(n) + " produced " + what + " in its output");
}
}  // namespace detail

class Tape;

// Told about every backward pass of a tape as it runs (Tape::set_observer): dist::DataParallel
// starts reducing a parameter's gradient as soon as the walk has passed its last use.
class BackwardObserver {
public:
    virtual ~BackwardObserver() = default;
    // Before the walk from node `root` (nodes 0..root are on `tape`).
    virtual void backward_begins(const Tape& tape, std::size_t root) = 0;
    // Every node at `position` or after has passed its gradient on.
    virtual void backward_passed(std::size_t position) = 0;
};

namespace detail {
// A new node of type NodeT: the one function compiled per node type to make one.
template <class NodeT>
std::shared_ptr<Node> make_shared_node() {
    return std::make_shared<NodeT>();
}
}  // namespace detail

// Records op nodes in order. clear() keeps the node objects: the next step's i-th node of the
// same type reuses the i-th slot and its buffers, so a steady training loop stops allocating.
// Its functions that are not templates are compiled in libxgrad (lib/tape.cpp).
class Tape {
public:
    // A node of type NodeT at the next position, reused when the slot holds one nobody else uses.
    template <class NodeT>
    std::shared_ptr<NodeT> record() {
        return std::static_pointer_cast<NodeT>(record(typeid(NodeT), &detail::make_shared_node<NodeT>));
    }
    // The same for a node of the given type, made by `make` when the slot cannot be reused (one
    // function for every node type: only make_shared is compiled per type).
    std::shared_ptr<Node> record(const std::type_info& type, std::shared_ptr<Node> (*make)());

    Tape() = default;
    Tape(const Tape&) = delete;
    Tape& operator=(const Tape&) = delete;
    // Releasing inputs first frees a long chain node by node, not by deep recursion.
    ~Tape() { clear(); }

    // Ends the step: nodes release their inputs and wait to be reused. A node the user still holds
    // becomes stale: its value stays readable, but using it as an op input throws.
    void clear();
    // Frees every node, used or not.
    void reset() {
        clear();
        nodes_.clear();
    }

    std::size_t size() const { return size_; }
    std::size_t capacity() const { return nodes_.size(); }
    Node& operator[](std::size_t i) { return *nodes_[i]; }
    const Node& operator[](std::size_t i) const { return *nodes_[i]; }
    bool holds(const Node* n) const {
        return !n->is_leaf && n->tape_index < size_ && nodes_[n->tape_index].get() == n;
    }

    // Backpropagates from node `root` (whose gradient is already seeded): every recorded node
    // before it with a gradient passes it on, in reverse recording order; with release_grads, it
    // then gives its gradient's buffer back (grad_pool.hpp).
    void run_backward(std::size_t root, bool release_grads = false);
    // At most one observer; nullptr removes it.
    void set_observer(BackwardObserver* observer) {
        if (observer && observer_ && observer != observer_)
            throw tape_error("Tape::set_observer: the tape already has a backward observer");
        observer_ = observer;
    }
    BackwardObserver* observer() const { return observer_; }
    // Intermediate gradients from an earlier backward are forgotten before a new one.
    void reset_grads(std::size_t upto);

private:
    // Anomaly mode: the same walk, checking the seed and, after each op's backward, every gradient
    // it wrote; the first NaN or inf names the op, the input and the tape positions.
    void run_backward_checked(std::size_t root, bool release_grads);

    std::vector<std::shared_ptr<Node>> nodes_;
    std::size_t size_ = 0;
    BackwardObserver* observer_ = nullptr;
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

namespace detail {
// An op's output node: recorded on the current tape when grad is enabled and some input requires
// grad, otherwise a free-standing node (made by `make`) that requires nothing (lib/tape.cpp).
std::shared_ptr<Node> new_node(const std::type_info& type, std::shared_ptr<Node> (*make)(), bool any_input_requires_grad);
}  // namespace detail

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

// Inside this scope (like torch.autograd.detect_anomaly) every op recorded on the tape checks its
// forward output, and every backward checks the gradients it writes: the first NaN or ±inf throws
// an anomaly_error naming the op, its tape position, the shape and the element. Slow: debug only.
class DetectAnomaly {
public:
    explicit DetectAnomaly(bool enabled = true) : previous_(detail::anomaly_mode()) {
        detail::anomaly_mode() = enabled;
    }
    ~DetectAnomaly() { detail::anomaly_mode() = previous_; }
    DetectAnomaly(const DetectAnomaly&) = delete;
    DetectAnomaly& operator=(const DetectAnomaly&) = delete;

private:
    bool previous_;
};
inline bool anomaly_enabled() { return detail::anomaly_mode(); }
inline void set_detect_anomaly(bool enabled) { detail::anomaly_mode() = enabled; }

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
