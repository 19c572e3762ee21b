// tools/adjit — the adjit command: inspect, transform, run and compile `.adj`
// IR files ahead of time.
//   adjit opt     FILE [--passes=P,...] [--print-after-all]
//   adjit dump    FILE --emit=KIND [--passes=P,...] [--fn NAME] [-O0..-O3] [--target-cpu=CPU]
//   adjit run     FILE [--passes=P,...] --fn NAME --arg VALUES:TYPE ... [-O0..-O3]
//   adjit compile FILE -o OUT.o --header OUT.h [--fn NAME]... [--grad NAME [--argnums I,...]]... [--jvp NAME]... [--vjp NAME]... [--map NAME]...
//                 [--sparse-jacobian NAME]... [--sparse-hessian NAME]... [-O0..-O3] [--target-cpu=CPU] [--threads]
//   adjit --version
#include "autodiff/Reverse.h"
#include "codegen/FusionPlan.h"
#include "ir/Dot.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "jit/Aot.h"
#include "jit/Engine.h"
#include "support/Assert.h"
#include "transforms/Passes.h"

#include <adjit/adjit.h>

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h> // LLVM_VERSION_STRING

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace adjit;

// ---- arguments ----------------------------------------------------------------

/// A --grad NAME and the --argnums that followed it, if any.
struct GradFlag {
  std::string name;
  std::optional<std::string> argnums;
};

struct Args {
  std::string command, file, output, header, emit = "adj", passes, cpu, planAfter;
  std::vector<std::string> fns, jvps, vjps, maps, values, sparseJacobians, sparseHessians;
  std::vector<GradFlag> grads;
  std::vector<std::string_view> given; ///< the options given, as the usage spells them ("-O" for -O0..-O3)
  bool printAfterAll = false, help = false, version = false, passesGiven = false, threads = false;
  int opt = 2;
};

[[noreturn]] void usageError(const std::string& msg) { throw Error(msg + " (see 'adjit --help')"); }

