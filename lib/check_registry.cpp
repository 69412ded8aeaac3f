// The gradcheck registry's search by op name (xgrad/check/registry.hpp), with PCRE2, which the BPE
// tokenizer uses too: a compiled library, where std::regex took 4 s of the unit's build.
#include <memory>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "xgrad/check/registry.hpp"
#include "xgrad/core/error.hpp"

namespace xgrad {

std::vector<const GradcheckCase*> find_gradchecks(const std::string& op_regex) {
    const auto error_text = [](int code) {
        PCRE2_UCHAR text[256];
        pcre2_get_error_message(code, text, sizeof text);
        return std::string(reinterpret_cast<const char*>(text));
    };
    int code = 0;
    PCRE2_SIZE offset = 0;
    const std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> pattern(
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(op_regex.data()), op_regex.size(), 0, &code, &offset, nullptr),
        pcre2_code_free);
    if (!pattern)
        throw value_error("find_gradchecks: '" + op_regex + "' is not a valid regular expression: " + error_text(code) +
                          " at offset " + std::to_string(offset));
    const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
        pcre2_match_data_create_from_pattern(pattern.get(), nullptr), pcre2_match_data_free);
    std::vector<const GradcheckCase*> found;
    for (const auto& c : gradcheck_registry()) {
        const int rc = pcre2_match(pattern.get(), reinterpret_cast<PCRE2_SPTR>(c.op.data()), c.op.size(), 0, 0,
                                   match.get(), nullptr);
        if (rc >= 0) found.push_back(&c);
        else if (rc != PCRE2_ERROR_NOMATCH)
            throw value_error("find_gradchecks: matching '" + op_regex + "' against '" + c.op + "': " + error_text(rc));
    }
    return found;
}

}  // namespace xgrad
