// The file commands: upload, download, ls and rmfile.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/unique_fd.h"

namespace b3os::cli {

namespace {

// Writes a download to a local file, or to stdout for "-". The file is created (or truncated)
// only once the daemon has answered 2xx, so a failed request leaves an existing file alone.
class FileSink : public ByteSink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}

  Result<void> open() override {
    if (path_ == "-") {
      fd_ = STDOUT_FILENO;
      return {};
    }
    owned_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!owned_) return fail(errno_error(ErrorCode::kInvalidRequest, "open " + path_, errno));
    fd_ = owned_.get();
    struct stat st{};
    created_regular_ = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
    return {};
  }

  Result<void> write(const char* data, size_t size) override {
    while (size > 0) {
      ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno_error(ErrorCode::kInternal, "write " + name(), errno));
      data += n;
      size -= static_cast<size_t>(n);
    }
    return {};
  }

  /// Closes the file, reporting a failed close (e.g. a full disk on NFS).
  Result<void> finish() {
    if (!owned_) return {};
    if (::close(owned_.release()) != 0) {
      return fail(errno_error(ErrorCode::kInternal, "close " + path_, errno));
    }
    return {};
  }

  /// Removes a partly written regular file after a failure; returns whether it did.
  bool discard() {
    owned_.reset();
    return created_regular_ && ::unlink(path_.c_str()) == 0;
  }

 private:
  std::string name() const { return path_ == "-" ? "stdout" : path_; }

  std::string path_;
  UniqueFd owned_;
  int fd_ = -1;
  bool created_regular_ = false;
};

// A field of a reply as text, or `fallback` if absent.
std::string text_field(const Json& reply, const char* key, const std::string& fallback) {
  return reply.is_object() && reply.contains(key) ? format_cell(reply[key]) : fallback;
}

std::string files_path(const std::string& id, const std::string& remote, std::string_view suffix = "") {
  return sandbox_path(id, "/files" + std::string(suffix)) + Query().add("path", remote).str();
}

int run_upload(const GlobalOptions& g, const std::string& id, const std::string& local,
               const std::string& remote, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto resp = client->upload(files_path(id, remote), local);
  if (!resp) return report_error(resp.error());
  auto reply = json_reply(*resp);
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << text_field(*reply, "path", remote) << " (" << text_field(*reply, "size", "?")
              << " bytes)\n";
  }
  return 0;
}

int run_download(const GlobalOptions& g, const std::string& id, const std::string& remote,
                 const std::string& local) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  FileSink sink(local);
  auto resp = client->download(files_path(id, remote), sink);
  Result<void> done = resp ? sink.finish() : Result<void>(fail(resp.error()));
  if (!done) {
    Error e = done.error();
    if (sink.discard()) e.message += " (removed the partial " + local + ")";
    return report_error(e);
  }
  if (resp->status < 200 || resp->status >= 300) return report_error(api_error(*resp));
  return 0;
}

int run_ls(const GlobalOptions& g, const std::string& id, const std::string& remote, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "GET", files_path(id, remote, "/list"));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << render_file_table(reply->value("data", Json::array()));
  }
  return 0;
}

int run_rmfile(const GlobalOptions& g, const std::string& id, const std::string& remote,
               bool recursive, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  std::string path = files_path(id, remote);
  if (recursive) path += "&recursive=true";
  auto reply = call_api(*client, "DELETE", path);
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << text_field(*reply, "path", remote) << "\n";
  }
  return 0;
}

// Options shared by the file commands.
struct FileArgs {
  std::string id;
  std::string first;
  std::string second;
  bool recursive = false;
  bool json = false;
};

}  // namespace

void add_file_commands(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto up = std::make_shared<FileArgs>();
  auto* u = app.add_subcommand("upload", "Upload a local file to a sandbox (streamed)");
  u->add_option("id", up->id, "Sandbox id")->required();
  u->add_option("local", up->first, "Local file")->required();
  u->add_option("remote", up->second, "Path in the sandbox (relative: under /workspace)")->required();
  u->add_flag("--json", up->json, "Print the reply as JSON");
  u->callback([&g, &action, up] {
    action = [&g, up] { return run_upload(g, up->id, up->first, up->second, up->json); };
  });

  auto down = std::make_shared<FileArgs>();
  auto* d = app.add_subcommand("download", "Download a file from a sandbox (streamed)");
  d->add_option("id", down->id, "Sandbox id")->required();
  d->add_option("remote", down->first, "Path in the sandbox")->required();
  d->add_option("local", down->second, "Local file, or - for stdout")->required();
  d->callback([&g, &action, down] {
    action = [&g, down] { return run_download(g, down->id, down->first, down->second); };
  });

  auto ls = std::make_shared<FileArgs>();
  auto* l = app.add_subcommand("ls", "List a directory in a sandbox");
  l->add_option("id", ls->id, "Sandbox id")->required();
  l->add_option("path", ls->first, "Directory (default /workspace)");
  l->add_flag("--json", ls->json, "Print the listing as JSON");
  l->callback([&g, &action, ls] {
    action = [&g, ls] {
      return run_ls(g, ls->id, ls->first.empty() ? "/workspace" : ls->first, ls->json);
    };
  });

  auto rm = std::make_shared<FileArgs>();
  auto* r = app.add_subcommand("rmfile", "Delete a file or directory in a sandbox");
  r->add_option("id", rm->id, "Sandbox id")->required();
  r->add_option("path", rm->first, "Path in the sandbox")->required();
  r->add_flag("-r,--recursive", rm->recursive, "Delete a directory and everything in it");
  r->add_flag("--json", rm->json, "Print the reply as JSON");
  r->callback([&g, &action, rm] {
    action = [&g, rm] { return run_rmfile(g, rm->id, rm->first, rm->recursive, rm->json); };
  });
}

}  // namespace b3os::cli