/// The edit distance between two words: how many letters to insert, delete,
/// replace or swap with their neighbour ("dmup" is one edit from "dump").
std::size_t editDistance(std::string_view a, std::string_view b) {
  // d[i][j]: the distance between the first i letters of a and the first j of b.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

/// "; did you mean 'X'?" for the known word nearest to `word`, when it is
/// near enough to be a typing mistake (one edit per three letters, at least
/// one), else "". One-letter words (-o) are never suggested: any letter is one edit away.
std::string suggestion(std::string_view word, const std::vector<std::string_view>& known) {
  std::string_view best;
  std::size_t bestDistance = SIZE_MAX;
  for (std::string_view k : known) {
    const std::size_t letters = k.size() - std::min(k.find_first_not_of('-'), k.size());
    const std::size_t d = editDistance(word, k);
    if (letters > 1 && d <= std::max<std::size_t>(1, letters / 3) && d < bestDistance) best = k, bestDistance = d;
  }
  return best.empty() ? "" : fmt::format("; did you mean '{}'?", best);
}

Args parseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> av(argv + 1, argv + argc);
  if (av.empty()) usageError("no command given");
  a.command = av[0];
  for (std::size_t i = 1; i < av.size(); ++i) {
    const std::string& s = av[i];
    std::vector<std::string_view> known; // every option tried below, for suggestions
    std::string_view matched;           // the option s is, once found
    auto is = [&](std::string_view flag) {
      known.push_back(flag);
      if (s == flag) matched = flag;
      return s == flag;
    };
    // --flag=VALUE or --flag VALUE
    auto value = [&](std::string_view flag) -> std::optional<std::string> {
      known.push_back(flag);
      if (s == flag) {
        if (i + 1 >= av.size()) usageError("option " + s + " needs a value");
        matched = flag;
        return av[++i];
      }
      if (s.size() > flag.size() && s.starts_with(flag) && s[flag.size()] == '=') {
        matched = flag;
        return s.substr(flag.size() + 1);
      }
      return std::nullopt;
    };
    if (is("--help") || is("-h")) a.help = true;
    else if (is("--version")) a.version = true;
    else if (auto v = value("--passes")) a.passes = *v, a.passesGiven = true;
    else if (is("--print-after-all")) a.printAfterAll = true;
    else if (is("--threads")) a.threads = true;
    else if (auto v = value("--emit")) a.emit = *v;
    else if (auto v = value("--print-plan-after")) a.planAfter = *v;
    else if (auto v = value("--fn")) a.fns.push_back(*v);
    else if (auto v = value("--grad")) a.grads.push_back({*v, std::nullopt});
    else if (auto v = value("--argnums")) {
      if (a.grads.empty()) usageError("--argnums '" + *v + "' must follow the --grad it applies to, as in --grad f --argnums 0,2");
      if (a.grads.back().argnums) usageError("--argnums is given twice for --grad " + a.grads.back().name);
      a.grads.back().argnums = *v;
    } else if (auto v = value("--vjp")) a.vjps.push_back(*v);
    else if (auto v = value("--jvp")) a.jvps.push_back(*v);
    else if (auto v = value("--map")) a.maps.push_back(*v);
    else if (auto v = value("--sparse-jacobian")) a.sparseJacobians.push_back(*v);
    else if (auto v = value("--sparse-hessian")) a.sparseHessians.push_back(*v);
    else if (auto v = value("--arg")) a.values.push_back(*v);
    else if (auto v = value("--header")) a.header = *v;
    else if (auto v = value("--target-cpu")) a.cpu = *v;
    else if (auto v = value("-o")) a.output = *v;
    else if (s.size() == 3 && s[0] == '-' && s[1] == 'O' && s[2] >= '0' && s[2] <= '3') a.opt = s[2] - '0', matched = "-O";
    else if (!s.empty() && s[0] == '-') // (--emt=llvm is compared as --emt)
      usageError("unknown option '" + s + "'" + suggestion(std::string_view(s).substr(0, s.find('=')), known));
    else if (a.file.empty()) a.file = s;
    else usageError("unexpected argument '" + s + "'");
    if (!matched.empty() && matched != "--help" && matched != "-h" && matched != "--version") a.given.push_back(matched);
  }
  return a;
}

/// The options each command takes, besides --help and --version. An option
/// of another command is an error, not silently ignored.
const std::vector<std::pair<std::string_view, std::vector<std::string_view>>> kCommandOptions = {
    {"opt", {"--passes", "--print-after-all"}},
    {"dump", {"--emit", "--passes", "--fn", "-O", "--target-cpu", "--print-plan-after"}},
    {"run", {"--passes", "--fn", "--arg", "-O", "--target-cpu"}},
    {"compile",
     {"-o", "--header", "--fn", "--grad", "--argnums", "--jvp", "--vjp", "--map", "--sparse-jacobian", "--sparse-hessian", "-O",
      "--target-cpu", "--threads"}},
};

/// Throws if `a` gives an option its command does not take, naming the
/// commands that do.
void checkOptionsApply(const Args& a) {
  const auto takes = [](const std::vector<std::string_view>& options, std::string_view o) {
    return std::find(options.begin(), options.end(), o) != options.end();
  };
  const auto command = std::find_if(kCommandOptions.begin(), kCommandOptions.end(), [&](const auto& c) { return c.first == a.command; });
  if (command == kCommandOptions.end()) return; // an unknown command is reported as such
  for (std::string_view o : a.given) {
    if (takes(command->second, o)) continue;
    std::vector<std::string> commands;
    for (const auto& [name, options] : kCommandOptions)
      if (takes(options, o)) commands.push_back(fmt::format("'adjit {}'", name));
    ADJIT_ASSERT(!commands.empty(), "adjit: option " + std::string(o) + " is no command's (kCommandOptions)");
    std::string others = commands.front();
    for (std::size_t i = 1; i < commands.size(); ++i) others += (i + 1 == commands.size() ? " and " : ", ") + commands[i];
    throw Error(fmt::format("{}: option {} does not apply to 'adjit {}'; it is an option of {} (see 'adjit {} --help')", a.command, o,
                            a.command, others, a.command));
  }
}

