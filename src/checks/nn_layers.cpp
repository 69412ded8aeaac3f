// (being written)
#include "checks/registry.hpp"
