// numpy broadcasting of shapes, and the reverse: summing a gradient back to a broadcast operand.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

// Right-aligned numpy broadcast of two shapes; `op` names the op in the error.
template <std::size_t R, class SA, class SB>
std::array<std::size_t, R> broadcast_shapes(const SA& a, const SB& b, const char* op) {
    std::array<std::size_t, R> out{};
    const std::size_t na = a.size(), nb = b.size();
    for (std::size_t k = 0; k < R; ++k) {
        const std::size_t da = k + na >= R ? a[k + na - R] : 1;
        const std::size_t db = k + nb >= R ? b[k + nb - R] : 1;
        if (da != db && da != 1 && db != 1)
            throw shape_error(std::string(op) + ": cannot broadcast operand of shape " + shape_str(a) +
                              " with operand of shape " + shape_str(b));
        out[k] = da == 1 ? db : da;
    }
    return out;
}

// dst (shape D, rank N) += src summed over the axes along which dst was broadcast to src's
// shape S (rank M >= N, right-aligned): leading axes and axes where dst has extent 1.
template <class T, class SS, class DS>
void add_reduced(const T* src, const SS& src_shape, T* dst, const DS& dst_shape) {
    const std::size_t M = src_shape.size(), N = dst_shape.size();
    std::array<std::size_t, 16> dst_stride_in_src{}, index{};
    if (M > 16) throw value_error("broadcast gradient: rank above 16 is not supported");
    std::size_t stride = 1;
    for (std::size_t j = N; j-- > 0;) {
        const std::size_t k = j + (M - N);
        dst_stride_in_src[k] = (dst_shape[j] == 1 && src_shape[k] != 1) ? 0 : stride;
        stride *= dst_shape[j];
    }
    std::size_t total = 1;
    for (std::size_t k = 0; k < M; ++k) total *= src_shape[k];
    if (total == 0) return;
    if (M == 0) {
        dst[0] += src[0];
        return;
    }
    const std::size_t inner = M ? src_shape[M - 1] : 1;
    const std::size_t inner_stride = M ? dst_stride_in_src[M - 1] : 0;
    std::size_t offset = 0;
    for (std::size_t done = 0; done < total; done += inner) {
        T* d = dst + offset;
        if (inner_stride == 0) {
            T acc = 0;
            for (std::size_t i = 0; i < inner; ++i) acc += src[done + i];
            *d += acc;
        } else {
            for (std::size_t i = 0; i < inner; ++i) d[i] += src[done + i];
        }
        // advance the odometer over the outer axes
        for (std::size_t k = M - 1; k-- > 0;) {
            offset += dst_stride_in_src[k];
            if (++index[k] < src_shape[k]) break;
            offset -= dst_stride_in_src[k] * src_shape[k];
            index[k] = 0;
        }
    }
}

}  // namespace xgrad::detail
