// Var<T, N>: a handle to a node holding a value and (when it requires grad) a gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/error.hpp"
#include "xgrad/core/grad_pool.hpp"
#include "xgrad/core/intrinsics.hpp"  // before xsimd: g++ 12 warnings off inside the intrinsics
#include "xgrad/core/names.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/core/tape.hpp"

#include <xtensor/xtensor.hpp>

namespace xgrad {

template <class T>
concept Real = std::same_as<T, float> || std::same_as<T, double>;

// A node's storage: value and gradient of the same static rank, each an xt::xtensor<T, N>. The
// members that touch the gradient's buffer are defined below the class, not in it: not inline,
// so a program that links libxgrad (which holds TensorNode for float and double, ranks 0-4) calls
// them rather than compiling them, and the buffer pool and threads they reach, in each of its units.
template <Real T, std::size_t N>
class TensorNode : public Node {
public:
    using value_type = T;
    static constexpr std::size_t rank = N;

    xt::xtensor<T, N> value;

    // Out of line, as the members below: every op's node destroys its storage through one call.
    ~TensorNode() override;
    // The gradient, zero-filled on first touch in a pass (its buffer is kept across passes).
    xt::xtensor<T, N>& grad_buffer();
    // For a backward that writes every element of this gradient at once, BLAS-style:
    // grad = contribution + beta · grad. On first touch in a pass beta is 0, and the buffer is
    // not zero-filled: the contribution overwrites it (stale content is never read). Later, 1.
    struct GradTarget {
        T* data;
        T beta;
    };
    GradTarget grad_target();
    // After this node's backward, when the backward releases intermediate gradients: the buffer
    // goes back to the pool (grad_pool.hpp) and the node has no gradient.
    void release_grad() override;
    bool has_grad() const override { return grad_live_; }
    const xt::xtensor<T, N>* grad_storage() const { return &grad_; }
    ArrayView value_view() const override { return view_of(value); }
    ArrayView grad_view() const override { return grad_live_ ? view_of(grad_) : ArrayView{view_of(value).shape}; }
    template <class A>
    static ArrayView view_of(const A& a) {
        return {std::vector<std::size_t>(a.shape().begin(), a.shape().end()), a.data(), std::same_as<T, double>};
    }
    void reset_grad() override { grad_live_ = false; }
    // In a backward that gives gradients back, when `input` has no gradient yet: this gradient's
    // buffer becomes input's (same element count, read in input's shape), no copy; this node's
    // is then released. False, and nothing done, otherwise. A reshape's backward (FlatCopyNode,
    // ops/shape_view.hpp).
    template <std::size_t M>
    bool pass_grad_buffer(TensorNode<T, M>& input);
    std::string nonfinite(bool in_grad) const override;
    // Anomaly mode: throws when this node, just computed by its op, holds NaN or inf.
    void check_forward() const;

private:
    template <Real, std::size_t>
    friend class TensorNode;
    using Storage = typename xt::xtensor<T, N>::storage_type;
    xt::xtensor<T, N> grad_;  // its storage is empty while released to the pool
    bool grad_live_ = false;
};

template <Real T, std::size_t N>
TensorNode<T, N>::~TensorNode() = default;
template <Real T, std::size_t N>
xt::xtensor<T, N>& TensorNode<T, N>::grad_buffer() {
    const GradTarget target = grad_target();
    if (target.beta == T(0)) parallel_fill(target.data, grad_.size(), T(0));
    return grad_;
}
template <Real T, std::size_t N>
typename TensorNode<T, N>::GradTarget TensorNode<T, N>::grad_target() {
    if (auto* writes = detail::anomaly_grad_writes()) writes->push_back(this);
    if (grad_live_) return {grad_.data(), T(1)};
    if (grad_.storage().size() != value.size()) detail::grad_pool<Storage>().take(grad_.storage(), value.size());
    if (grad_.shape() != value.shape()) grad_.resize(value.shape());
    grad_live_ = true;
    return {grad_.data(), T(0)};
}
template <Real T, std::size_t N>
void TensorNode<T, N>::release_grad() {
    grad_live_ = false;
    detail::grad_pool<Storage>().give(grad_.storage());
}
template <Real T, std::size_t N>
template <std::size_t M>
bool TensorNode<T, N>::pass_grad_buffer(TensorNode<T, M>& input) {
    if (!detail::backward_releases_grads() || input.grad_live_ || !grad_live_ || grad_.size() != input.value.size())
        return false;
    if (auto* writes = detail::anomaly_grad_writes()) writes->push_back(&input);
    input.grad_.storage().swap(grad_.storage());
    if (input.grad_.shape() != input.value.shape()) input.grad_.resize(input.value.shape());
    input.grad_live_ = true;
    release_grad();  // gives back what input held before, if anything
    return true;
}
template <Real T, std::size_t N>
std::string TensorNode<T, N>::nonfinite(bool in_grad) const {
    if (in_grad && !grad_live_) return "";
    const T* data = in_grad ? grad_.data() : value.data();
    const auto& shape = in_grad ? grad_.shape() : value.shape();
    for (std::size_t i = 0; i < value.size(); ++i) {
        const T x = data[i];
        if (std::isfinite(x) || (x < 0 && std::isinf(x) && !in_grad && allows_negative_infinity())) continue;
        return std::string(std::isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf") + " at element " + std::to_string(i) +
               " of " + shape_str(shape);
    }
    return "";
}
template <Real T, std::size_t N>
void TensorNode<T, N>::check_forward() const {
    detail::check_forward(*this);
}

// A leaf: a parameter (requires grad, gradients accumulate until zero_grad) or a constant.
template <Real T, std::size_t N>
class LeafNode final : public TensorNode<T, N> {
public:
    const char* op_name() const override { return this->requires_grad ? "parameter" : "constant"; }
};

template <class E>
concept Expression = requires { typename E::xgrad_expression_tag; };
// An elementwise expression not yet on the tape (a Var is an Expression already recorded). Every
// op is written on Vars and takes these through one more overload, `template <LazyExpression E>`,
// that materializes each with eval() (one node, expr.hpp) and calls the Var overload.
template <class E>
concept LazyExpression = Expression<E> && !requires(const E& e) { e.node(); };

template <Real T, std::size_t N>
class Var {
public:
    using xgrad_expression_tag = void;
    using value_type = T;
    static constexpr std::size_t rank = N;
    using node_type = TensorNode<T, N>;

    Var() = default;
    // Every op returns its freshly computed node through here: anomaly mode checks it.
    explicit Var(std::shared_ptr<node_type> node) : node_(std::move(node)) {
        if (detail::anomaly_mode() && node_ && !node_->is_leaf) node_->check_forward();
    }

    // Materializes an elementwise expression: records ONE node (defined in expr.hpp).
    template <Expression E>
        requires(!std::same_as<std::remove_cvref_t<E>, Var>)
    Var(const E& expr);

    // The value: an xt::xtensor<T, N> of this node's own (every op's output, reshape's too, is a
    // new array; nothing aliases it).
    const xt::xtensor<T, N>& value() const { return node_->value; }
    // Mutable value, for optimizers and initializers updating parameters in place.
    xt::xtensor<T, N>& value() { return node_->value; }
    // The accumulated gradient (zeros when nothing reached this node).
    const xt::xtensor<T, N>& grad() const { return node_->grad_buffer(); }
    bool has_grad() const { return node_->has_grad(); }
    // By reference: begin() and end() of two calls must point into the same array.
    const auto& shape() const { return node_->value.shape(); }
    std::size_t shape(std::size_t axis) const { return node_->value.shape()[axis]; }
    std::size_t size() const { return node_->value.size(); }
    // Throws when this is an intermediate of a tape that has been cleared (see Tape::clear):
    // an op must not silently cut the gradient path through it.
    bool requires_grad() const {
        if (node_->stale) detail::throw_stale_var(node_->op_name(), shape().data(), N);
        return node_->requires_grad;
    }
    bool is_leaf() const { return node_->is_leaf; }
    const char* op_name() const { return node_->op_name(); }
    node_type* node() const { return node_.get(); }
    const std::shared_ptr<node_type>& node_ptr() const { return node_; }
    explicit operator bool() const { return node_ != nullptr; }

    // A constant holding a copy of the value: no gradient flows through it.
    Var detach() const;

    // Forgets the accumulated gradient (leaves; intermediates are reset by each backward).
    void zero_grad() const { node_->reset_grad(); }

private:
    std::shared_ptr<node_type> node_;
};

namespace detail {
template <Real T, std::size_t N>
Var<T, N> make_leaf(xt::xtensor<T, N>&& value, bool requires_grad) {
    auto n = std::make_shared<LeafNode<T, N>>();
    n->value = std::move(value);  // its buffer, not a copy
    n->requires_grad = requires_grad;
    return Var<T, N>(std::move(n));
}
}  // namespace detail

// A trainable leaf: requires grad; gradients accumulate across backward calls until zero_grad.
template <Real T, std::size_t N>
Var<T, N> parameter(xt::xtensor<T, N> value) {
    return detail::make_leaf(std::move(value), true);
}

// An input or constant leaf: no gradient flows into it.
template <Real T, std::size_t N>
Var<T, N> constant(xt::xtensor<T, N> value) {
    return detail::make_leaf(std::move(value), false);
}

template <Real T, std::size_t N>
Var<T, N> Var<T, N>::detach() const {
    return constant(xt::xtensor<T, N>(value()));  // a copy of the elements
}

// Creates the output node of an op: on the current tape when grad is enabled and some input
// requires grad, otherwise a free-standing node that requires nothing. Ops call make_op below,
// which calls this.
template <class NodeT>
std::shared_ptr<NodeT> make_node(bool any_input_requires_grad) {
    return std::static_pointer_cast<NodeT>(
        detail::new_node(typeid(NodeT), &detail::make_shared_node<NodeT>, any_input_requires_grad));
}

// Does an op's input need a gradient? A Var (an empty one, e.g. an absent bias: no) or a list of
// Vars here; other input kinds (an expression, an attention head operand) overload it beside their
// type, found by argument-dependent lookup.
template <Real T, std::size_t N>
bool input_requires_grad(const Var<T, N>& v) {
    return v && v.requires_grad();
}
template <Real T, std::size_t N>
bool input_requires_grad(const std::vector<Var<T, N>>& vs) {
    return std::any_of(vs.begin(), vs.end(), [](const Var<T, N>& v) { return input_requires_grad(v); });
}

// What the tape does with an op's input slot: drop it (release_input) and report the nodes it
// holds (visit_input). A Var (an empty one, e.g. an absent bias, holds none) or a list of Vars
// here; other kinds overload both beside their type, found by argument-dependent lookup.
template <Real T, std::size_t N>
void release_input(Var<T, N>& v) {
    v = {};
}
template <Real T, std::size_t N>
void visit_input(const Node::InputVisitor& f, const Var<T, N>& v) {
    if (v) f(*v.node());
}
template <Real T, std::size_t N>
void release_input(std::vector<Var<T, N>>& vs) {
    vs.clear();  // keeps the capacity for the next step
}
template <Real T, std::size_t N>
void visit_input(const Node::InputVisitor& f, const std::vector<Var<T, N>>& vs) {
    for (const auto& v : vs) visit_input(f, v);
}
// Calls f on the node of every input Var, for a node written on TensorNode directly.
template <class... Vs>
void visit_inputs(const Node::InputVisitor& f, const Vs&... inputs) {
    (visit_input(f, inputs), ...);
}

// The base of an op's node, which states only its inputs, forward and backward:
//   auto inputs() { return std::tie(x, w); }  its input slots, in the order make_op receives them
//   void forward();                            writes this->value from them
//   void backward() override;                  accumulates into the inputs' gradients
// The rest of what the tape needs comes from inputs(): release_inputs (a cleared tape, or a node
// nothing records, drops them) and for_each_input (tape listings, and where DataParallel sees a
// parameter's last use in backward).
template <class Derived, Real T, std::size_t N>
class OpNode : public TensorNode<T, N> {
public:
    void release_inputs() final {
        std::apply([](auto&... in) { (release_input(in), ...); }, static_cast<Derived&>(*this).inputs());
    }
    void for_each_input(const Node::InputVisitor& f) const final {
        // inputs() ties the members without changing them: reading through it keeps this const
        auto& self = const_cast<Derived&>(static_cast<const Derived&>(*this));
        std::apply([&](const auto&... in) { (visit_input(f, in), ...); }, self.inputs());
    }
};

// The one way an op makes its output: make_op<NodeT>(out_shape, forward, inputs...)
//   1. records a NodeT on the tape when grad is enabled and some input requires grad, otherwise
//      makes a free-standing node that requires nothing (make_node);
//   2. copies the inputs into the node's input slots, NodeT::inputs() (a std::tie of its members,
//      in the order of `inputs`), for forward to read;
//   3. sizes the node's value to out_shape: a node the tape reuses keeps its buffer, so a steady
//      step allocates nothing here;
//   4. runs forward(node), which sets the node's parameters and writes node.value;
//   5. a free-standing node then drops its inputs (release_inputs); a recorded one keeps them
//      for backward.
//
//   return make_op<MatmulNode<T, 2, 2>>(shape, [&](auto& n) { n.m = m; ...; n.forward(); }, a, b);
template <class NodeT, class Shape, class Forward, class... Inputs>
Var<typename NodeT::value_type, NodeT::rank> make_op(const Shape& out_shape, Forward&& forward, const Inputs&... inputs) {
    auto node = make_node<NodeT>((input_requires_grad(inputs) || ...));
    node->inputs() = std::tie(inputs...);
    if (!std::ranges::equal(out_shape, node->value.shape())) node->value.resize(out_shape);
    forward(*node);
    if (!node->requires_grad) node->release_inputs();
    return Var<typename NodeT::value_type, NodeT::rank>(std::move(node));
}

// What a backward keeps of the gradients of intermediate results (the outputs of ops).
struct BackwardOptions {
    // true: every op output's gradient stays after the backward (Var::grad(), `xgrad inspect` and
    // the tape listings read them). false: each is given back as soon as its op has passed it on,
    // as PyTorch frees them (Var::grad() of an intermediate then reads zeros): what a training loop
    // wants; a GPT-2 124M step at T = 1024 holds about 0.9 GB less. Leaves accumulate either way.
    bool keep_intermediate_grads = true;
};

namespace detail {

// Seeds y's gradient element i with seed(i) (a leaf accumulates it) and walks the tape back from y.
template <Real T, std::size_t N, class Seed>
void backward_seeded(const Var<T, N>& y, Seed seed, const BackwardOptions& options) {
    auto* n = y.node();
    if (!n->requires_grad)
        throw tape_error("backward: the output " + shape_str(y.shape()) +
                         " does not require grad (no parameter reaches it, or it was computed under NoGrad)");
    if (n->is_leaf) {
        T* g = n->grad_buffer().data();
        for (std::size_t i = 0; i < y.size(); ++i) g[i] += seed(i);
        return;
    }
    Tape& t = tape();
    if (!t.holds(n))
        throw tape_error(std::string("backward: the output (op ") + n->op_name() +
                         ") is not on the current tape (was the tape cleared after it was recorded?)");
    t.reset_grads(n->tape_index);
    T* g = n->grad_buffer().data();
    for (std::size_t i = 0; i < y.size(); ++i) g[i] = seed(i);
    t.run_backward(n->tape_index, !options.keep_intermediate_grads);
}

}  // namespace detail

// Vector-Jacobian product: seeds y's gradient with grad_y and walks the tape back from y.
// Leaves accumulate; intermediate gradients start from zero on every call.
template <Real T, std::size_t N>
void backward(const Var<T, N>& y, const xt::xtensor<T, N>& grad_y, const BackwardOptions& options = {}) {
    if (!y) throw tape_error("backward: the output Var is empty");
    if (y.node()->stale) throw tape_error("backward: the output was recorded on a tape that has since been cleared");
    if (y.shape() != grad_y.shape())
        throw shape_error("backward: grad_y has shape " + shape_str(grad_y.shape()) + " but the output has shape " +
                          shape_str(y.shape()));
    if (&grad_y == y.node()->grad_storage() && !y.is_leaf()) {  // backward(y, y.grad()): copy the seed first
        const xt::xtensor<T, N> copy = grad_y;
        detail::backward_seeded(y, [&](std::size_t i) { return copy.data()[i]; }, options);
        return;
    }
    detail::backward_seeded(y, [&](std::size_t i) { return grad_y.data()[i]; }, options);
}

// backward from a loss holding a single element (seed 1).
template <Real T, std::size_t N>
void backward(const Var<T, N>& loss, const BackwardOptions& options = {}) {
    if (!loss) throw tape_error("backward: the loss Var is empty");
    if (loss.node()->stale) throw tape_error("backward: the output was recorded on a tape that has since been cleared");
    if (loss.size() != 1)
        throw tape_error("backward: the loss has shape " + shape_str(loss.shape()) +
                         "; a non-scalar output needs an explicit grad_y: backward(y, grad_y)");
    detail::backward_seeded(loss, [](std::size_t) { return T(1); }, options);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the storage of every node of rank 0 to 4, its
// leaves, and backward from it.
namespace xgrad {
#define XGRAD_DETAIL_NODE_COMPILED(EXTERN, T, N)                                     \
    EXTERN template class TensorNode<T, N>;                                         \
    EXTERN template class LeafNode<T, N>;                                           \
    EXTERN template Var<T, N> detail::make_leaf<T, N>(xt::xtensor<T, N>&&, bool);  \
    EXTERN template void backward<T, N>(const Var<T, N>&, const BackwardOptions&);
#define XGRAD_DETAIL_NODES_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_0_TO_4(XGRAD_DETAIL_NODE_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_NODES_COMPILED)
#undef XGRAD_DETAIL_NODES_COMPILED
#undef XGRAD_DETAIL_NODE_COMPILED
}  // namespace xgrad
