// Moved to the folder for studying a backward pass: xgrad/inspect/tape_graph.hpp.
#pragma once
#include "xgrad/inspect/tape_graph.hpp"
