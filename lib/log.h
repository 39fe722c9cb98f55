#pragma once

// Structured logs of long-running processes (the controller): one line per message on stderr, as
// text (`2024-05-01T12:00:00.123Z info reconciled job=default/x duration=3ms`) or as JSON
// (`{"ts":"...","level":"info","msg":"reconciled","job":"default/x"}`) for log collectors.

#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainctl {

enum class LogFormat { Text, Json };

/// Key-value pairs attached to a message, in order.
using LogFields = std::vector<std::pair<std::string, std::string>>;

class Logger {
 public:
  /// Messages at verbosity > `verbosity` are dropped; errors, warnings and info are verbosity 0.
  Logger(std::ostream& out, LogFormat format, int verbosity);

  void info(std::string_view message, const LogFields& fields = {}) {
    write("info", message, fields);
  }
  /// Something is wrong but handled (e.g. the API server was lost and is being relisted from).
  void warning(std::string_view message, const LogFields& fields = {}) {
    write("warning", message, fields);
  }
  void error(std::string_view message, const LogFields& fields = {}) {
    write("error", message, fields);
  }
  /// Debug detail shown from `-v level` on.
  void debug(int level, std::string_view message, const LogFields& fields = {}) {
    if (enabled(level))
      write("debug", message, fields);
  }
  /// Whether debug(level, ...) writes: for fields that cost to build.
  bool enabled(int level) const { return level <= verbosity_; }

 private:
  void write(std::string_view level, std::string_view message, const LogFields& fields);

  std::ostream& out_;
  LogFormat format_;
  int verbosity_;
  std::mutex mutex_;
};

/// "text" or "json"; anything else is ErrorKind::Usage naming the flag.
LogFormat parse_log_format(std::string_view name);

}  // namespace trainctl
