// jit/DiskCache.cpp — entries are one file each, `<dir>/<key>.adjk`:
//   "ADJITC1\n", key hash, key check, part count, then each part as
//   (size, bytes), and last a checksum of everything before it.
// Host-local, so integers are stored in the host's byte order.
#include "jit/DiskCache.h"

#include "support/Hash.h"
#include "support/Log.h"

#include <fmt/format.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace adjit::engine {
namespace {

constexpr std::string_view kMagic = "ADJITC1\n";
constexpr uint64_t kMaxParts = 64;

std::atomic<bool> unusable{false}; ///< set once the directory failed us

void warnOnce(const std::string& message) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "adjit: warning: %s\n", message.c_str()); });
}

void put64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

/// Reads the GNU build-id note of the loaded object that contains `addr`.
struct BuildIdSearch {
  uintptr_t addr;
  std::string id;
};

int findBuildId(dl_phdr_info* info, std::size_t, void* data) {
  auto* s = static_cast<BuildIdSearch*>(data);
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && s->addr >= lo && s->addr < lo + ph.p_memsz) contains = true;
  }
  if (!contains) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        for (unsigned k = 0; k < note->n_descsz; ++k) s->id += fmt::format("{:02x}", static_cast<unsigned char>(desc[k]));
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;
}

/// Creates `dir` (mode 0700, parents as usual) if needed; empty on success,
/// else why it cannot be used.
std::string prepare(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(dir);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::strerror(errno);
  if (!fs::is_directory(p, ec)) return "not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return {};
}

std::string entryPath(const std::string& dir, const CacheKey& key) { return dir + "/" + key.hex() + ".adjk"; }

} // namespace

CacheKey CacheKey::of(std::string_view material) { return of(LongHash().update(material)); }

CacheKey CacheKey::of(const LongHash& h) {
  auto [hash, check] = h.finish();
  return {hash, check};
}

std::string CacheKey::hex() const { return fmt::format("{:016x}", hash); }

const std::string& buildIdentity() {
  static const std::string id = [] {
    BuildIdSearch s{reinterpret_cast<uintptr_t>(&findBuildId), {}};
    dl_iterate_phdr(findBuildId, &s);
    if (!s.id.empty()) return "build-id " + s.id;
    return std::string("adjit built " __DATE__ " " __TIME__);
  }();
  return id;
}

std::string cacheDirectory() {
  if (unusable.load(std::memory_order_relaxed)) return {};
  if (const char* v = std::getenv("ADJIT_CACHE_DIR")) return v; // set and empty: disabled
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/adjit";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/adjit";
  return {};
}

std::optional<std::vector<std::string>> diskLoad(const CacheKey& key) {
  const std::string dir = cacheDirectory();
  if (dir.empty()) return std::nullopt;
  const std::string path = entryPath(dir, key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = std::move(buf).str();
  auto corrupt = [&](const char* why) -> std::optional<std::vector<std::string>> {
    if (logEnabled("compile")) logLine("compile", fmt::format("disk cache: ignoring {} entry {}", why, path));
    return std::nullopt;
  };
  std::size_t at = 0;
  auto get64 = [&](uint64_t& v) {
    if (bytes.size() - at < sizeof v) return false;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  if (bytes.size() < kMagic.size() + 8 * 4 || bytes.compare(0, kMagic.size(), kMagic) != 0) return corrupt("truncated or foreign");
  at = kMagic.size();
  uint64_t hash = 0, check = 0, count = 0, sum = 0;
  if (!get64(hash) || !get64(check) || hash != key.hash || check != key.check) return corrupt("mismatched");
  if (!get64(count) || count > kMaxParts) return corrupt("corrupt");
  std::vector<std::string> parts;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t size = 0;
    if (!get64(size) || size > bytes.size() - at) return corrupt("truncated");
    parts.emplace_back(bytes, at, size);
    at += size;
  }
  const std::size_t body = at;
  if (!get64(sum) || at != bytes.size() || sum != hashBytes(std::string_view(bytes).substr(0, body)))
    return corrupt("corrupt");
  return parts;
}

void diskStore(const CacheKey& key, const std::vector<std::string>& parts) {
  const std::string dir = cacheDirectory();
  if (dir.empty()) return;
  auto fail = [&](const std::string& why) {
    unusable.store(true, std::memory_order_relaxed);
    warnOnce(fmt::format("kernel cache directory '{}' is not usable ({}); caching in memory only", dir, why));
  };
  if (std::string why = prepare(dir); !why.empty()) return fail(why);
  std::string bytes(kMagic);
  put64(bytes, key.hash);
  put64(bytes, key.check);
  put64(bytes, parts.size());
  for (const std::string& p : parts) {
    put64(bytes, p.size());
    bytes += p;
  }
  put64(bytes, hashBytes(bytes));
  static std::atomic<uint64_t> serial{0};
  const std::string final = entryPath(dir, key);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", final, ::getpid(), serial.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail(std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const int err = done == bytes.size() ? 0 : errno;
  if (::close(fd) != 0 || err != 0 || ::rename(tmp.c_str(), final.c_str()) != 0) {
    const std::string why = std::strerror(err ? err : errno);
    ::unlink(tmp.c_str());
    return fail(why);
  }
}

} // namespace adjit::engine
