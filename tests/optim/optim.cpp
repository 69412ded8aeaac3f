// (being written)
#include <doctest/doctest.h>