/// Splits "vjp(f),fold,cse" at the commas outside parentheses.
std::vector<std::string> splitPasses(const std::string& s) {
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

Module loadModule(const Args& a, const char* cmd) {
  if (a.file.empty()) usageError(std::string(cmd) + ": no input file");
  Module m = Module::load(a.file);
  m.verify();
  return m;
}

std::string functionNames(const Module& m) {
  std::string names;
  for (const auto& n : m.function_names()) names += (names.empty() ? "@" : ", @") + n;
  return names;
}

/// The pass that adds a function named @F.<suffix> to a module with @F.
const char* derivingPass(std::string_view suffix) {
  static const std::pair<std::string_view, const char*> kDerived[] = {
      {"grad", "grad"}, {"jvp", "jvp"}, {"vjp", "vjp"}, {"fwd", "vjp-split"},
      {"bwd", "vjp-split"}, {"primal", "linearize"}, {"linear", "linearize"}};
  for (const auto& [s, pass] : kDerived)
    if (s == suffix) return pass;
  return nullptr;
}

std::string pickFunction(const Module& m, const std::vector<std::string>& fns, const char* cmd) {
  if (fns.size() > 1) usageError(std::string(cmd) + ": one --fn, please");
  if (fns.empty()) {
    if (m.function_names().empty()) throw Error(std::string(cmd) + ": the module has no functions");
    return m.function_names().front();
  }
  const std::string& name = fns[0];
  if (!m.impl().lookup(name)) {
    // @f.grad and its kin exist once their pass has run: say which.
    std::string hint;
    if (auto dot = name.rfind('.'); dot != std::string::npos && m.impl().lookup(name.substr(0, dot)))
      if (const char* pass = derivingPass(std::string_view(name).substr(dot + 1)))
        hint = fmt::format("; --passes='{}({})' makes it", pass, name.substr(0, dot));
    throw Error(fmt::format("{}: no function named @{} (functions: {}){}", cmd, name, functionNames(m), hint));
  }
  return name;
}

/// Runs --passes, if given, before a command picks its function: --fn may
/// then name a function they add (@f.grad after grad(f)).
void runRequestedPasses(Module& m, const Args& a) {
  if (!a.passesGiven) return;
  transforms::PipelineOptions o;
  o.verifyEach = true;
  o.subject = a.file;
  transforms::runPipeline(m.impl(), splitPasses(a.passes), o);
}

/// Writes files atomically: each goes to a temporary file beside it, renamed
/// into place only once all were written. On failure nothing is left behind.
void writeAtomically(const std::vector<std::pair<std::string, std::string>>& files) {
  // Every destination is checked before anything is written.
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    if (std::filesystem::is_directory(files[i].first, ec))
      throw Error("cannot write '" + files[i].first + "': it is a directory");
    for (std::size_t j = 0; j < i; ++j)
      if (std::filesystem::weakly_canonical(files[i].first, ec) == std::filesystem::weakly_canonical(files[j].first, ec))
        throw Error("two outputs name the same file '" + files[i].first + "'");
  }
  std::vector<std::string> temps;
  auto cleanup = [&] {
    for (const std::string& t : temps) std::filesystem::remove(t);
  };
  for (const auto& [path, data] : files) {
    const std::string tmp = path + ".adjit-tmp";
    std::ofstream out(tmp, std::ios::binary);
    if (!out) {
      cleanup();
      throw Error("cannot write '" + path + "': " + std::strerror(errno));
    }
    temps.push_back(tmp);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) {
      cleanup();
      throw Error("cannot write '" + path + "'");
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    std::filesystem::rename(temps[i], files[i].first, ec);
    if (ec) {
      for (std::size_t j = 0; j < i; ++j) std::filesystem::remove(files[j].first, ec); // all or none
      cleanup();
      throw Error("cannot write '" + files[i].first + "': " + ec.message());
    }
  }
}

