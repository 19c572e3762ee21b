// ir/ModuleApi.cpp — the public adjit::Module wrapper around ir::Module.
#include "ir/Interpreter.h"
#include "ir/Text.h"
#include "ir/Verifier.h"

#include <adjit/module.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace adjit {
namespace autodiff {
// Defined by the autodiff layer: saving a module first traces the VJPs of its
// custom-gradient call sites, which exist only in this process until then.
void materializeAll(const std::shared_ptr<ir::Module>& m);
} // namespace autodiff

Module::Module() : impl_(std::make_shared<ir::Module>()) {}

std::string Module::str(bool locations) const { return ir::print(*impl_, {.locations = locations}); }

Module Module::parse(std::string_view text, std::string_view filename) {
  return Module(std::shared_ptr<ir::Module>(ir::parse(text, filename)));
}

Module Module::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error("cannot read '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

void Module::save(const std::string& path) const {
  autodiff::materializeAll(impl_);
  const std::string text = str(true);
  const std::string tmp = path + ".tmp" + std::to_string(std::hash<std::string>{}(text) & 0xffff);
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw Error("cannot write '" + path + "'");
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error("cannot write '" + path + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("cannot write '" + path + "': " + ec.message());
  }
}

void Module::add(const Module& other) {
  for (const auto& f : other.impl_->functions) {
    if (impl_->lookup(f->name)) throw Error("Module::add: both modules have a function named @" + f->name);
    impl_->functions.push_back(std::make_unique<ir::Function>(*f));
  }
  for (const auto& [k, v] : other.impl_->lazyVjps) impl_->lazyVjps[k] = ir::copyLazyVjp(*v);
}

std::vector<std::string> Module::function_names() const {
  std::vector<std::string> n;
  for (const auto& f : impl_->functions) n.push_back(f->name);
  return n;
}

void Module::verify() const { ir::verify(*impl_); }

std::vector<Array> Module::interpret(std::string_view name, const std::vector<Array>& args) const {
  return ir::interpret(*impl_, name, args);
}

} // namespace adjit
