#pragma once

// The output of a followed job: log lines behind a coloured `[worker-1] ` prefix, notes, warnings
// and one live progress line on a terminal.

#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <string_view>

namespace trainctl::cli {

/// Where the lines of a followed job go: log lines behind a `[worker-1] ` prefix (coloured per
/// replica on a terminal), plain notes, and on a terminal one live status line kept below the
/// rest. Whole lines only, safe from several threads.
class FollowOutput {
 public:
  /// `live`: `out` is a terminal, so the status line is drawn (and rewritten with \r).
  FollowOutput(std::ostream& out, bool prefix, bool color, bool live);
  ~FollowOutput();  // finish()

  void log_line(std::string_view replica, std::string_view text);
  void note(std::string_view text);
  /// Replaces the live status line; does nothing unless `live`.
  void status(std::string status);
  /// Ends the live status line so later output starts on a fresh line. Idempotent.
  void finish();
  /// Writes `trainctl: warning: <text>` to stderr, each distinct text once (a replica's logs can
  /// be missed by the stream and by the final read for the same reason).
  void warning(std::string_view text);
  bool live() const { return live_; }

 private:
  void clear_status_locked();
  void draw_status_locked();

  std::mutex mu_;
  std::ostream& out_;
  bool prefix_;
  bool color_;
  bool live_;
  std::string status_;
  std::set<std::string, std::less<>> warned_;
};

/// The warning for a replica whose logs could not be read: `logs of worker-1 unavailable: <why>`.
std::string logs_unavailable(std::string_view replica, std::string_view why);

/// Whether the file descriptor is a terminal, and one that may get colours (NO_COLOR unset).
bool is_terminal(int fd);
bool color_allowed(int fd);

}  // namespace trainctl::cli