// ---- the --emit ladder ----------------------------------------------------------------

/// Output kinds in pipeline order, each with its file extension and, for the
/// stages of a compilation, where CompiledStages holds its text.
struct EmitKind {
  const char* name;
  const char* extension;
  const char* description;
  std::string CompiledStages::*stage = nullptr;
};
const EmitKind kEmitKinds[] = {
    {"adj", ".adj", "IR as written (verified)"},
    {"adj-grad", ".adj", "IR with the function's gradient @F.grad (for a scalar-valued @F)"},
    {"adj-opt", ".adj", "IR after adjit's default passes", &CompiledStages::optimized_adj},
    {"plan", ".plan", "the fusion plan: buffers, loops and their order", &CompiledStages::plan},
    {"llvm", ".ll", "LLVM IR before LLVM's optimisation", &CompiledStages::llvm_ir},
    {"llvm-opt", ".ll", "LLVM IR after LLVM's optimisation", &CompiledStages::optimized_llvm_ir},
    {"asm", ".s", "assembly", &CompiledStages::assembly},
    {"dot", ".dot", "Graphviz of the function (render with: dot -Tpng)"},
};

const char* kUsage =
    "usage: adjit <command> [options]\n"
    "\n"
    "commands:\n"
    "  opt      run IR passes over a .adj file and print the result\n"
    "  dump     print one compilation stage of a function of a .adj file\n"
    "  run      run a function through the JIT and print its outputs\n"
    "  compile  compile functions to an object file and a C header\n"
    "\n"
    "Run 'adjit <command> --help' for a command's options, 'adjit --version' for adjit's and LLVM's versions.\n";

/// adjit's version (CMake's project version) and the LLVM it was built with.
void printVersion() { std::printf("adjit %s\nLLVM %s\n", ADJIT_VERSION, LLVM_VERSION_STRING); }

int runOpt(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit opt FILE [--passes=P1,P2,...] [--print-after-all]\n\n"
                "Without --passes the default pipeline (fold,cse,dce) runs; --passes= runs none.\n\npasses:\n");
    for (const auto& p : transforms::allPasses()) std::printf("  %-10s %s\n", p.name.c_str(), p.description.c_str());
    return 0;
  }
  Module m = loadModule(a, "opt");
  std::vector<std::string> passes = a.passesGiven ? splitPasses(a.passes) : transforms::defaultPipeline();
  transforms::PipelineOptions o;
  o.printAfterAll = a.printAfterAll;
  o.verifyEach = true; // a pass producing invalid IR is named, with the offending op
  o.print = [](const std::string& s) { std::fputs(s.c_str(), stdout); };
  o.subject = a.file;
  // Passes are verified after each run; a failure names the offending op.
  transforms::runPipeline(m.impl(), passes, o);
  ir::verify(m.impl());
  if (!a.printAfterAll) std::fputs(m.str().c_str(), stdout);
  return 0;
}

