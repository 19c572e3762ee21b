// support/Log.h — ADJIT_LOG channels and ADJIT_DUMP, read once from the environment.
#pragma once

#include <string>
#include <string_view>

namespace adjit {

/// True when ADJIT_LOG (a comma-separated list, or "all") names `channel`.
bool logEnabled(std::string_view channel);
/// Writes one line to stderr, prefixed with "[adjit:<channel>] ".
void logLine(std::string_view channel, const std::string& line);
/// The ADJIT_DUMP directory, or empty when dumping is off.
const std::string& dumpDirectory();
/// Writes `text` to `<ADJIT_DUMP>/<name>` (creating the folder); no-op when off.
void dumpFile(const std::string& name, std::string_view text);

} // namespace adjit
