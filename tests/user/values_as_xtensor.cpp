// A user's program: a Var's value() and grad() handed to xtensor's functions and algorithms and to
// functions of the user's own that take xt::xtensor, as the docs show them (README, getting-started,
// api.md's "Values"). It must compile as written and print nothing but "ok".
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>

#include <xgrad/xgrad.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

using namespace xgrad;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (!ok) ++failures, std::cerr << "FAILED: " << what << '\n';
}

// A function template of the user's, deducing the element type and rank.
template <class T, std::size_t N>
T largest(const xt::xtensor<T, N>& a) {
    return *std::max_element(a.begin(), a.end());
}
// And one written for a single type.
double total(const xt::xtensor<double, 2>& a) { return std::accumulate(a.begin(), a.end(), 0.0); }
// One that writes into a tensor of the user's.
template <class T, std::size_t N>
void scale_into(const xt::xtensor<T, N>& a, T k, xt::xtensor<T, N>& out) {
    out = a * k;
}

}  // namespace

int main() {
    // logits (B 2, T 3, V 4)
    const xt::xtensor<double, 3> raw = {{{0.1, 2.0, 0.3, 0.4}, {1.5, 0.2, 0.1, 0.0}, {0.0, 0.0, 0.0, 3.0}},
                                        {{0.9, 0.8, 0.7, 0.6}, {0.0, 0.5, 2.5, 0.1}, {4.0, 1.0, 1.0, 1.0}}};
    auto logits = parameter(raw);
    auto probs = softmax(logits, -1);

    // xtensor's algorithms on a value
    const xt::xtensor<std::size_t, 2> best = xt::argmax(logits.value(), 2);
    expect(best == xt::xtensor<std::size_t, 2>{{1, 0, 3}, {0, 2, 0}}, "argmax over the vocabulary");
    expect(xt::argmax(probs.value(), 2)() == 1, "argmax of a result, first element");
    const xt::xtensor<double, 3> sorted = xt::sort(logits.value(), 2);
    expect(sorted(0, 0, 3) == 2.0 && sorted(1, 2, 0) == 1.0, "sort along the last axis");
    expect(xt::amax(logits.value())() == 4.0, "amax");
    expect(xt::allclose(xt::sum(probs.value(), {2}), xt::ones<double>({2, 3})), "allclose of row sums");
    const xt::xtensor<double, 1> row = xt::view(logits.value(), 1, 2, xt::all());
    expect(row == xt::xtensor<double, 1>{4.0, 1.0, 1.0, 1.0}, "view of one position");
    const auto flat = xt::adapt(logits.value().data(), logits.size(), xt::no_ownership(),
                                std::array<std::size_t, 1>{logits.size()});
    expect(flat(23) == 1.0, "adapt over the value's buffer");
    std::ostringstream printed;
    printed << xt::view(probs.value(), 0, 0, xt::range(0, 2));
    expect(printed.str().front() == '{', "printing with xio");

    // the user's own functions
    expect(largest(logits.value()) == 4.0, "a function template taking const xt::xtensor<T, N>&");
    xt::xtensor<double, 3> doubled;
    scale_into(logits.value(), 2.0, doubled);
    expect(doubled(1, 2, 0) == 8.0, "a template writing into an xt::xtensor of the user's");

    // gradients behave the same way
    auto loss = sum(probs * constant(raw));
    backward(loss);
    expect(largest(logits.grad()) > 0.0, "grad() to a function template");
    expect(xt::argmin(logits.grad(), 2).size() == 6, "argmin of a gradient");
    auto w = parameter(xt::xtensor<double, 2>{{1, 2}, {3, 4}});
    expect(total(w.value()) == 10.0, "a non-template function taking const xt::xtensor<double, 2>&");
    backward(sum(w * w));
    expect(total(w.grad()) == 20.0, "grad() to a non-template function");

    // in place, as optimizers and initializers do
    w.value() *= 0.5;
    w.value()(0, 0) = 7;
    std::transform(w.value().begin(), w.value().end(), w.value().begin(), [](double v) { return v + 1; });
    expect(w.value() == xt::xtensor<double, 2>{{8, 2}, {2.5, 3}}, "writes in place");
    xt::xtensor<double, 2> copy = w.value();
    copy(0, 0) = 0;
    expect(w.value()(0, 0) == 8, "a copy is a copy");

    if (failures) return 1;
    std::cout << "ok\n";
    return 0;
}
