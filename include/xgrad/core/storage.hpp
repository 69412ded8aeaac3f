// SharedArray<T, N>: the array a node holds as its value. An xtensor container like xt::xtensor<T, N>
// (same element access, same aligned buffer), except that a view (reshape, ops/shape_view.hpp) can
// hold the very buffer of its input instead of a copy. Copying a SharedArray copies the elements;
// only share() shares. A node the tape reuses calls unshare() before its op writes (make_op), so
// writing one node never changes another's value.
#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <utility>

#include "xgrad/core/intrinsics.hpp"  // before xsimd: g++ 12 warnings off inside the intrinsics
#include <xtensor/xtensor.hpp>

namespace xgrad {

// The buffer of a SharedArray: an xt::uvector (xtensor's own, SIMD-aligned) owned through a
// shared_ptr, so that an xt::xtensor's buffer can be taken without a copy (adopt) and a view can
// share it. data() and size() are cached: element access costs what xt::uvector's does.
template <class T>
class SharedStorage {
public:
    using buffer_type = typename xt::xtensor<T, 1>::storage_type;
    using allocator_type = typename buffer_type::allocator_type;  // xtensor's SIMD alignment reads it
    using value_type = T;
    using reference = T&;
    using const_reference = const T&;
    using pointer = T*;
    using const_pointer = const T*;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using iterator = T*;
    using const_iterator = const T*;
    using reverse_iterator = std::reverse_iterator<iterator>;
    using const_reverse_iterator = std::reverse_iterator<const_iterator>;

    SharedStorage() = default;
    explicit SharedStorage(size_type n) { reallocate(n); }
    SharedStorage(size_type n, const T& v) : SharedStorage(n) { std::fill_n(data_, n, v); }
    template <class InputIt>
    SharedStorage(InputIt first, InputIt last) : SharedStorage(size_type(std::distance(first, last))) {
        std::copy(first, last, data_);
    }
    // Takes an xt::uvector's buffer without copying it.
    explicit SharedStorage(buffer_type&& buffer) { adopt(std::move(buffer)); }

    SharedStorage(const SharedStorage& other) : SharedStorage(other.size_) {
        std::copy_n(other.data_, size_, data_);
    }
    SharedStorage& operator=(const SharedStorage& other) {
        if (data_ == other.data_ && size_ == other.size_) return *this;  // itself, or its own buffer shared
        if (other.size_ != size_) reallocate(other.size_);
        std::copy_n(other.data_, size_, data_);
        return *this;
    }
    SharedStorage(SharedStorage&& other) noexcept { swap(other); }
    SharedStorage& operator=(SharedStorage&& other) noexcept {
        SharedStorage(std::move(other)).swap(*this);
        return *this;
    }

    // Same size: the elements stay (xtensor's assignment then writes them); another size: a new
    // buffer of this storage's own, the shared one untouched.
    void resize(size_type n) {
        if (n != size_) reallocate(n);
    }
    // Holds `other`'s buffer: a write through either is seen by both.
    void share(const SharedStorage& other) {
        buffer_ = other.buffer_, data_ = other.data_, size_ = other.size_;
    }
    // Gives up a buffer someone else also holds, for one of this storage's own of the same size
    // (contents unspecified): what a reused node does before its op writes.
    void unshare() {
        if (is_shared()) reallocate(size_);
    }
    bool is_shared() const { return buffer_ && buffer_.use_count() > 1; }
    void adopt(buffer_type&& buffer) {
        buffer_ = std::make_shared<buffer_type>(std::move(buffer));
        data_ = buffer_->data(), size_ = buffer_->size();
    }
    void clear() { buffer_.reset(), data_ = nullptr, size_ = 0; }

    void swap(SharedStorage& other) noexcept {
        std::swap(buffer_, other.buffer_), std::swap(data_, other.data_), std::swap(size_, other.size_);
    }
    allocator_type get_allocator() const noexcept { return {}; }
    bool empty() const noexcept { return size_ == 0; }
    size_type size() const noexcept { return size_; }
    size_type max_size() const noexcept { return allocator_type().max_size(); }
    T* data() noexcept { return data_; }
    const T* data() const noexcept { return data_; }
    T& operator[](size_type i) { return data_[i]; }
    const T& operator[](size_type i) const { return data_[i]; }
    T& front() { return data_[0]; }
    const T& front() const { return data_[0]; }
    T& back() { return data_[size_ - 1]; }
    const T& back() const { return data_[size_ - 1]; }
    iterator begin() noexcept { return data_; }
    iterator end() noexcept { return data_ + size_; }
    const_iterator begin() const noexcept { return data_; }
    const_iterator end() const noexcept { return data_ + size_; }
    const_iterator cbegin() const noexcept { return data_; }
    const_iterator cend() const noexcept { return data_ + size_; }
    reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
    reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
    const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
    const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
    const_reverse_iterator crbegin() const noexcept { return rbegin(); }
    const_reverse_iterator crend() const noexcept { return rend(); }

private:
    void reallocate(size_type n) {
        if (n == 0) return clear();
        adopt(buffer_type(n));
    }

    std::shared_ptr<buffer_type> buffer_;
    T* data_ = nullptr;
    size_type size_ = 0;
};

template <class T>
bool operator==(const SharedStorage<T>& a, const SharedStorage<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

template <class T, std::size_t N>
using SharedArray = xt::xtensor_container<SharedStorage<T>, N, xt::layout_type::row_major>;

// Moves an xt::xtensor into `dst` without copying its elements (its buffer changes owner).
template <class T, std::size_t N>
void adopt(SharedArray<T, N>& dst, xt::xtensor<T, N>&& src) {
    typename SharedArray<T, N>::inner_shape_type shape;
    std::copy(src.shape().begin(), src.shape().end(), shape.begin());
    typename SharedArray<T, N>::inner_strides_type strides;
    std::copy(src.strides().begin(), src.strides().end(), strides.begin());
    dst = SharedArray<T, N>(SharedStorage<T>(std::move(src.storage())), std::move(shape), std::move(strides));
}

}  // namespace xgrad
