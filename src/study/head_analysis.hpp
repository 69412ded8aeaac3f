// Scores and a label for every attention head, from its weights on many sequences (`xgrad heads`).
//
//   weights (N, H, L, S): N sequences, H heads, query i's distribution over the S keys
//   offset mass(δ)     mean over queries of the weight on key i + δ     -> the dominant offset δ*
//   first-token mass   mean over queries of the weight on key 0
//   uniformity         mean over queries of entropy / log(allowed keys) (1 = spread evenly)
// Queries with a single allowed key (query 0 under a causal mask) say nothing about a head and are
// left out; δ counts only where at least half the queries (and two) have key i + δ: the copy
// offset -L/2 just qualifies, far offsets seen by a few queries do not.
#pragma once
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <xtensor/xtensor.hpp>

namespace xgrad::cli {

struct HeadScores {
    long offset = 0;  // δ*: the offset holding the most mass
    double offset_mass = 0, first_token_mass = 0, uniformity = 0;
    std::string label;
};

// One head's row of `xgrad heads` (study/heads.hpp), also shown by `xgrad explore`.
struct HeadReport {
    std::size_t layer = 0, head = 0;
    HeadScores scores;
    std::string label;                        // scores.label, or "induction" / "previous token" for a GPT
    std::optional<double> previous_token;     // GPT: mean weight on key i - 1
    std::optional<double> induction;          // GPT: Olsson et al.'s score on repeated random tokens
    std::optional<double> ablation_loss;      // held-out loss with the head removed, minus the full model's
    std::optional<double> ablation_accuracy;  // copy task: the same for token accuracy
};

// The label of a head: an offset head when δ* holds at least half the mass (self at 0, previous
// token at -1, copy at -copy_length), else first-token or uniform when those reach 0.5 / 0.9, else "other".
inline std::string head_label(const HeadScores& s, long copy_length) {
    if (s.offset_mass >= 0.5) {
        if (s.offset == 0) return "self (offset 0)";
        if (s.offset == -1) return "previous token (offset -1)";
        if (s.offset == -copy_length) return fmt::format("copy (offset {})", s.offset);
        return fmt::format("offset {}", s.offset);
    }
    if (s.first_token_mass >= 0.5) return "first token";
    if (s.uniformity >= 0.9) return "uniform";
    return "other";
}

// Scores of every head; `causal`: query i sees keys 0..i only (else all S).
template <class W>
std::vector<HeadScores> score_heads(const W& w, bool causal, long copy_length) {
    const std::size_t N = w.shape(0), H = w.shape(1), L = w.shape(2), S = w.shape(3);
    const auto allowed = [&](std::size_t i) { return causal ? std::min(i + 1, S) : S; };
    std::vector<HeadScores> out(H);
    for (std::size_t h = 0; h < H; ++h) {
        std::vector<double> mass(2 * S - 1, 0.0);  // index δ + S - 1
        std::vector<std::size_t> count(2 * S - 1, 0);
        double first = 0, uniform = 0;
        std::size_t queries = 0;
        for (std::size_t n = 0; n < N; ++n)
            for (std::size_t i = 0; i < L; ++i) {
                const std::size_t keys = allowed(i);
                if (keys < 2) continue;
                double entropy = 0;
                for (std::size_t j = 0; j < keys; ++j) {
                    const double p = w(n, h, i, j);
                    if (p > 0) entropy -= p * std::log(p);
                    mass[j + S - 1 - i] += p;
                    count[j + S - 1 - i] += 1;
                }
                first += w(n, h, i, 0);
                uniform += entropy / std::log(double(keys));
                ++queries;
            }
        HeadScores& s = out[h];
        const std::size_t enough = std::max<std::size_t>(2, N * L / 2);
        for (std::size_t k = 0; k < mass.size(); ++k)
            if (count[k] >= enough && mass[k] / double(count[k]) > s.offset_mass) {
                s.offset_mass = mass[k] / double(count[k]);
                s.offset = long(k) - long(S) + 1;
            }
        s.first_token_mass = queries ? first / double(queries) : 0;
        s.uniformity = queries ? uniform / double(queries) : 0;
        s.label = head_label(s, copy_length);
    }
    return out;
}

// A GPT head's two scores (study/gpt_heads.cpp), from its weights w (N, H, T, T) on N sequences:
//   previous-token score  on text: the mean over queries i >= 1 of the weight on key i - 1
//   induction score       (Olsson et al. 2022) on random tokens r_0 .. r_{R-1} written twice: the
//                         mean over k < R - 1 of the weight from query R + k (r_k's second
//                         occurrence) to key k + 1 (what followed r_k the first time)
template <class W>
double previous_token_score(const W& w, std::size_t h) {
    const std::size_t N = w.shape(0), T = w.shape(2);
    double sum = 0;
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t i = 1; i < T; ++i) sum += w(n, h, i, i - 1);
    return T > 1 ? sum / double(N * (T - 1)) : 0;
}
template <class W>
double induction_score(const W& w, std::size_t h, std::size_t R) {
    const std::size_t N = w.shape(0);
    double sum = 0;
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k + 1 < R; ++k) sum += w(n, h, R + k, k + 1);
    return R > 1 ? sum / double(N * (R - 1)) : 0;
}
// "induction" at an induction score of 0.3 or more that is above the head's previous-token score
// (a head gets the label it fits better), "previous token" at 0.5 or more, else head_label's.
inline std::string gpt_head_label(const HeadScores& s, double previous, double induction) {
    if (induction >= 0.3 && induction > previous) return "induction";
    if (previous >= 0.5) return "previous token";
    return head_label(s, 0);
}

}  // namespace xgrad::cli
