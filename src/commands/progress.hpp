// Progress of a training run on stdout:
//   bar    (a terminal)  one line redrawn in place, at most 10 times a second:
//          step  350/1000 [#######-------------]  loss 0.4123  acc 0.9700  812 steps/s  ETA 0:01
//   lines  (not a terminal, or --verbose)  one plain line every `every` steps and at the last step:
//          step   350/1000  loss 0.4123  acc 0.9700  812 steps/s  ETA 0:01
//   quiet  nothing.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <fmt/core.h>

namespace xgrad::cli {

enum class ProgressMode { bar, lines, quiet };

// "m:ss", or "h:mm:ss" from an hour on; "-:--" when unknown.
inline std::string clock_str(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "-:--";
    const long s = std::lround(seconds);
    return s >= 3600 ? fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60)
                     : fmt::format("{}:{:02d}", s / 60, s % 60);
}

// The fields after the step counter; accuracy is the latest held-out score (named score_name), if
// any yet; with tokens_per_step > 0 the rate is in tokens per second (language models).
inline std::string progress_fields(double loss, std::optional<double> accuracy, double steps_per_second,
                                   double eta_seconds, const std::string& score_name = "acc",
                                   double tokens_per_step = 0) {
    const std::string rate = tokens_per_step > 0 ? fmt::format("{:.0f} tok/s", steps_per_second * tokens_per_step)
                                                 : fmt::format("{:.0f} steps/s", steps_per_second);
    return fmt::format("loss {:.4f}  {} {}  {}  ETA {}", loss, score_name,
                       accuracy ? fmt::format("{:.4f}", *accuracy) : std::string("-"), rate, clock_str(eta_seconds));
}

// A bar of `width` cells, `done` of `total` filled.
inline std::string bar_str(int done, int total, int width = 20) {
    const int filled = total > 0 ? std::clamp(int(std::lround(double(width) * done / total)), 0, width) : 0;
    return "[" + std::string(std::size_t(filled), '#') + std::string(std::size_t(width - filled), '-') + "]";
}

class TrainProgress {
public:
    // Steps first..total are to run; `every` is the line interval of ProgressMode::lines; the score
    // is shown as score_name, the rate in tokens/s when tokens_per_step > 0.
    TrainProgress(ProgressMode mode, int first, int total, int every, std::string score_name = "acc",
                  double tokens_per_step = 0)
        : mode_(mode), first_(first), total_(total), every_(std::max(every, 1)), score_name_(std::move(score_name)),
          tokens_per_step_(tokens_per_step), start_(Clock::now()) {}

    // After step `step`; `accuracy` when the held-out set was just evaluated.
    void update(int step, double loss, std::optional<double> accuracy) {
        if (accuracy) accuracy_ = accuracy;
        if (mode_ == ProgressMode::quiet) return;
        const auto now = Clock::now();
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const int done = step - first_ + 1;
        const double rate = elapsed > 0 ? done / elapsed : 0.0;
        const double eta = rate > 0 ? (total_ - step) / rate : NAN;
        const std::string fields = progress_fields(loss, accuracy_, rate, eta, score_name_, tokens_per_step_);
        const int digits = int(std::to_string(total_).size());
        if (mode_ == ProgressMode::lines) {
            if (step % every_ == 0 || step == total_) fmt::print("step {:>{}}/{}  {}\n", step, digits, total_, fields);
            return;
        }
        if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
        last_draw_ = now;
        // \r back to the line's start, \x1b[K clears what a longer previous line left.
        fmt::print("\rstep {:>{}}/{} {}  {}\x1b[K", step, digits, total_, bar_str(step, total_), fields);
        std::fflush(stdout);
        drawn_ = true;
    }
    // Ends the bar's line.
    void finish() {
        if (drawn_) fmt::print("\n");
        drawn_ = false;
    }

private:
    using Clock = std::chrono::steady_clock;
    ProgressMode mode_;
    int first_, total_, every_;
    std::string score_name_;
    double tokens_per_step_;
    Clock::time_point start_, last_draw_{};
    std::optional<double> accuracy_;
    bool drawn_ = false;
};

}  // namespace xgrad::cli
