// The commands a simulated container runs for pods/exec: a small shell (`sh -c` with `;`, `&&`,
// `||`), echo, cat of mounted files, env, hostname, exit, curl to the Istio endpoints.

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "api/well_known.h"
#include "json_access.h"
#include "sandbox/container_script.h"
#include "text.h"

namespace trainctl::sandbox {

namespace {

std::string basename(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string hostname_of(const nlohmann::json& pod) {
  std::string host = string_member(member(pod, "spec"), "hostname");
  return host.empty() ? string_member(member(pod, "metadata"), "name") : host;
}

/// The container's environment as a shell sees it: literal env values and HOSTNAME.
std::map<std::string, std::string> environment(const ExecContext& context) {
  std::map<std::string, std::string> env;
  env["HOSTNAME"] = hostname_of(context.pod);
  const nlohmann::json& vars = member(context.container, "env");
  if (vars.is_array()) {
    for (const auto& var : vars) {
      if (member(var, "value").is_string())
        env[string_member(var, "name")] = var["value"].get<std::string>();
    }
  }
  return env;
}

/// A file's content when a ConfigMap or Secret volume provides it.
std::optional<std::string> read_file(const ExecContext& context, std::string_view path) {
  if (path == "/etc/hostname")
    return hostname_of(context.pod) + "\n";
  const nlohmann::json& mounts = member(context.container, "volumeMounts");
  const nlohmann::json& volumes = member(member(context.pod, "spec"), "volumes");
  if (!mounts.is_array() || !volumes.is_array())
    return std::nullopt;
  const nlohmann::json* best = nullptr;
  std::string best_rel;
  std::size_t best_len = 0;
  for (const auto& mount : mounts) {
    std::string mount_path = string_member(mount, "mountPath");
    while (mount_path.size() > 1 && mount_path.back() == '/')
      mount_path.pop_back();
    const std::string sub_path = string_member(mount, "subPath");
    std::string rel;
    if (!sub_path.empty()) {
      if (path != mount_path)
        continue;
      rel = sub_path;
    } else if (path.size() > mount_path.size() + 1 && path.starts_with(mount_path + "/")) {
      rel = std::string(path.substr(mount_path.size() + 1));
    } else {
      continue;
    }
    if (mount_path.size() >= best_len) {
      best = &mount;
      best_rel = rel;
      best_len = mount_path.size();
    }
  }
  if (!best)
    return std::nullopt;
  const std::string volume_name = string_member(*best, "name");
  for (const auto& volume : volumes) {
    if (string_member(volume, "name") != volume_name)
      continue;
    const bool is_secret = member(volume, "secret").is_object();
    const nlohmann::json& source = is_secret ? volume["secret"] : member(volume, "configMap");
    if (!source.is_object())
      return std::nullopt;
    std::string key = best_rel;
    const nlohmann::json& items = member(source, "items");
    if (items.is_array() && !items.empty()) {
      key.clear();
      for (const auto& item : items) {
        if (string_member(item, "path") == best_rel)
          key = string_member(item, "key");
      }
      if (key.empty())
        return std::nullopt;
    }
    const std::string object_name = string_member(source, is_secret ? "secretName" : "name");
    if (!context.lookup)
      return std::nullopt;
    const std::optional<nlohmann::json> object =
        context.lookup(is_secret ? "secrets" : "configmaps", object_name);
    if (!object)
      return std::nullopt;
    const nlohmann::json& data = member(*object, "data");
    if (member(data, key).is_string()) {
      const std::string value = data[key].get<std::string>();
      if (!is_secret)
        return value;
      return base64_decode(value);
    }
    const nlohmann::json& binary = member(*object, "binaryData");
    if (!is_secret && member(binary, key).is_string())
      return base64_decode(binary[key].get<std::string>());
    return std::nullopt;
  }
  return std::nullopt;
}

/// The commands the container's image lacks: the per-container annotation, else the pod's.
std::set<std::string> absent_commands(const ExecContext& context) {
  const std::string key(api::annotations::sandbox_absent_commands);
  const nlohmann::json& annotations =
      object_member(object_member(context.pod, "metadata"), "annotations");
  const std::string per_container = key + "." + string_member(context.container, "name");
  const std::string listed = string_member(
      annotations, annotations.contains(per_container) ? std::string_view(per_container) : key);
  std::set<std::string> absent;
  std::istringstream words(listed);
  for (std::string word; words >> word;)
    absent.insert(word);
  return absent;
}

struct ShellState {
  const ExecContext& context;
  std::map<std::string, std::string> env;
  std::set<std::string> absent;
  ExecResult result;
  bool& quit_proxy;
  bool exited = false;
};

/// An http://host:port/path URL's pieces.
struct Url {
  std::string host;
  std::string port = "80";
  std::string path = "/";
};

Url parse_url(std::string_view text) {
  Url url;
  if (const std::size_t scheme = text.find("://"); scheme != std::string_view::npos)
    text.remove_prefix(scheme + 3);
  const std::size_t slash = text.find('/');
  std::string_view authority = text.substr(0, slash);
  if (slash != std::string_view::npos)
    url.path = std::string(text.substr(slash));
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    url.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
  }
  url.host = std::string(authority);
  return url;
}

int run_curl(ShellState& shell, const std::vector<std::string>& argv) {
  static const std::vector<std::string_view> kTakesValue = {
      "-X", "--request",   "-d",      "--data",     "--data-raw",        "-H", "--header",
      "-o", "--output",    "-m",      "--max-time", "--connect-timeout", "-u", "--user",
      "-w", "--write-out", "--retry", "-A",         "--user-agent"};
  std::string method = "GET";
  std::string target;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool takes_value =
        std::find(kTakesValue.begin(), kTakesValue.end(), arg) != kTakesValue.end();
    if (takes_value && i + 1 < argv.size()) {
      const std::string& value = argv[++i];
      if (arg == "-X" || arg == "--request")
        method = value;
      else if (arg.starts_with("-d") || arg.starts_with("--data"))
        method = method == "GET" ? "POST" : method;
      continue;
    }
    if (arg.starts_with("-X") && arg.size() > 2) {
      method = arg.substr(2);
    } else if (arg.starts_with("--request=")) {
      method = arg.substr(10);
    } else if (!arg.starts_with("-") && target.empty()) {
      target = arg;
    }
  }
  if (target.empty()) {
    shell.result.stderr_text += "curl: no URL specified!\n";
    return 2;
  }
  const Url url = parse_url(target);
  const bool local = url.host == "localhost" || url.host == "127.0.0.1" || url.host == "[::1]";
  const bool istio_port = url.port == "15020" || url.port == "15000";
  if (local && istio_port && shell.context.proxy_running) {
    if (url.path == "/quitquitquit" && to_lower(method) == "post") {
      shell.quit_proxy = true;
      shell.result.stdout_text += "OK\n";
      return 0;
    }
    shell.result.stdout_text += url.path == "/quitquitquit" ? "Method Not Allowed\n" : "OK\n";
    return 0;
  }
  shell.result.stderr_text += fmt::format(
      "curl: (7) Failed to connect to {} port {} after 0 ms: Couldn't connect to server\n",
      url.host, url.port);
  return 7;
}

int run_command(ShellState& shell, const std::vector<std::string>& argv);

/// Splits a `sh -c` script into words and the operators ; && || between commands, expanding
/// $NAME and ${NAME} outside single quotes.
struct ScriptToken {
  std::string text;
  bool is_operator = false;
};

std::vector<ScriptToken> tokenize(std::string_view script,
                                  const std::map<std::string, std::string>& env) {
  std::vector<ScriptToken> tokens;
  std::string word;
  bool in_word = false;
  auto flush = [&] {
    if (in_word)
      tokens.push_back({word, false});
    word.clear();
    in_word = false;
  };
  auto expand = [&](std::size_t& i) {
    std::string name;
    if (i + 1 < script.size() && script[i + 1] == '{') {
      const std::size_t close = script.find('}', i + 2);
      if (close == std::string_view::npos)
        return std::string("$");
      name = std::string(script.substr(i + 2, close - i - 2));
      i = close;
    } else {
      std::size_t j = i + 1;
      while (j < script.size() &&
             (std::isalnum(static_cast<unsigned char>(script[j])) || script[j] == '_')) {
        ++j;
      }
      if (j == i + 1)
        return std::string("$");
      name = std::string(script.substr(i + 1, j - i - 1));
      i = j - 1;
    }
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  for (std::size_t i = 0; i < script.size(); ++i) {
    const char c = script[i];
    if (c == '\'') {
      const std::size_t close = script.find('\'', i + 1);
      word += script.substr(i + 1, close == std::string_view::npos ? close : close - i - 1);
      in_word = true;
      i = close == std::string_view::npos ? script.size() : close;
    } else if (c == '"') {
      in_word = true;
      for (++i; i < script.size() && script[i] != '"'; ++i) {
        if (script[i] == '\\' && i + 1 < script.size() &&
            std::string_view("\"\\$`").find(script[i + 1]) != std::string_view::npos) {
          word += script[++i];
        } else if (script[i] == '$') {
          word += expand(i);
        } else {
          word += script[i];
        }
      }
    } else if (c == '\\' && i + 1 < script.size()) {
      word += script[++i];
      in_word = true;
    } else if (c == '$') {
      word += expand(i);
      in_word = true;
    } else if (c == ';' || c == '\n') {
      flush();
      tokens.push_back({";", true});
    } else if ((c == '&' || c == '|') && i + 1 < script.size() && script[i + 1] == c) {
      flush();
      tokens.push_back({std::string(2, c), true});
      ++i;
    } else if (c == ' ' || c == '\t') {
      flush();
    } else {
      word += c;
      in_word = true;
    }
  }
  flush();
  return tokens;
}

int run_script(ShellState& shell, std::string_view script) {
  int status = 0;
  std::string pending_operator = ";";
  std::vector<std::string> words;
  auto run_pending = [&] {
    if (words.empty())
      return;
    const bool skip =
        (pending_operator == "&&" && status != 0) || (pending_operator == "||" && status == 0);
    if (!skip)
      status = run_command(shell, words);
    words.clear();
  };
  for (const ScriptToken& token : tokenize(script, shell.env)) {
    if (shell.exited)
      break;
    if (!token.is_operator) {
      words.push_back(token.text);
      continue;
    }
    run_pending();
    pending_operator = token.text;
  }
  if (!shell.exited)
    run_pending();
  return status;
}

int run_command(ShellState& shell, const std::vector<std::string>& argv) {
  if (argv.empty())
    return 0;
  const std::string command = basename(argv[0]);
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  ExecResult& out = shell.result;
  if (shell.absent.contains(command)) {
    out.stderr_text += fmt::format("sh: {}: not found\n", argv[0]);
    return 127;
  }
  if ((command == "sh" || command == "bash" || command == "ash" || command == "dash")) {
    if (args.size() >= 2 && args[0] == "-c")
      return run_script(shell, args[1]);
    return 0;
  }
  if (command == "echo") {
    const bool newline = args.empty() || args[0] != "-n";
    const auto first = newline ? args.begin() : args.begin() + 1;
    out.stdout_text += fmt::format("{}", fmt::join(first, args.end(), " "));
    if (newline)
      out.stdout_text += "\n";
    return 0;
  }
  if (command == "true" || command == ":" || command == "sleep")
    return 0;
  if (command == "false")
    return 1;
  if (command == "exit") {
    shell.exited = true;
    const std::optional<int> code = args.empty() ? std::optional<int>(0) : parse_exit_code(args[0]);
    return code.value_or(2) & 0xff;
  }
  if (command == "hostname") {
    out.stdout_text += hostname_of(shell.context.pod) + "\n";
    return 0;
  }
  if (command == "env" || command == "printenv") {
    if (args.empty()) {
      for (const auto& [name, value] : shell.env)
        out.stdout_text += fmt::format("{}={}\n", name, value);
      return 0;
    }
    int status = 0;
    for (const auto& name : args) {
      auto it = shell.env.find(name);
      if (it == shell.env.end())
        status = 1;
      else
        out.stdout_text += it->second + "\n";
    }
    return status;
  }
  if (command == "cat") {
    int status = 0;
    for (const auto& path : args) {
      if (auto content = read_file(shell.context, path)) {
        out.stdout_text += *content;
      } else {
        out.stderr_text += fmt::format("cat: {}: No such file or directory\n", path);
        status = 1;
      }
    }
    return status;
  }
  const bool in_proxy = string_member(shell.context.container, "name") == "istio-proxy";
  if (command == "pilot-agent" && in_proxy) {
    if (args.size() == 3 && args[0] == "request" && to_lower(args[1]) == "post" &&
        (args[2] == "quitquitquit" || args[2] == "/quitquitquit")) {
      shell.quit_proxy = true;
      return 0;
    }
    out.stderr_text +=
        fmt::format("Error: unsupported pilot-agent command: {}\n", fmt::join(args, " "));
    return 1;
  }
  if (command == "curl")
    return run_curl(shell, argv);
  out.stderr_text += fmt::format("sh: {}: not found\n", argv[0]);
  return 127;
}

}  // namespace

ExecResult run_exec_command(const std::vector<std::string>& argv, const ExecContext& context,
                            bool& quit_proxy) {
  quit_proxy = false;
  ShellState shell{context, environment(context), absent_commands(context), {}, quit_proxy};
  if (!argv.empty() && shell.absent.contains(basename(argv[0]))) {
    // The runtime execs argv directly: no shell says "not found", the exec itself fails.
    shell.result.failure = fmt::format(
        "failed to exec in container: failed to start exec {:?}: OCI runtime exec failed: exec "
        "failed: unable to start container process: exec: {:?}: executable file not found in "
        "$PATH: unknown",
        fmt::format("{:016x}", std::hash<std::string>{}(uid_of(context.pod) + argv[0])), argv[0]);
    return shell.result;
  }
  shell.result.exit_code = run_command(shell, argv);
  return shell.result;
}

}  // namespace trainctl::sandbox
