// The shipped templates rendered with hostile values, as `submit` renders them: a values file
// (YAML) checked against the template's schema, then rendered and parsed as the job manifest.
// Values reach a template already spelled as YAML, so whatever values pass the schema check, the
// rendered text must parse: a value that breaks the YAML (or injects keys) is a bug.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "api/job.h"
#include "api/manifest.h"
#include "api/validation.h"
#include "error.h"
#include "render/render.h"
#include "render/value_schema.h"
#include "yaml_json.h"

namespace {

std::string shipped_template(std::string_view kind) {
  std::ifstream in(std::string(TRAINCTL_SOURCE_DIR) + "/templates/" + std::string(kind) +
                   ".yaml.mustache");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace api = trainctl::api;
  namespace render = trainctl::render;
  static const std::string templates[] = {shipped_template("tfjob"), shipped_template("pytorchjob"),
                                          shipped_template("mpijob")};
  static const api::JobKind kinds[] = {api::JobKind::TFJob, api::JobKind::PyTorchJob,
                                       api::JobKind::MPIJob};
  if (size == 0)
    return 0;
  const std::size_t which = data[0] % 3;
  nlohmann::json values;
  try {
    values = trainctl::yaml_to_json(
        YAML::Load(std::string(reinterpret_cast<const char*>(data) + 1, size - 1)));
  } catch (const std::exception&) {
    return 0;  // not YAML, or not UTF-8: the values file is refused before rendering
  }
  if (!values.is_object())
    return 0;
  try {
    render::check_values(values, render::builtin_schema(kinds[which]), {.label = "fuzz.yaml"});
    render::require_image(values, render::builtin_schema(kinds[which]));
  } catch (const trainctl::Error&) {
    return 0;
  }
  std::string yaml;
  try {
    yaml = render::render_template(templates[which], values, "fuzz");
  } catch (const trainctl::Error&) {
    return 0;  // a documented template error
  }
  std::vector<api::Manifest> manifests;
  try {
    manifests = api::parse_manifests(yaml, "fuzz (rendered)");
  } catch (const trainctl::Error&) {
    __builtin_trap();  // values that passed the schema broke the template's YAML
  }
  for (auto& m : manifests) {
    try {
      api::validate_job(m);
    } catch (const trainctl::Error&) {
    }
  }
  return 0;
}
