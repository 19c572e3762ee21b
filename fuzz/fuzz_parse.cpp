// fuzz/fuzz_parse.cpp — libFuzzer target: .adj text through the parser, the
// verifier and the printer. Every input must end in adjit::Error or in a
// module whose printed text parses back to the same text; an InternalError,
// a crash or a mismatch is a finding.
#include <adjit/module.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    adjit::Module m = adjit::Module::parse(text);
    m.verify();
    const std::string printed = m.str();
    if (adjit::Module::parse(printed).str() != printed) std::abort(); // print -> parse -> print must be identical
  } catch (const adjit::Error&) {
  }
  return 0;
}
