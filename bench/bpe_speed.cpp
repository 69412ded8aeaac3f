// GPT-2's BPE encoding speed on one thread (bench/bpe_compare.sh runs it beside the npm package
// gpt-tokenizer):   bpe_speed VOCAB_FOLDER TEXT_FILE [REPEATS]
// Prints the load time, the first encoding (an empty cache) and the best of REPEATS more.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "xgrad/io/file.hpp"
#include "xgrad/text/tokenizer.hpp"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bpe_speed VOCAB_FOLDER TEXT_FILE [REPEATS]\n");
        return 2;
    }
    using clock = std::chrono::steady_clock;
    const auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
    const auto mapped = xgrad::io::MappedFile::open(argv[2]);
    const std::string text(reinterpret_cast<const char*>(mapped.bytes().data()), mapped.bytes().size());
    const double mb = double(text.size()) / 1e6;

    const auto t0 = clock::now();
    const auto tok = xgrad::text::Tokenizer::bpe_folder(argv[1]);
    const auto t1 = clock::now();
    std::size_t tokens = tok.encode(text).size();
    const auto t2 = clock::now();
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto a = clock::now();
        tokens = tok.encode(text).size();
        best = std::min(best, seconds(a, clock::now()));
    }
    const double cold = seconds(t1, t2);
    std::printf("xgrad   load %.3f s  first %.3f s (%.1f MB/s)  best of %d %.3f s (%.1f MB/s)  %zu tokens\n",
                seconds(t0, t1), cold, mb / cold, repeats, best, mb / best, tokens);
    return 0;
}
