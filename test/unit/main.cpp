// test/unit/main.cpp — the doctest runner for all unit tests (one executable
// keeps the build light on small machines).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
