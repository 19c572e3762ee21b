// test/unit/main.cpp — the doctest runner for all unit tests (one executable
// keeps the build light on small machines). After a full run, in whatever
// order, it checks that every op of the table went through a value test
// (check3 or agrees): a new op without one fails the run by name. Runs that
// select or skip test cases skip that check. Run by hand, it leaves the
// disk cache off as CTest does (a cache hit skips the first tier, which the
// tiers' tests watch), unless ADJIT_CACHE_DIR is set.
#define DOCTEST_CONFIG_IMPLEMENT
#include "Check.h"

#include <doctest/doctest.h>

#include "ir/OpInfo.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace adjit::test {
std::set<ir::OpKind>& exercisedOps() {
  static std::set<ir::OpKind> s;
  return s;
}

std::vector<std::string_view> unexercisedOps() {
  std::vector<std::string_view> missing;
  for (ir::OpKind k : ir::allOps())
    if (!exercisedOps().count(k)) missing.push_back(ir::info(k).name);
  return missing;
}
} // namespace adjit::test

int main(int argc, char** argv) {
  setenv("ADJIT_CACHE_DIR", "", /*overwrite=*/0);
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (context.shouldExit() || failed) return failed;
  for (int i = 1; i < argc; ++i)
    for (const char* filter : {"-tc", "-tce", "-sf", "-sfe", "-ts", "-tse", "--test-case", "--source-file", "--test-suite",
                               "--first", "--last", "-f=", "-l="})
      if (std::strncmp(argv[i], filter, std::strlen(filter)) == 0) return 0;
  const std::vector<std::string_view> missing = adjit::test::unexercisedOps();
  for (std::string_view name : missing)
    std::fprintf(stderr, "op %.*s has no value test: check it with check3 (test/unit/Check.h)\n",
                 static_cast<int>(name.size()), name.data());
  return missing.empty() ? 0 : 1;
}