int runDump(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit dump FILE --emit=KIND [--passes=P1,P2,...] [--fn NAME] [-O0|-O1|-O2|-O3] [--target-cpu=CPU]\n"
                "                 [--print-plan-after=STEP]\n\n"
                "--passes runs first (as in 'adjit opt'), so --fn may name a function they add:\n"
                "--passes='grad(f)' --fn f.grad.\n\nkinds, in pipeline order:\n");
    for (const EmitKind& k : kEmitKinds) std::printf("  %-9s %-5s %s\n", k.name, k.extension, k.description);
    std::string steps;
    for (std::string_view s : codegen::planSteps()) steps += (steps.empty() ? "" : ", ") + std::string(s);
    std::printf("\n--print-plan-after=STEP (with --emit=plan): the plan as it stands after planning step STEP\n"
                "of each function, or after each with 'all'; steps, in order: %s.\n", steps.c_str());
    return 0;
  }
  const EmitKind* kind = nullptr;
  std::string known;
  for (const EmitKind& k : kEmitKinds) {
    if (a.emit == k.name) kind = &k;
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  if (!kind) usageError("dump: unknown --emit kind '" + a.emit + "' (known: " + known + ")");
  if (!a.planAfter.empty()) {
    if (a.emit != "plan") usageError("dump: --print-plan-after applies to --emit=plan, not --emit=" + a.emit);
    std::string steps;
    bool known = a.planAfter == "all";
    for (std::string_view s : codegen::planSteps()) {
      steps += (steps.empty() ? "" : ", ") + std::string(s);
      known = known || a.planAfter == s;
    }
    if (!known) usageError("dump: unknown planning step '" + a.planAfter + "' for --print-plan-after (steps: " + steps + ", or all)");
  }
  Module m = loadModule(a, "dump");
  runRequestedPasses(m, a);
  const std::string emit = kind->name;
  if (emit == "adj") {
    if (!a.fns.empty()) pickFunction(m, a.fns, "dump"); // a named function must exist
    std::fputs(m.str().c_str(), stdout);
    return 0;
  }
  std::string fn = pickFunction(m, a.fns, "dump");
  if (emit == "dot") {
    std::fputs(ir::toDot(m.impl(), fn).c_str(), stdout);
    return 0;
  }
  if (emit == "adj-grad") {
    auto shared = std::shared_ptr<ir::Module>(&m.impl(), [](ir::Module*) {});
    autodiff::gradFunction(shared, fn);
    std::fputs(m.str().c_str(), stdout);
    return 0;
  }
  ADJIT_ASSERT(kind->stage, std::string("no stage for --emit=") + kind->name);
  CompiledStages s;
  engine::compile({.module = m.impl(), .function = fn, .options = {.optLevel = a.opt, .cpu = a.cpu}, .planAfter = a.planAfter}, &s);
  std::fputs((s.*(kind->stage)).c_str(), stdout);
  return 0;
}

/// "1,2,3:f32[3]" or "2.5:f64[]".
Array parseArg(const std::string& spec) {
  auto colon = spec.rfind(':');
  if (colon == std::string::npos) usageError("run: --arg '" + spec + "' needs a type, as in 1,2,3:f32[3]");
  // Columns count from the start of the argument, so they point into it.
  const Type t = ir::parseType(std::string_view(spec).substr(colon + 1), fmt::format("--arg '{}'", spec),
                               static_cast<uint32_t>(colon + 2));
  std::vector<double> values;
  std::string body = spec.substr(0, colon);
  std::size_t pos = 0;
  while (pos <= body.size() && !body.empty()) {
    std::size_t end = body.find(',', pos);
    if (end == std::string::npos) end = body.size();
    std::string item = body.substr(pos, end - pos);
    char* stop = nullptr;
    double v = item == "true" ? 1 : item == "false" ? 0 : std::strtod(item.c_str(), &stop);
    if (item != "true" && item != "false" && (item.empty() || *stop != '\0'))
      usageError("run: '" + item + "' in --arg '" + spec + "' is not a number");
    values.push_back(v);
    pos = end + 1;
  }
  if (static_cast<int64_t>(values.size()) != t.size())
    usageError(fmt::format("run: --arg '{}' has {} values, but {} needs {}", spec, values.size(), t.str(), t.size()));
  Array arr(t);
  for (std::size_t i = 0; i < values.size(); ++i) arr.set(static_cast<int64_t>(i), values[i]);
  return arr;
}

