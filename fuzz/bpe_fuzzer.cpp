// libFuzzer harness: text::BpeModel::parse on arbitrary vocabulary and merges files (the input up to
// its first zero byte is vocab.json, the rest merges.txt); a model it accepts encodes the input and
// decodes the ids back to it (with U+FFFD for what is not UTF-8).
// xgrad::error is the expected answer to bad input; any other exception escapes and is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <xgrad/text/tokenizer.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::size_t zero = input.find('\0');
    const std::string_view vocab = input.substr(0, zero), merges = zero == input.npos ? "" : input.substr(zero + 1);
    std::shared_ptr<const xgrad::text::BpeModel> model;
    try {
        model = xgrad::text::BpeModel::parse(vocab, merges, "vocab.json", "merges.txt");
    } catch (const xgrad::error&) {
        return 0;
    }
    const xgrad::text::Tokenizer tok(model);
    for (auto special : {xgrad::text::Special::as_text, xgrad::text::Special::recognized}) {
        try {
            const auto ids = tok.encode(input, "fuzz", special);
            if (tok.decode(ids) != xgrad::text::replace_invalid_utf8(input)) std::abort();
        } catch (const xgrad::value_error&) {
            if (special == xgrad::text::Special::as_text || model->id_of("<|endoftext|>")) std::abort();
        }
    }
    return 0;
}
