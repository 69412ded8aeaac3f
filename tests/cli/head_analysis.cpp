// `xgrad heads`' scores and labels on attention maps built to be one kind of head each.
#include <doctest/doctest.h>

#include <cmath>

#include "study/head_analysis.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_head_analysis {

using namespace xgrad::cli;

TEST_CASE("head analysis: previous-token, copy, first-token and uniform heads are told apart") {
    constexpr std::size_t N = 2, H = 5, L = 8, n = 4;  // copy task of 4 tokens: queries and keys 0..7, causal
    xt::xtensor<double, 4> w = xt::zeros<double>({N, H, L, L});
    for (std::size_t s = 0; s < N; ++s)
        for (std::size_t i = 0; i < L; ++i) {
            w(s, 0, i, i == 0 ? 0 : i - 1) = 1;  // previous token
            if (i >= n) {
                w(s, 1, i, i - n) = 1;  // copy: the second half reads the first
            } else {
                for (std::size_t j = 0; j <= i; ++j) w(s, 1, i, j) = 1.0 / double(i + 1);
            }
            w(s, 2, i, 0) = 1;                                                       // first token
            for (std::size_t j = 0; j <= i; ++j) w(s, 3, i, j) = 1.0 / double(i + 1);  // uniform
            w(s, 4, i, i) = 1;                                                       // self
        }
    const auto scores = score_heads(w, true, long(n));
    REQUIRE(scores.size() == H);
    CHECK(scores[0].label == "previous token (offset -1)");
    CHECK(scores[0].offset == -1);
    CHECK(scores[0].offset_mass == doctest::Approx(1.0));
    CHECK(scores[1].label == "copy (offset -4)");
    CHECK(scores[1].offset_mass == doctest::Approx(1.0));
    CHECK(scores[2].label == "first token");
    CHECK(scores[2].first_token_mass == doctest::Approx(1.0));
    CHECK(scores[2].offset_mass == doctest::Approx(0.25));  // offset -4: queries 4..7, one of them on key 0
    CHECK(scores[3].label == "uniform");
    CHECK(scores[3].uniformity == doctest::Approx(1.0));
    // query 1 to 7 put 1/(i+1) on key 0
    CHECK(scores[3].first_token_mass == doctest::Approx((1 / 2. + 1 / 3. + 1 / 4. + 1 / 5. + 1 / 6. + 1 / 7. + 1 / 8.) / 7));
    CHECK(scores[4].label == "self (offset 0)");
    CHECK(scores[4].uniformity == doctest::Approx(0.0));
}

TEST_CASE("head analysis: labels follow the thresholds") {
    HeadScores s;
    s.offset = -3, s.offset_mass = 0.6;
    CHECK(head_label(s, 5) == "offset -3");
    CHECK(head_label(s, 3) == "copy (offset -3)");
    s.offset_mass = 0.4, s.first_token_mass = 0.5;
    CHECK(head_label(s, 5) == "first token");
    s.first_token_mass = 0.2, s.uniformity = 0.95;
    CHECK(head_label(s, 5) == "uniform");
    s.uniformity = 0.5;
    CHECK(head_label(s, 5) == "other");
}

TEST_CASE("head analysis: a GPT's previous-token and induction scores and their labels") {
    constexpr std::size_t N = 3, H = 4, R = 5, T = 2 * R;  // random tokens r_0..r_4 written twice
    xt::xtensor<double, 4> w = xt::zeros<double>({N, H, T, T});
    for (std::size_t s = 0; s < N; ++s)
        for (std::size_t i = 0; i < T; ++i) {
            w(s, 0, i, i == 0 ? 0 : i - 1) = 1;  // previous token
            // induction: from r_k's second occurrence (query R + k) to what followed it (key k + 1)
            if (i >= R && i + 1 < T) w(s, 1, i, i - R + 1) = 1;
            else w(s, 1, i, i) = 1;
            // half on the induction key, half on key 0; query 0 on itself
            if (i >= R && i + 1 < T) w(s, 2, i, i - R + 1) = 0.5, w(s, 2, i, 0) = 0.5;
            else w(s, 2, i, 0) = 1;
            for (std::size_t j = 0; j <= i; ++j) w(s, 3, i, j) = 1.0 / double(i + 1);  // uniform
        }
    CHECK(previous_token_score(w, 0) == doctest::Approx(1.0));
    CHECK(induction_score(w, 0, R) == doctest::Approx(0.0));  // query R + k reads key R + k - 1
    CHECK(induction_score(w, 1, R) == doctest::Approx(1.0));
    CHECK(previous_token_score(w, 1) == doctest::Approx(0.0));
    CHECK(previous_token_score(w, 2) == doctest::Approx(1.0 / 9));  // query 1 on key 0
    CHECK(induction_score(w, 2, R) == doctest::Approx(0.5));
    // uniform: query R + k spreads over R + k + 1 keys
    double expected = 0;
    for (std::size_t k = 0; k + 1 < R; ++k) expected += 1.0 / double(R + k + 1);
    CHECK(induction_score(w, 3, R) == doctest::Approx(expected / (R - 1)));

    const auto scores = score_heads(w, true, 0);
    CHECK(gpt_head_label(scores[0], previous_token_score(w, 0), induction_score(w, 0, R)) == "previous token");
    CHECK(gpt_head_label(scores[1], previous_token_score(w, 1), induction_score(w, 1, R)) == "induction");
    CHECK(gpt_head_label(scores[2], previous_token_score(w, 2), induction_score(w, 2, R)) == "induction");
    CHECK(gpt_head_label(scores[3], previous_token_score(w, 3), induction_score(w, 3, R)) == "uniform");
    // the thresholds: induction from 0.3, and only above the previous-token score
    HeadScores other;
    CHECK(gpt_head_label(other, 0.1, 0.29) == "other");
    CHECK(gpt_head_label(other, 0.1, 0.3) == "induction");
    CHECK(gpt_head_label(other, 0.6, 0.4) == "previous token");
    CHECK(gpt_head_label(other, 0.49, 0.2) == "other");
}

}  // namespace test_cli_head_analysis