int runRun(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit run FILE [--passes=P1,P2,...] --fn NAME --arg VALUES:TYPE ... [-O0..-O3] [--target-cpu=CPU]\n\n"
                "Runs @NAME through the JIT and prints each output. Each --arg is comma-separated\n"
                "values and a type, as in --arg 1,2,3:f32[3] or --arg 2.5:f64[]. --passes runs first,\n"
                "so --fn may name a function they add: --passes='grad(f)' --fn f.grad.\n");
    return 0;
  }
  Module m = loadModule(a, "run");
  runRequestedPasses(m, a);
  std::string fn = pickFunction(m, a.fns, "run");
  const ir::Function& f = *m.impl().lookup(fn);
  std::vector<Array> args;
  for (const std::string& v : a.values) args.push_back(parseArg(v));
  if (args.size() != f.params.size())
    throw Error(fmt::format("run: @{} takes {} arguments {}, got {}", fn, f.params.size(), f.signature(), args.size()));
  std::vector<detail::Leaf> leaves;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].type() != f.type(f.params[i]))
      throw Error(fmt::format("run: argument {} of @{} must be {}, got {}", i, fn, f.type(f.params[i]).str(), args[i].type().str()));
    leaves.push_back({args[i].raw(), &args[i].type()});
  }
  auto kernel = engine::compile({.module = m.impl(), .function = fn, .options = {.optLevel = a.opt, .cpu = a.cpu}});
  std::vector<Array> outs;
  engine::run(*kernel, leaves, outs);
  for (const Array& o : outs) std::printf("%s\n", o.str(1 << 20).c_str());
  return 0;
}

/// The inputs of --argnums SPEC ("0,2") for --grad `name`, checked against
/// @name's parameters when the module has it (else compileAot says it does not).
std::vector<std::size_t> parseArgnums(const std::string& spec, const std::string& name, const Module& m) {
  const std::string flag = fmt::format("compile: --argnums '{}' for --grad {}", spec, name);
  std::vector<std::size_t> argnums;
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    std::size_t i = 0;
    const auto [stop, ec] = std::from_chars(item.data(), item.data() + item.size(), i);
    if (item.empty() || ec != std::errc() || stop != item.data() + item.size())
      usageError(fmt::format("{}: expected input numbers separated by commas, such as 0,2, got '{}'", flag, item));
    if (std::find(argnums.begin(), argnums.end(), i) != argnums.end())
      throw Error(fmt::format("{}: expected each input once, got {} twice", flag, i));
    argnums.push_back(i);
    pos = end + 1;
  }
  const ir::Function* f = m.impl().lookup(name);
  if (!f) return argnums;
  for (std::size_t i : argnums) {
    if (i >= f->params.size())
      throw Error(f->params.empty() ? fmt::format("{}: @{} has no inputs, got input {}", flag, name, i)
                                    : fmt::format("{}: @{} has {} input{}, so expected 0 to {}, got {}", flag, name, f->params.size(),
                                                  f->params.size() > 1 ? "s" : "", f->params.size() - 1, i));
    const Type& t = f->type(f->params[i]);
    if (!is_floating(t.dtype))
      throw Error(fmt::format("{}: input {} of @{} is {}, expected a floating-point input", flag, i, name, t.str()));
  }
  return argnums;
}

/// What NAME_jac (or NAME_hess) computes, for its comment in the header.
std::string sparseWhat(const std::string& name, bool hessian, const detail::SparsePlan& plan) {
  return fmt::format("the nonzeros of the {} of @{}, row by row (the pattern above), from {} {} in one batch{}",
                     hessian ? "Hessian" : "Jacobian", name, plan.colors,
                     hessian ? "Hessian-vector products" : plan.mode == SparseMode::forward ? "JVPs" : "VJPs",
                     hessian ? " (star coloring, forward over reverse)" : "");
}

