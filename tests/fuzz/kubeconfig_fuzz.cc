// Kubeconfig loading from bytes: parse and merge, resolve a connection, print as `config view`.
// load_kubeconfigs reads files, so the input is written to a per-process file first.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "error.h"
#include "kube/kubeconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace kube = trainctl::kube;
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("trainctl-fuzz-kubeconfig-" + std::to_string(getpid()));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const kube::Kubeconfig config = kube::load_kubeconfigs({file});
    (void)kube::render_kubeconfig(config);
    (void)kube::render_kubeconfig(config, {.minify = true, .raw = true});
    kube::ConfigEnvironment env;
    env.service_account_dir = "/nonexistent";
    (void)kube::resolve_rest_config(config, {}, env);
  } catch (const trainctl::Error&) {
  }
  std::filesystem::remove(file);
  return 0;
}
