#pragma once
// Diagnostic lines on stderr, which the host sends to the sandbox's agent log file.

namespace b3os::agent {

/// Writes one line "b3os-agent: <printf-formatted message>" to fd 2, in a single write.
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace b3os::agent
