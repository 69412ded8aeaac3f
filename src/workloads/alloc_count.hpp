// Heap allocations made by this program so far (every global operator new, counted in
// workloads/alloc_count.cpp), so `xgrad bench` can report the allocations of a steady training step.
#pragma once
#include <cstdint>

namespace xgrad::cli {
std::uint64_t heap_allocations();
bool heap_allocations_counted();  // false in a sanitizer build, where the count stays 0
}
