// WarmupCosine: linear warmup from 0 to base_lr over warmup_steps, then a half cosine from base_lr
// down to min_lr at total_steps (and min_lr after):
//   step <  W:       lr = base_lr · (step + o) / (W + o)   o = warmup_offset: 0, or 1 as nanoGPT's get_lr
//   W <= step <= S:  lr = min_lr + (base_lr − min_lr) · (1 + cos(π · (step − W) / (S − W))) / 2
//   step >  S:       lr = min_lr
#pragma once
#include <cstddef>
#include <numbers>
#include <string>

#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim {

struct WarmupCosine {
    double base_lr;
    std::size_t warmup_steps;
    std::size_t total_steps;
    double min_lr = 0;
    std::size_t warmup_offset = 0;  // nanoGPT's train.py: 1 (its first step already has lr > 0)

    WarmupCosine(double base, std::size_t warmup, std::size_t total, double min = 0, std::size_t offset = 0)
        : base_lr(base), warmup_steps(warmup), total_steps(total), min_lr(min), warmup_offset(offset) {
        if (!(base >= 0 && min >= 0))
            throw value_error("WarmupCosine: base_lr and min_lr must be >= 0, got " + std::to_string(base) + " and " +
                              std::to_string(min));
        if (total < warmup)
            throw value_error("WarmupCosine: total_steps (" + std::to_string(total) + ") must be >= warmup_steps (" +
                              std::to_string(warmup) + ")");
    }

    double lr(std::size_t step) const {
        if (step < warmup_steps) return base_lr * double(step + warmup_offset) / double(warmup_steps + warmup_offset);
        if (step >= total_steps) return min_lr;
        const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
        return min_lr + (base_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
    }

    // Sets the optimizer's learning rate for `step` and returns it.
    template <Real T>
    double apply(Optimizer<T>& optimizer, std::size_t step) const {
        const double value = lr(step);
        optimizer.set_lr(value);
        return value;
    }
};

}  // namespace xgrad::optim
