#include "jemalloc_preload.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include "malloc_conf.h"

namespace trainctl {

#ifdef TRAINCTL_PRELOAD_JEMALLOC
namespace {

/// Whether this process allocates through jemalloc (the binary does not link it).
bool allocates_through_jemalloc() {
  return ::dlsym(RTLD_DEFAULT, "mallctl") != nullptr;
}

// Set in the environment of the process run_on_jemalloc starts: that it was started so, with the
// name the process had (executing /proc/self/exe names it "exe" in ps, top and pkill), and what
// LD_PRELOAD and MALLOC_CONF were before (each only when it was set).
constexpr const char* kStarted = "TRAINCTL_JEMALLOC_STARTED";
constexpr const char* kSavedPreload = "TRAINCTL_JEMALLOC_SAVED_LD_PRELOAD";
constexpr const char* kSavedConf = "TRAINCTL_JEMALLOC_SAVED_MALLOC_CONF";

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

/// Sets `name` to `value`, or unsets it when there is none.
void set_or_unset(const char* name, const std::optional<std::string>& value) {
  if (value)
    ::setenv(name, value->c_str(), 1);
  else
    ::unsetenv(name);
}

/// Debian's libjemalloc.so.2: in the directory glibc was loaded from (/lib/<triplet>), or in its
/// twin under /usr where /lib is not a link to /usr/lib (a root without merged /usr).
std::optional<std::string> installed_jemalloc() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&::getpid), &info) == 0 || info.dli_fname == nullptr)
    return std::nullopt;
  const std::filesystem::path glibc_dir = std::filesystem::path(info.dli_fname).parent_path();
  for (const std::filesystem::path& dir :
       {glibc_dir, std::filesystem::path("/usr") / glibc_dir.relative_path()}) {
    const std::filesystem::path path = dir / "libjemalloc.so.2";
    if (::access(path.c_str(), R_OK) == 0)
      return path.string();
  }
  return std::nullopt;
}

/// Puts LD_PRELOAD and MALLOC_CONF back to `preload` and `conf` and drops the markers above.
void restore(const std::optional<std::string>& preload, const std::optional<std::string>& conf) {
  set_or_unset("LD_PRELOAD", preload);
  set_or_unset("MALLOC_CONF", conf);
  for (const char* name : {kStarted, kSavedPreload, kSavedConf})
    ::unsetenv(name);
}

/// This process's arguments, as it was started.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> arguments;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\0', at);
    arguments.push_back(text.substr(at, end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return arguments;
}

/// This process's name (/proc/self/comm: the base name of what was executed, 15 bytes at most).
std::string own_name() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

void run_on_jemalloc(const std::function<void(const std::string&)>& warn) {
  if (const auto name = environment(kStarted)) {
    ::prctl(PR_SET_NAME, name->c_str());
    restore(environment(kSavedPreload), environment(kSavedConf));
    if (!allocates_through_jemalloc())
      warn("libjemalloc.so.2 could not be preloaded: allocating through glibc's malloc");
    return;
  }
  if (allocates_through_jemalloc())
    return;  // preloaded by whoever started this process
  const std::optional<std::string> library = installed_jemalloc();
  if (!library) {
    warn(
        "libjemalloc.so.2 is not installed (Debian's libjemalloc2): allocating through glibc's "
        "malloc, which costs this process more CPU and memory");
    return;
  }
  const std::optional<std::string> preload = environment("LD_PRELOAD");
  const std::optional<std::string> conf = environment("MALLOC_CONF");
  ::setenv(kStarted, own_name().c_str(), 1);
  set_or_unset(kSavedPreload, preload);
  set_or_unset(kSavedConf, conf);
  ::setenv("LD_PRELOAD", (preload ? *library + ":" + *preload : *library).c_str(), 1);
  ::setenv("MALLOC_CONF",
           (conf ? fmt::format("{},{}", kJemallocOptions, *conf) : std::string(kJemallocOptions))
               .c_str(),
           1);
  const std::vector<std::string> arguments = own_arguments();
  std::vector<char*> argv;
  for (const std::string& argument : arguments)
    argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  const int error = errno;  // execv returns only when it failed: go on as this process
  restore(preload, conf);
  warn(
      fmt::format("starting again with libjemalloc.so.2 failed ({}): allocating through "
                  "glibc's malloc",
                  std::strerror(error)));
}
#else
// Built with sanitizers or without jemalloc: their allocator stays.
void run_on_jemalloc(const std::function<void(const std::string&)>&) {}
#endif

}  // namespace trainctl
