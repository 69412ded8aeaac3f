// An expression's formula as text (a node's label) and reshape's target: code without templates
// that core/expr.hpp and ops/shape.hpp declare, compiled once here instead of in every unit.
#include <string>

#include "xgrad/core/expr.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::detail {

std::string formula_text(const FormulaToken*& at) {
    const FormulaToken token = *at++;
    std::string text = token.name;
    for (std::size_t i = 0; i < token.operands; ++i) text += (i ? ", " : "(") + formula_text(at);
    return token.operands ? text + ")" : text;
}

void reshape_target(std::span<const std::size_t> from, std::size_t count, std::span<const long> to,
                    std::span<std::size_t> out) {
    const std::size_t M = to.size();
    std::size_t known = 1, infer = M;  // known: product of the given dims
    for (std::size_t k = 0; k < M; ++k) {
        if (to[k] == -1) {
            if (infer != M)
                throw value_error("reshape: only one dimension can be -1, got " + shape_str(to));
            infer = k;
        } else if (to[k] < 0) {
            throw value_error("reshape: invalid dimension " + long_str(to[k]) + " in " + shape_str(to));
        } else {
            out[k] = static_cast<std::size_t>(to[k]);
        }
    }
    if (infer != M) out[infer] = 1;  // counts as 1 until inferred
    if (!checked_numel(out, known))
        throw shape_error("reshape: target shape " + shape_str(to) + " for x of shape " + shape_str(from) +
                          " has more elements than size_t can count");
    if (infer != M) {
        if (known == 0 || count % known != 0)
            throw shape_error("reshape: cannot reshape x of shape " + shape_str(from) + " (" + std::to_string(count) +
                              " elements) into " + shape_str(to));
        out[infer] = count / known;
    } else if (known != count) {
        throw shape_error("reshape: cannot reshape x of shape " + shape_str(from) + " (" + std::to_string(count) +
                          " elements) into " + shape_str(to) + " (" + std::to_string(known) + " elements)");
    }
}

}  // namespace xgrad::detail
