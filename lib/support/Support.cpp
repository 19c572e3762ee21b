// support/Support.cpp — errors, assertions, logging and dump files.
#include "support/Assert.h"
#include "support/Log.h"

#include <adjit/error.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace adjit {

Location::Location(std::string_view f, uint32_t l, uint32_t c) : line(l), column(c) {
  if (f.empty()) return;
  // Few distinct names (one per source or .adj file), so the pool stays small;
  // set nodes never move and the pool is never destroyed (not even at exit),
  // so the views stay valid.
  static std::mutex mutex;
  static auto* pool = new std::unordered_set<std::string>;
  std::lock_guard lock(mutex);
  file = *pool->emplace(f).first;
}

std::string Location::str() const {
  if (!known()) return {};
  std::string s = file.empty() ? "" : std::string(file) + ":";
  s += std::to_string(line);
  if (column) {
    s += ':'; // appended, not ":" + ...: GCC 12 warns falsely (-Wrestrict) on that form
    s += std::to_string(column);
  }
  return s;
}

static std::string formatError(const std::string& message, const Location& where) {
  return where.known() ? where.str() + ": error: " + message : "error: " + message;
}

Error::Error(std::string message, Location where)
    : std::runtime_error(formatError(message, where)), message_(std::move(message)),
      where_(std::move(where)) {}

void assertionFailed(const char* cond, const char* file, int line, const std::string& msg) {
  std::string s = std::string("adjit internal error at ") + file + ":" + std::to_string(line) +
                  ": assertion '" + cond + "' failed";
  if (!msg.empty()) s += ": " + msg;
  throw InternalError(s);
}

/// The channels ADJIT_LOG may name; "all" (or "1") names every one.
constexpr std::string_view kLogChannels[] = {"compile", "passes"};

/// The comma-separated items of an ADJIT_LOG setting (empty ones dropped).
static std::vector<std::string_view> logItems(std::string_view s) {
  std::vector<std::string_view> items;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    if (end > pos) items.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return items;
}

static const std::string& logSetting() {
  static const std::string s = [] {
    const char* v = std::getenv("ADJIT_LOG");
    std::string setting = v ? v : "";
    // A misspelt channel would log nothing, silently: say so once per process.
    std::string unknown, known;
    int count = 0;
    for (std::string_view item : logItems(setting))
      if (item != "all" && item != "1" && std::find(std::begin(kLogChannels), std::end(kLogChannels), item) == std::end(kLogChannels))
        unknown += (count++ ? ", '" : "'") + std::string(item) + "'";
    for (std::string_view c : kLogChannels) known += std::string(c) + ", ";
    if (count)
      std::fprintf(stderr, "adjit: warning: ADJIT_LOG: unknown value%s %s ignored (known: %sall)\n", count > 1 ? "s" : "",
                   unknown.c_str(), known.c_str());
    return setting;
  }();
  return s;
}

bool logEnabled(std::string_view channel) {
  ADJIT_ASSERT(std::find(std::begin(kLogChannels), std::end(kLogChannels), channel) != std::end(kLogChannels),
               "log channel '" + std::string(channel) + "' is not in kLogChannels");
  for (std::string_view item : logItems(logSetting()))
    if (item == channel || item == "all" || item == "1") return true;
  return false;
}

void logLine(std::string_view channel, const std::string& line) {
  static std::mutex m;
  std::lock_guard lock(m);
  std::fprintf(stderr, "[adjit:%.*s] %s\n", int(channel.size()), channel.data(), line.c_str());
}

const std::string& dumpDirectory() {
  static const std::string d = [] {
    const char* v = std::getenv("ADJIT_DUMP");
    return std::string(v ? v : "");
  }();
  return d;
}

void dumpFile(const std::string& name, std::string_view text) {
  const std::string& dir = dumpDirectory();
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) { // said once per process, not for every file
    static std::once_flag once;
    std::call_once(once, [&] {
      std::fprintf(stderr, "adjit: warning: ADJIT_DUMP: cannot write files in '%s'%s\n", dir.c_str(),
                   ec ? (" (" + ec.message() + ")").c_str() : "");
    });
  }
}

} // namespace adjit
