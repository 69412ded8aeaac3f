// `xgrad tokenize --model M`: standard input's text as token ids (comma-separated, one line), or
// with --decode, ids (comma-separated) back to text. M is a folder with GPT-2's BPE files
// (vocab.json + merges.txt, or encoder.json + vocab.bpe: nothing else is read), a folder `train gpt`
// or `export` wrote (xgrad_tokenizer.json for byte and character vocabularies), a SentencePiece
// tokenizer.model (Llama's; or a folder holding one), or a `train gpt` or `train llama` checkpoint.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "tasks/gpt.hpp"

namespace xgrad::cli {
namespace {

struct TokenizeOptions {
    std::string model;
    bool decode = false, special = false;
};

// "12, 7,\n3" -> {12, 7, 3}; value_error naming the entry that is not an id.
std::vector<std::int64_t> parse_ids(const std::string& text) {
    std::vector<std::int64_t> ids;
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) return ids;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        item.erase(0, item.find_first_not_of(" \t\r\n"));
        item.erase(item.find_last_not_of(" \t\r\n") + 1);
        const bool digits = !item.empty() && item.size() < 19 && item.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) throw value_error("standard input: '" + item + "' is not a token id (ids are comma-separated integers >= 0)");
        ids.push_back(std::stoll(item));
    }
    return ids;
}

int tokenize(const TokenizeOptions& o) {
    const text::Tokenizer tok = gpt_task::tokenizer_of(o.model);
    std::cin >> std::noskipws;
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (o.decode) {
        const std::string bytes = tok.decode(parse_ids(input));
        // a terminal gets U+FFFD where a cut left bytes that are not UTF-8; a pipe gets the bytes
        const std::string shown = ::isatty(STDOUT_FILENO) ? text::replace_invalid_utf8(bytes) : bytes;
        std::fwrite(shown.data(), 1, shown.size(), stdout);
        return 0;
    }
    const auto ids = tok.encode(input, "standard input", o.special ? text::Special::recognized : text::Special::as_text);
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
    fmt::print("{}\n", line);
    return 0;
}

}  // namespace

void setup_tokenize(CLI::App& cmd) {
    static TokenizeOptions o;
    cmd.add_option("--model", o.model,
                   "a folder with GPT-2's BPE files (vocab.json + merges.txt, or encoder.json + vocab.bpe), "
                   "xgrad_tokenizer.json or tokenizer.model; a SentencePiece tokenizer.model; or a `train gpt` or "
                   "`train llama` checkpoint")
        ->required()
        ->check(CLI::ExistingPath);
    cmd.add_flag("--decode", o.decode, "read comma-separated ids, write their text (U+FFFD for broken UTF-8 at a terminal)");
    cmd.add_flag("--special", o.special, "read <|endoftext|> in the text as its one token (BPE)");
    cmd.callback([] { selected_action() = [] { return tokenize(o); }; });
}

}  // namespace xgrad::cli
