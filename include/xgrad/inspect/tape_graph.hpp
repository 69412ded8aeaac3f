// Looking at a tape: which ops one forward recorded, on what, and what its backward computed.
// The tape printer that `xgrad inspect` drives; the module paths that name the nodes are
// core/names.hpp, and the fused attention ops recompute their internals on request
// (nn/attention/fused.hpp).
//
//   TapeGraph g(tape());            // after a forward (and a backward), before tape().clear()
//   print_forward(std::cout, g);    // every op in recording order: op, name, shape, inputs
//   print_backward(std::cout, g);   // the ops a gradient reached, in the order backward ran them
//   write_dot(file, g);             // the graph for Graphviz
//
// Names come from named() (MultiheadAttention names qkv, weights, context, output, ...), prefixed
// by the module path of the open NameScopes ("decoder.layers.1.multihead_attn.output"); an unnamed
// op is "#i" (its tape position), an unnamed leaf "leaf i".
#pragma once
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "xgrad/core/tape.hpp"

namespace xgrad {

// The recorded graph: leaves (in order of first use) and then the ops in tape order. It points
// into the tape: build it after the forward (and backward), use it before tape().clear().
// Compiled in libxgrad (lib/tape_graph.cpp).
class TapeGraph {
public:
    struct Entry {
        const Node* node;
        bool is_op;                       // on the tape (else a leaf: parameter or constant)
        std::vector<std::size_t> inputs;  // indices into entries()
        std::string name;
    };

    explicit TapeGraph(const Tape& tape);

    const std::vector<Entry>& entries() const { return entries_; }
    std::size_t leaf_count() const { return leaves_; }
    std::size_t op_count() const { return entries_.size() - leaves_; }
    // The entry of op i (tape position i).
    const Entry& op(std::size_t i) const { return entries_.at(leaves_ + i); }

private:
    std::vector<Entry> entries_;
    std::size_t leaves_ = 0;
};

// The forward: leaves, then every op in recording order with its name, shape and inputs; a fused
// op's internal steps (the scores inside attention_weights) are listed under it.
void print_forward(std::ostream& os, const TapeGraph& g);

// The backward: the ops a gradient reached, last recorded first (the order backward runs them),
// each with the gradient it received and the gradients it passed to its inputs; then the leaves'
// gradients. max|g| is the largest magnitude in the gradient.
void print_backward(std::ostream& os, const TapeGraph& g);

// The graph in Graphviz dot: leaves as boxes (parameters filled), ops as ellipses labelled with
// tape position, op, name and shape (grey when no gradient reached them); an edge input -> op,
// dashed when no gradient flows along it.
void write_dot(std::ostream& os, const TapeGraph& g);

}  // namespace xgrad
