// DETR's image positions and feature-map flattening (facebookresearch/detr models/position_encoding.py
// and models/transformer.py):
//
//   PositionEmbeddingSine<T>(F, temperature, normalize, scale)(mask (B, H, W) bool, true = padding)
//       -> pos (B, 2F, H, W), a constant:
//     y[b,i,j] = Σ_{i' <= i} !mask[b,i',j],   x[b,i,j] = Σ_{j' <= j} !mask[b,i,j']   (positions from 1)
//     normalize: y ← y / (y[b, H-1, j] + 1e-6) · scale,  x ← x / (x[b, i, W-1] + 1e-6) · scale  (scale 2π)
//     d_k = temperature^(2⌊k/2⌋ / F),  k < F
//     pos[b, k] = sin(y / d_k) for even k, cos(y / d_k) for odd k;  pos[b, F + k] likewise of x
//   flatten_feature_map(x (B, C, H, W)) -> (H·W, B, C)          (DETR: src.flatten(2).permute(2, 0, 1))
//   unflatten_feature_map(y (H·W, B, C), H, W) -> (B, C, H, W)  (memory.permute(1, 2, 0).view(B, C, H, W))
//   flatten_mask(mask (B, H, W)) -> (B, H·W)                    (the key_padding_mask of the flattened map)
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <optional>
#include <string>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/var.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

template <Real T>
struct PositionEmbeddingSine {
    std::size_t num_pos_feats = 64;  // F: the output has 2F channels (F for y, then F for x)
    double temperature = 10000;
    bool normalize = false;
    double scale = 2 * std::numbers::pi;  // used only with normalize

    PositionEmbeddingSine() = default;
    // DETR: a scale without normalize is an error.
    PositionEmbeddingSine(std::size_t F, double temperature_, bool normalize_ = false,
                          std::optional<double> scale_ = std::nullopt)
        : num_pos_feats(F), temperature(temperature_), normalize(normalize_), scale(scale_.value_or(2 * std::numbers::pi)) {
        if (scale_ && !normalize_) throw value_error("PositionEmbeddingSine: normalize should be true if scale is passed");
        if (F == 0 || F % 2 != 0)
            throw value_error("PositionEmbeddingSine: num_pos_feats must be positive and even (sin and cos pairs), got " +
                              std::to_string(F));
        if (!(temperature_ > 0)) throw value_error("PositionEmbeddingSine: temperature must be positive");
    }

    // mask (B, H, W), true = padding -> (B, 2F, H, W), a constant (no gradient)
    Var<T, 4> operator()(const xt::xtensor<bool, 3>& mask) const {
        const std::size_t B = mask.shape(0), H = mask.shape(1), W = mask.shape(2), F = num_pos_feats;
        xt::xtensor<double, 3> y = xt::zeros<double>({B, H, W}), x = xt::zeros<double>({B, H, W});
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t i = 0; i < H; ++i)
                for (std::size_t j = 0; j < W; ++j) {
                    const double here = mask(b, i, j) ? 0 : 1;
                    y(b, i, j) = here + (i > 0 ? y(b, i - 1, j) : 0);
                    x(b, i, j) = here + (j > 0 ? x(b, i, j - 1) : 0);
                }
        constexpr double eps = 1e-6;
        // In place: the last row (column) is divided last, so every position reads its total first.
        if (normalize)
            for (std::size_t b = 0; b < B; ++b)
                for (std::size_t i = 0; i < H; ++i)
                    for (std::size_t j = 0; j < W; ++j) {
                        y(b, i, j) = y(b, i, j) / (y(b, H - 1, j) + eps) * scale;
                        x(b, i, j) = x(b, i, j) / (x(b, i, W - 1) + eps) * scale;
                    }
        auto pos = xt::xtensor<T, 4>::from_shape({B, 2 * F, H, W});
        for (std::size_t k = 0; k < F; ++k) {
            const double dim = std::pow(temperature, double(2 * (k / 2)) / double(F));
            for (std::size_t b = 0; b < B; ++b)
                for (std::size_t i = 0; i < H; ++i)
                    for (std::size_t j = 0; j < W; ++j) {
                        const double ay = y(b, i, j) / dim, ax = x(b, i, j) / dim;
                        pos(b, k, i, j) = T(k % 2 == 0 ? std::sin(ay) : std::cos(ay));
                        pos(b, F + k, i, j) = T(k % 2 == 0 ? std::sin(ax) : std::cos(ax));
                    }
        }
        return constant(std::move(pos));
    }
};

// (B, C, H, W) -> (H·W, B, C)
template <Real T>
Var<T, 3> flatten_feature_map(const Var<T, 4>& x) {
    const long B = long(x.shape(0)), C = long(x.shape(1)), HW = long(x.shape(2) * x.shape(3));
    return permute(reshape<3>(x, {B, C, HW}), {2, 0, 1});
}

// (H·W, B, C) -> (B, C, H, W)
template <Real T>
Var<T, 4> unflatten_feature_map(const Var<T, 3>& y, std::size_t H, std::size_t W) {
    if (y.shape(0) != H * W)
        throw shape_error("unflatten_feature_map: y has shape " + shape_str(y.shape()) + " but its first dim must be H·W = " +
                          std::to_string(H) + "·" + std::to_string(W));
    const long B = long(y.shape(1)), C = long(y.shape(2));
    return reshape<4>(permute(y, {1, 2, 0}), {B, C, long(H), long(W)});
}

// (B, H, W) -> (B, H·W), row-major as the feature map's positions
inline xt::xtensor<bool, 2> flatten_mask(const xt::xtensor<bool, 3>& mask) {
    xt::xtensor<bool, 2> out = xt::xtensor<bool, 2>::from_shape({mask.shape(0), mask.shape(1) * mask.shape(2)});
    std::copy(mask.begin(), mask.end(), out.begin());
    return out;
}

}  // namespace xgrad::nn
