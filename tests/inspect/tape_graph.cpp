// Tape inspection: the recorded graph, its listings and dot output, node names, and the scores
// inside attention_weights checked against an unfused matmul + softmax.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

#include "xgrad/xgrad.hpp"

namespace test_inspect_tape_graph {

using namespace xgrad;
using T2 = xt::xtensor<double, 2>;
using T3 = xt::xtensor<double, 3>;

// The columns of a listing row: cells are separated by two or more spaces.
std::vector<std::string> columns(const std::string& line) {
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == ' ' && i + 1 < line.size() && line[i + 1] == ' ') {
            if (!cell.empty()) cells.push_back(cell);
            cell.clear();
            while (i + 1 < line.size() && line[i + 1] == ' ') ++i;
        } else if (!(line[i] == ' ' && cell.empty())) {
            cell += line[i];
        }
    }
    if (!cell.empty()) cells.push_back(cell);
    return cells;
}

std::vector<std::vector<std::string>> rows_of(const std::string& text) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) rows.push_back(columns(line));
    return rows;
}

TEST_CASE("TapeGraph: leaves in order of first use, ops in tape order, inputs and names") {
    Tape t;
    TapeScope scope(t);
    auto a = named(parameter(T2{{1, -2}, {3, 4}}), "a");
    auto c = constant(T2{{2, 2}, {2, -3}});
    Var<double, 2> y = named(eval(a * c), "y");
    auto s = sum(y);
    backward(s);

    const TapeGraph g(t);
    REQUIRE(g.leaf_count() == 2);
    REQUIRE(g.op_count() == 2);
    const auto& e = g.entries();
    CHECK(e[0].name == "a");
    CHECK(e[1].name == "leaf 1");
    CHECK(e[2].name == "y");
    CHECK(e[2].inputs == std::vector<std::size_t>{0, 1});
    CHECK(e[3].name == "#1");
    CHECK(e[3].inputs == std::vector<std::size_t>{2});
    CHECK(&g.op(1) == &e[3]);

    std::ostringstream fwd;
    print_forward(fwd, g);
    const auto f = rows_of(fwd.str());
    REQUIRE(f.size() == 6);
    CHECK(f[0] == std::vector<std::string>{"forward: 2 leaves, 2 ops on the tape"});
    CHECK(f[1] == std::vector<std::string>{"#", "op", "name", "shape", "inputs"});
    CHECK(f[2] == std::vector<std::string>{"-", "parameter", "a", "(2, 2)"});
    CHECK(f[3] == std::vector<std::string>{"-", "constant", "leaf 1", "(2, 2)"});
    CHECK(f[4] == std::vector<std::string>{"0", "elementwise mul(x, x)", "y", "(2, 2)", "a, leaf 1"});
    CHECK(f[5] == std::vector<std::string>{"1", "sum", "#1", "()", "y"});

    // d sum(a ⊙ c)/dy = 1, d/da = c (max |c| = 3); the constant gets nothing
    std::ostringstream bwd;
    print_backward(bwd, g);
    const auto b = rows_of(bwd.str());
    REQUIRE(b.size() == 8);
    CHECK(b[0] == std::vector<std::string>{"backward: 2 of 2 ops reached, last recorded first"});
    CHECK(b[2] == std::vector<std::string>{"1", "sum", "#1", "()", "1.00e+00", "y"});
    CHECK(b[3] == std::vector<std::string>{"0", "elementwise mul(x, x)", "y", "(2, 2)", "1.00e+00", "a"});
    CHECK(b[4] == std::vector<std::string>{"leaf gradients:"});
    CHECK(b[6] == std::vector<std::string>{"a", "parameter", "(2, 2)", "3.00e+00"});
    CHECK(b[7] == std::vector<std::string>{"leaf 1", "constant", "none", "-"});

    std::ostringstream dot;
    write_dot(dot, g);
    const std::string d = dot.str();
    CHECK(d.rfind("digraph tape {", 0) == 0);
    CHECK(d.find("  n0 -> n2;\n") != std::string::npos);
    CHECK(d.find("  n1 -> n2 [style=dashed];\n") != std::string::npos);  // no gradient into a constant
    CHECK(d.find("  n2 -> n3;\n") != std::string::npos);
    CHECK(d.find("n2 [shape=ellipse, label=\"#0 elementwise mul(x, x)\\ny (2, 2)\"]") != std::string::npos);
    CHECK(d.find("n0 [shape=box, style=filled") != std::string::npos);
    CHECK(d.substr(d.size() - 2) == "}\n");
}

TEST_CASE("a reused tape slot forgets the name of the previous step") {
    Tape t;
    TapeScope scope(t);
    auto a = parameter(T2{{1, 2}});
    {
        auto y = named(sum(a), "loss");
        CHECK(TapeGraph(t).op(0).name == "loss");
    }
    t.clear();
    auto y = sum(a);
    REQUIRE(t.size() == 1);
    CHECK(&t[0] == y.node());  // the same slot, reused
    CHECK(TapeGraph(t).op(0).name == "#0");
}

TEST_CASE("MultiheadAttention names its nodes: qkv, weights, context, output, attn_weights") {
    Tape t;
    TapeScope scope(t);
    Generator gen(3);
    nn::MultiheadAttention<double> mha({8, 2}, gen);
    mha.training = false;
    auto x = parameter(randn<3>({5, 2, 8}, 4));
    auto r = mha.forward(x, x, x);
    backward(r.output, xt::xtensor<double, 3>(randn<3>({5, 2, 8}, 5)));
    const TapeGraph g(t);
    std::vector<std::string> names, ops;
    for (std::size_t i = 0; i < g.op_count(); ++i) names.push_back(g.op(i).name), ops.push_back(g.op(i).node->op_name());
    CHECK(names == std::vector<std::string>{"qkv", "weights", "context", "output", "#4", "attn_weights"});
    CHECK(ops == std::vector<std::string>{"linear", "attention_weights", "attention_context", "linear", "reshape", "mean"});
    CHECK(g.op(1).inputs == std::vector<std::size_t>{g.leaf_count(), g.leaf_count()});  // q and k: both from qkv
}

