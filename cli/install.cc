// trainctl install | uninstall: put the controller into a cluster (CRDs, RBAC, Deployment) or take
// it out again. The manifests are compiled in (install_manifests.h); install applies them with
// server-side apply, so running it again changes nothing and an upgrade is the same command.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <thread>

#include "commands.h"
#include "duration.h"
#include "error.h"
#include "install_manifests.h"
#include "json_access.h"
#include "printer.h"
#include "trainctl/version.h"

namespace trainctl::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// Polls `done` every 200 ms until it holds; Error(WaitTimeout) naming `what` at `deadline`.
void wait_for(const std::function<bool()>& done, Clock::time_point deadline,
              const std::string& what) {
  while (!done()) {
    if (Clock::now() >= deadline)
      throw Error(ErrorKind::WaitTimeout, fmt::format("timed out waiting for {}", what));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

/// Whether the object no longer exists.
bool gone(kube::Client& client, const json& object) {
  try {
    client.get(resource_of(object), namespace_of(object), name_of(object));
    return false;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::NotFound)
      return true;
    throw;
  }
}

/// Flags shared by install and uninstall: the namespace (the global -n/--namespace, else
/// trainctl-system) and how long to wait; and the command's connection.
struct TargetFlags {
  std::string timeout = "2m";

  InstallSettings settings;
  Clock::duration wait_timeout{};
  Connection connection;

  void Complete(const GlobalFlags& flags) {
    connection = Connection(flags);
    if (!flags.overrides.namespace_.empty())
      settings.ns = flags.overrides.namespace_;
    wait_timeout = parse_duration_flag("--timeout", timeout);
  }
};

struct InstallOptions {
  TargetFlags target;
  bool dry_run = false;
  std::string output;

  void Complete(const GlobalFlags& flags) { target.Complete(flags); }

  void Validate() const {
    const OutputFormat format = parse_output_format(output.empty() ? "yaml" : output);
    if (format != OutputFormat::Yaml && format != OutputFormat::Json)
      throw Error(ErrorKind::Usage, "install: -o/--output is yaml or json");
    if (!output.empty() && !dry_run)
      throw Error(ErrorKind::Usage, "install: -o/--output only goes with --dry-run");
  }

  void Run() {
    const std::vector<json> objects = install_objects(target.settings);
    if (dry_run) {
      print_documents(std::cout, objects, parse_output_format(output.empty() ? "yaml" : output));
      std::cerr << image_notice(objects, target.settings);
      return;
    }
    kube::Client& client = target.connection.client();
    const auto deadline = Clock::now() + target.wait_timeout;
    for (const json& object : objects) {
      client.patch(resource_of(object), namespace_of(object), name_of(object),
                   kube::PatchType::Apply, object, {.field_manager = "trainctl", .force = true});
      std::cout << display_name(object) << " serverside-applied\n";
      if (is_crd(object))
        wait_until_served(client, object, deadline);
    }
    std::cerr << image_notice(objects, target.settings);
  }

  /// Jobs cannot be created until the API server serves the new kind (the CRD is Established).
  static void wait_until_served(kube::Client& client, const json& crd, Clock::time_point deadline) {
    const kube::Resource r = defined_resource(crd);
    wait_for([&] { return client.serves(r); }, deadline,
             fmt::format("{} to be served", r.display_name()));
  }
};

struct UninstallOptions {
  TargetFlags target;
  bool keep_crds = false;

  void Complete(const GlobalFlags& flags) { target.Complete(flags); }

  void Run() {
    std::vector<json> objects = install_objects(target.settings);
    std::erase_if(objects, [&](const json& o) { return keep_crds && is_crd(o); });
    kube::Client& client = target.connection.client();
    std::vector<json> deleted;
    for (auto it = objects.rbegin(); it != objects.rend(); ++it) {
      try {
        client.remove(resource_of(*it), namespace_of(*it), name_of(*it));
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::NotFound)
          throw;
        continue;
      }
      std::cout << display_name(*it) << " deleted\n";
      deleted.push_back(*it);
    }
    const auto deadline = Clock::now() + target.wait_timeout;
    for (const json& object : deleted) {
      wait_for([&] { return gone(client, object); }, deadline,
               fmt::format("{} to be deleted", display_name(object)));
    }
  }
};

void add_target_flags(CLI::App& cmd, TargetFlags& target) {
  cmd.add_option("--timeout", target.timeout,
                 "How long to wait for CRDs to be served or objects to be gone (e.g. 90s, 5m)")
      ->type_name("DURATION")
      ->capture_default_str();
}

}  // namespace

void add_install_command(CLI::App& app, const GlobalFlags& flags) {
  auto install = std::make_shared<InstallOptions>();
  auto* cmd = app.add_subcommand(
      "install",
      "Install the controller: CRDs (TFJob, PyTorchJob, MPIJob, PodGroup, Queue), RBAC and a "
      "Deployment in namespace trainctl-system (or -n NAMESPACE); server-side apply, so running "
      "it again is safe");
  cmd->add_flag("--dry-run", install->dry_run, "Print the objects instead of applying them");
  cmd->add_option("-o,--output", install->output, "With --dry-run: yaml (default) or json");
  cmd->add_flag("--crds-only", install->target.settings.crds_only,
                "Only the CustomResourceDefinitions (e.g. to use another controller)");
  cmd->add_option("--image", install->target.settings.image,
                  "The controller's image, pushed where every node can pull it (default: "
                  "trainctl:VERSION, which no registry serves: build it with packaging/image "
                  "and push it with skopeo copy; see the README's install section)");
  add_target_flags(*cmd, install->target);
  add_examples(*cmd, fmt::format(R"(# Build the image, push it where the nodes pull from, install
packaging/image
skopeo copy oci:build/image/oci:{0} docker://registry.example/trainctl:{0}
trainctl install --image registry.example/trainctl:{0}
# Only the CRDs, or see what would be applied
trainctl install --crds-only
trainctl install --dry-run -o yaml)",
                                 kVersion));
  run_verb(*cmd, install, flags);

  auto uninstall = std::make_shared<UninstallOptions>();
  auto* un = app.add_subcommand(
      "uninstall",
      "Remove what install created, in reverse order. Deleting the CRDs deletes every TFJob, "
      "PyTorchJob, MPIJob, PodGroup and Queue in the cluster: keep them with --keep-crds");
  un->add_flag("--keep-crds", uninstall->keep_crds,
               "Keep the CustomResourceDefinitions, and with them every job and queue");
  add_target_flags(*un, uninstall->target);
  add_examples(*un, R"(# Remove the controller but keep the CRDs, and with them every job and queue
trainctl uninstall --keep-crds)");
  run_verb(*un, uninstall, flags);
}

}  // namespace trainctl::cli
