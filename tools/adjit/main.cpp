// tools/adjit — the adjit command: inspect and transform `.adj` IR files.
//   adjit opt  FILE [--passes=fold,cse,dce] [--print-after-all]
//   adjit dump FILE --emit=adj|adj-opt|llvm|llvm-opt|asm [--fn NAME] [-O0..-O3]
#include "jit/Engine.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "transforms/Passes.h"

#include <adjit/adjit.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace adjit;

/// The `--emit=` ladder, in pipeline order, with what each stage prints.
struct EmitKind {
  const char* name;
  const char* extension;
  const char* description;
  std::string CompiledStages::*field;
};
const EmitKind kEmitKinds[] = {
    {"adj", ".adj", "IR as written (verified)", nullptr},
    {"adj-opt", ".adj", "IR after adjit's default passes", &CompiledStages::optimized_adj},
    {"llvm", ".ll", "LLVM IR before LLVM's optimisation", &CompiledStages::llvm_ir},
    {"llvm-opt", ".ll", "LLVM IR after LLVM's optimisation", &CompiledStages::optimized_llvm_ir},
    {"asm", ".s", "assembly", &CompiledStages::assembly},
};

const char* kUsage =
    "usage: adjit <command> [options]\n"
    "\n"
    "commands:\n"
    "  opt   run IR passes over a .adj file and print the result\n"
    "  dump  print one compilation stage of a function of a .adj file\n"
    "\n"
    "Run 'adjit <command> --help' for a command's options.\n";

struct Args {
  std::string command, file, fn, emit = "adj", passes;
  bool printAfterAll = false, help = false, passesGiven = false;
  int opt = 2;
};

[[noreturn]] void usageError(const std::string& msg) { throw Error(msg + " (see 'adjit --help')"); }

std::string value(const std::string& arg, const char* flag) {
  std::string prefix = std::string(flag) + "=";
  return arg.substr(prefix.size());
}

Args parseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> av(argv + 1, argv + argc);
  if (av.empty()) usageError("no command given");
  a.command = av[0];
  for (std::size_t i = 1; i < av.size(); ++i) {
    const std::string& s = av[i];
    auto next = [&](const char* flag) {
      if (i + 1 >= av.size()) usageError(std::string("option ") + flag + " needs a value");
      return av[++i];
    };
    if (s == "--help" || s == "-h") a.help = true;
    else if (s.rfind("--passes=", 0) == 0) {
      a.passes = value(s, "--passes");
      a.passesGiven = true;
    }
    else if (s == "--print-after-all") a.printAfterAll = true;
    else if (s.rfind("--emit=", 0) == 0) a.emit = value(s, "--emit");
    else if (s == "--fn") a.fn = next("--fn");
    else if (s.rfind("--fn=", 0) == 0) a.fn = value(s, "--fn");
    else if (s.size() == 3 && s[0] == '-' && s[1] == 'O' && s[2] >= '0' && s[2] <= '3') a.opt = s[2] - '0';
    else if (!s.empty() && s[0] == '-') usageError("unknown option '" + s + "'");
    else if (a.file.empty()) a.file = s;
    else usageError("unexpected argument '" + s + "'");
  }
  return a;
}

/// Splits "vjp(f),fold,cse" at the commas outside parentheses.
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == ',' && depth == 0) {
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
      continue;
    }
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    cur += c;
  }
  if (!cur.empty()) r.push_back(cur);
  return r;
}

int runOpt(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit opt FILE [--passes=P1,P2,...] [--print-after-all]\n\nWithout --passes the default pipeline (fold,cse,dce) runs; --passes= runs none.\n\npasses:\n");
    for (const auto& p : transforms::allPasses()) std::printf("  %-10s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  if (a.file.empty()) usageError("opt: no input file");
  Module m = Module::load(a.file);
  m.verify();
  std::vector<std::string> passes = a.passesGiven ? split(a.passes) : transforms::defaultPipeline();
  transforms::PipelineOptions o;
  o.printAfterAll = a.printAfterAll;
  o.print = [](const std::string& s) { std::fputs(s.c_str(), stdout); };
  transforms::runPipeline(m.impl(), passes, o);
  if (!a.printAfterAll) std::fputs(m.str().c_str(), stdout);
  return 0;
}

int runDump(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit dump FILE --emit=KIND [--fn NAME] [-O0|-O1|-O2|-O3]\n\nkinds, in pipeline order:\n");
    for (const EmitKind& k : kEmitKinds) std::printf("  %-9s %s\n", k.name, k.description);
    return 0;
  }
  if (a.file.empty()) usageError("dump: no input file");
  const EmitKind* kind = nullptr;
  std::string known;
  for (const EmitKind& k : kEmitKinds) {
    if (a.emit == k.name) kind = &k;
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  if (!kind) usageError("dump: unknown --emit kind '" + a.emit + "' (known: " + known + ")");
  Module m = Module::load(a.file);
  m.verify();
  if (!kind->field) {
    std::fputs(m.str().c_str(), stdout);
    return 0;
  }
  std::string fn = a.fn;
  if (fn.empty()) {
    if (m.function_names().empty()) throw Error("dump: the module has no functions");
    fn = m.function_names().front();
  }
  if (!m.impl().lookup(fn)) {
    std::string names;
    for (const auto& n : m.function_names()) names += (names.empty() ? "@" : ", @") + n;
    throw Error("dump: no function named @" + fn + " (functions: " + names + ")");
  }
  CompiledStages s;
  engine::compile({m.impl(), fn, a.opt, "", 0}, &s);
  std::fputs((s.*(kind->field)).c_str(), stdout);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    Args a = parseArgs(argc, argv);
    if (a.command == "opt") return runOpt(a);
    if (a.command == "dump") return runDump(a);
    usageError("unknown command '" + a.command + "'");
  } catch (const Error& e) {
    std::fprintf(stderr, "adjit: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adjit: internal error: %s\n", e.what());
    return 2;
  }
}
