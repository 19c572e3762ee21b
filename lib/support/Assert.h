// support/Assert.h — internal invariant checks. A failure is an adjit bug, not a
// user mistake: it throws adjit::InternalError naming the file and line.
#pragma once

#include <adjit/error.h> // adjit::InternalError

#include <string>

namespace adjit {

[[noreturn]] void assertionFailed(const char* cond, const char* file, int line, const std::string& msg);

} // namespace adjit

#define ADJIT_ASSERT(cond, ...)                                                                   \
  do {                                                                                            \
    if (!(cond)) ::adjit::assertionFailed(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__});   \
  } while (0)

#define ADJIT_UNREACHABLE(msg) ::adjit::assertionFailed("unreachable", __FILE__, __LINE__, msg)