/// The pattern of NAME_jac as static C arrays: NAME_jac_rows, _cols, _nnz,
/// _colors, _row_ptr, _col_idx.
std::string sparsePreamble(const std::string& symbol, const detail::SparsePlan& plan) {
  const SparsityPattern& p = plan.pattern;
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i == 0 ? "" : i % 16 == 0 ? ",\n  " : ", ", v[i]);
    return s;
  };
  std::string s = fmt::format("\n/* The pattern of {}'s output, in compressed rows: row r's nonzeros are in columns\n"
                              " * {}_col_idx[{}_row_ptr[r] .. {}_row_ptr[r + 1]), sorted, and their values at the same\n"
                              " * positions of {}'s output. */\n"
                              "enum {{ {}_rows = {}, {}_cols = {}, {}_nnz = {}, {}_colors = {} }};\n"
                              "static const int64_t {}_row_ptr[{}] = {{\n  {}}};\n",
                              symbol, symbol, symbol, symbol, symbol, symbol, p.rows, symbol, p.cols, symbol, p.nnz(),
                              symbol, plan.colors, symbol, p.rows + 1, list(p.row_ptr));
  // (C has no empty arrays: a pattern without nonzeros keeps one unused 0.)
  s += fmt::format("static const int64_t {}_col_idx[{}] = {{\n  {}}};\n", symbol, std::max<int64_t>(p.nnz(), 1),
                   p.nnz() ? list(p.col_idx) : "0");
  return s;
}