// softmax of one row with -inf entries giving 0
std::vector<double> softmax_row(const double* s, std::size_t n) {
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (std::size_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    std::vector<double> p(n);
    for (std::size_t j = 0; j < n; ++j) z += (p[j] = std::exp(s[j] - m));
    for (double& v : p) v /= z;
    return p;
}

TEST_CASE("the scores inside attention_weights: values and gradient equal an unfused matmul + softmax") {
    const std::size_t L = 3, S = 4, D = 5;
    const T3 qv = randn<3>({L, 1, D}, 7), kv = randn<3>({S, 1, D}, 8);
    const T3 r = randn<3>({1, L, S}, 9);  // loss = Σ weights ⊙ r
    const double scale = 1 / std::sqrt(double(D));

    // fused: attention_weights on one head; read its internal scores
    Tape t;
    TapeScope scope(t);
    auto q = parameter(qv), k = parameter(kv);
    using Layout = nn::detail::HeadLayout;
    const auto w = nn::detail::attention_weights<double>({q, Layout::of({L, 1, D}, false, 1, D, 0)},
                                                         {k, Layout::of({S, 1, D}, false, 1, D, 0)}, scale,
                                                         [](auto&) {});
    backward(sum(w * constant(r)));
    T3 scores, dscores;
    int calls = 0;
    w.node()->for_each_internal([&](const char* name, const char*, const ArrayView& v, const ArrayView& gv) {
        ++calls;
        CHECK(std::string(name) == "scores");
        REQUIRE(v.shape == std::vector<std::size_t>{1, L, S});
        REQUIRE(gv.data != nullptr);
        scores = xt::adapt(static_cast<const double*>(v.data), L * S, xt::no_ownership(), std::array<std::size_t, 3>{1, L, S});
        dscores = xt::adapt(static_cast<const double*>(gv.data), L * S, xt::no_ownership(), std::array<std::size_t, 3>{1, L, S});
    });
    CHECK(calls == 1);

    // unfused: S = scale · Q Kᵀ as its own node, softmax, the same loss
    Tape t2;
    TapeScope scope2(t2);
    auto q2 = parameter(T2(xt::view(qv, xt::all(), 0, xt::all())));
    auto k2 = parameter(T2(xt::view(kv, xt::all(), 0, xt::all())));
    Var<double, 2> s2 = matmul(q2, transpose(k2, 0, 1)) * scale;
    auto p2 = softmax(s2, -1);
    backward(sum(p2 * constant(T2(xt::view(r, 0)))));
    for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) {
            CHECK(scores(0, i, j) == doctest::Approx(s2.value()(i, j)).epsilon(1e-12));
            CHECK(dscores(0, i, j) == doctest::Approx(s2.grad()(i, j)).epsilon(1e-10));
            CHECK(w.value()(0, i, j) == doctest::Approx(p2.value()(i, j)).epsilon(1e-12));
        }
    CHECK(xt::amax(xt::abs(dscores))() > 1e-3);
}

TEST_CASE("the scores of a masked MultiheadAttention: -inf where ignored, a zero gradient there") {
    Tape t;
    TapeScope scope(t);
    Generator gen(11);
    nn::MultiheadAttention<double> mha({6, 3}, gen);
    mha.training = false;
    auto x = parameter(randn<3>({4, 2, 6}, 12));
    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>{{false, false, true, false}, {false, true, true, false}});
    auto r = mha.forward(x, x, x, fo);
    backward(r.output, xt::xtensor<double, 3>(randn<3>({4, 2, 6}, 13)));
    const TapeGraph g(t);
    const Node* weights = g.op(1).node;
    REQUIRE(g.op(1).name == "weights");
    const auto& P = dynamic_cast<const TensorNode<double, 3>&>(*weights).value;
    int calls = 0;
    weights->for_each_internal([&](const char*, const char*, const ArrayView& v, const ArrayView& gv) {
        ++calls;
        REQUIRE(v.shape == std::vector<std::size_t>{6, 4, 4});  // (N·H, L, S)
        const auto* s = static_cast<const double*>(v.data);
        const auto* ds = static_cast<const double*>(gv.data);
        for (std::size_t bh = 0; bh < 6; ++bh)
            for (std::size_t i = 0; i < 4; ++i) {
                const std::size_t row = (bh * 4 + i) * 4;
                const auto p = softmax_row(s + row, 4);
                double grad_sum = 0;
                for (std::size_t j = 0; j < 4; ++j) {
                    const bool ignored = bh / 3 == 0 ? j == 2 : (j == 1 || j == 2);
                    CHECK((std::isinf(s[row + j]) && s[row + j] < 0) == ignored);
                    if (ignored) CHECK(ds[row + j] == 0.0);
                    CHECK(p[j] == doctest::Approx(P.data()[row + j]).epsilon(1e-12));
                    grad_sum += ds[row + j];
                }
                CHECK(grad_sum == doctest::Approx(0).scale(1));  // a softmax's input gradient sums to 0 per row
            }
    });
    CHECK(calls == 1);
}

}  // namespace test_inspect_tape_graph
