// bench/gradbench/tool.cpp — the main every eval's executable shares (tool.h).
#include "tool.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

namespace gradbench {

namespace {

void flatten(const json& j, std::vector<double>& out) {
  if (j.is_array())
    for (const json& e : j) flatten(e, out);
  else
    out.push_back(j.get<double>());
}

int run(const std::string& path, const std::string& name, const Prepare& prepare) {
  using Clock = std::chrono::steady_clock;
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "cannot read the input file %s\n", path.c_str());
    return 1;
  }
  const json input = json::parse(file);
  // (hello's input is a bare number: no run counts.)
  const int minRuns = input.is_object() ? input.value("min_runs", 1) : 1;
  const double minSeconds = input.is_object() ? input.value("min_seconds", 0.0) : 0.0;
  if (minRuns < 1) {
    std::fprintf(stderr, "%s: min_runs must be at least 1, got %d\n", path.c_str(), minRuns);
    return 1;
  }
  const auto prepareStart = Clock::now();
  std::unique_ptr<Function> function = prepare(input);
  const int64_t prepareNs = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - prepareStart).count();
  std::vector<int64_t> times;
  double seconds = 0;
  while (int(times.size()) < minRuns || seconds < minSeconds) {
    const auto start = Clock::now();
    function->evaluate();
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    times.push_back(ns);
    seconds += double(ns) * 1e-9;
    // The first call ran tiered compilation's first tier; the later runs
    // time the optimised code, as a program calling the function many times
    // gets it. The wait is not timed (see tool.h).
    if (times.size() == 1) adjit::wait_all_optimized();
  }
  std::cout << function->output().dump() << '\n';
  std::cout << "{\"name\": \"prepare\", \"nanoseconds\": " << prepareNs << "}\n";
  for (int64_t t : times) std::cout << "{\"name\": \"evaluate\", \"nanoseconds\": " << t << "}\n";
  std::cout.flush();
  return 0;
}

} // namespace

int main(int argc, char** argv, const std::map<std::string, Prepare>& functions) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT.json FUNCTION\n", argv[0]);
    return 1;
  }
  const auto it = functions.find(argv[2]);
  if (it == functions.end()) {
    std::string known;
    for (const auto& [name, prepare] : functions) known += (known.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "%s: unknown function '%s' (this eval has: %s)\n", argv[0], argv[2], known.c_str());
    return 1;
  }
  try {
    return run(argv[1], it->first, it->second);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %s %s: %s\n", argv[0], argv[1], argv[2], e.what());
    return 1;
  }
}

std::vector<double> numbers(const json& j) {
  std::vector<double> out;
  flatten(j, out);
  return out;
}

adjit::Array array(const json& j, std::vector<int64_t> shape) {
  return adjit::Array(numbers(j), std::move(shape));
}

} // namespace gradbench