int runCompile(const Args& a) {
  if (a.help) {
    std::printf("usage: adjit compile FILE -o OUT.o --header OUT.h [--fn NAME]... [--grad NAME [--argnums I,...]]...\n"
                "                     [--jvp NAME]... [--vjp NAME]... [--map NAME]...\n"
                "                     [--sparse-jacobian NAME]... [--sparse-hessian NAME]...\n"
                "                     [-O0|-O1|-O2|-O3] [--target-cpu=CPU] [--threads]\n\n"
                "Compiles functions of FILE into a relocatable object and a C header declaring them.\n"
                "  --fn NAME    export @NAME (default: every function, unless --grad, --jvp, --vjp or --map is given)\n"
                "  --grad NAME  also export NAME_grad(x..., dx...), the gradient of a scalar-valued @NAME\n"
                "  --argnums L  after --grad NAME: differentiate only the inputs of @NAME in the list L, such\n"
                "               as 0,2 (counted from 0; floating ones); NAME_grad's dx are theirs, in that order\n"
                "  --jvp NAME   also export NAME_jvp(x..., tx..., y..., ty...), forward mode: @NAME's outputs\n"
                "               and their tangents along the tangents tx of its floating inputs\n"
                "  --vjp NAME   export a gradient bundle: NAME, NAME_fwd (also filling a NAME_residuals\n"
                "               struct declared in the header) and NAME_bwd (residuals and output\n"
                "               cotangents in, input cotangents out)\n"
                "  --map NAME   export NAME and NAME_map(n, buffers...), which runs n instances of NAME\n"
                "               (every buffer holds n of NAME's, one after another) through\n"
                "               adjit_parallel_for_hook; the other entry points made for NAME get _map\n"
                "               twins too (NAME_grad_map, NAME_jvp_map, NAME_fwd_map, NAME_bwd_map)\n"
                "  --sparse-jacobian NAME\n"
                "               also export NAME_jac(x..., values): the structural nonzeros of the Jacobian of\n"
                "               @NAME's floating outputs with respect to its floating inputs (all flattened, in\n"
                "               order), found from the IR, colored, computed by one batched JVP or VJP; the\n"
                "               header holds the pattern (NAME_jac_rows, _cols, _nnz, _row_ptr, _col_idx: CSR)\n"
                "               and NAME_jac_work, which takes its scratch from the caller and allocates nothing\n"
                "  --sparse-hessian NAME\n"
                "               the same for the Hessian of a scalar @NAME: NAME_hess, both triangles, star-colored\n"
                "  --threads    split large loops into chunks run through adjit_parallel_for_hook, a\n"
                "               function pointer the header declares: set it to run chunks on your\n"
                "               threads; left NULL, the calling thread runs them in order (default: serial code)\n"
                "The object needs libc, libm and libmvec only. Outputs are deterministic and written\n"
                "atomically: on any error no output file is left behind.\n");
    return 0;
  }
  if (a.output.empty()) usageError("compile: no output object (-o FILE.o)");
  if (a.header.empty()) usageError("compile: no output header (--header FILE.h)");
  Module m = loadModule(a, "compile");
  engine::AotRequest r;
  r.functions = a.fns;
  if (r.functions.empty() && a.grads.empty() && a.jvps.empty() && a.vjps.empty() && a.maps.empty() &&
      a.sparseJacobians.empty() && a.sparseHessians.empty())
    r.functions = m.function_names();
  for (const GradFlag& g : a.grads) {
    std::optional<std::vector<std::size_t>> argnums;
    if (g.argnums) argnums = parseArgnums(*g.argnums, g.name, m);
    // One NAME_grad per name: the same --grad twice must ask for the same inputs.
    auto same = std::find_if(a.grads.begin(), a.grads.end(), [&](const GradFlag& o) { return o.name == g.name; });
    if (same->argnums != g.argnums)
      throw Error(fmt::format("compile: --grad {} is given twice, with {} and {}: expected one set of inputs for its {}_grad",
                              g.name, same->argnums ? "--argnums '" + *same->argnums + "'" : "no --argnums",
                              g.argnums ? "--argnums '" + *g.argnums + "'" : "no --argnums", engine::cName(g.name)));
    r.grads.push_back(g.name);
    if (argnums) r.argnums[g.name] = *argnums;
  }
  r.jvps = a.jvps;
  r.vjps = a.vjps;
  r.maps = a.maps;
  r.options = {.optLevel = a.opt, .cpu = a.cpu, .threads = a.threads};
  r.source = std::filesystem::path(a.file).filename().string();
  std::string guard = "ADJIT_" + engine::cName(std::filesystem::path(a.header).stem().string()) + "_H";
  for (char& c : guard) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  r.headerGuard = guard;
  auto shared = std::shared_ptr<ir::Module>(m.impl().clone());
  for (const auto& [names, hessian] : {std::pair{&a.sparseJacobians, false}, std::pair{&a.sparseHessians, true}})
    for (const std::string& n : *names) {
      const std::string symbol = engine::cName(n) + (hessian ? "_hess" : "_jac");
      if (std::any_of(r.exports.begin(), r.exports.end(), [&](const auto& e) { return e.symbol == symbol; })) continue;
      const detail::SparseFunction s = detail::addSparseFunction(shared, n, hessian);
      r.exports.push_back({s.function, symbol, sparseWhat(n, hessian, *s.plan), sparsePreamble(symbol, *s.plan)});
    }
  engine::AotResult out = engine::compileAot(shared, r);
  writeAtomically({{a.output, out.object}, {a.header, out.header}});
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (argc >= 2 && !std::strcmp(argv[1], "--version")) {
      printVersion();
      return 0;
    }
    Args a = parseArgs(argc, argv);
    if (a.version) {
      printVersion();
      return 0;
    }
    checkOptionsApply(a);
    if (a.command == "opt") return runOpt(a);
    if (a.command == "dump") return runDump(a);
    if (a.command == "run") return runRun(a);
    if (a.command == "compile") return runCompile(a);
    usageError("unknown command '" + a.command + "'" + suggestion(a.command, {"opt", "dump", "run", "compile"}));
  } catch (const Error& e) {
    std::fprintf(stderr, "adjit: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adjit: internal error: %s\n", e.what());
    return 2;
  }
}
