#include "daemon/runtime/disk.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/unique_fd.h"
#include "daemon/sys/process.h"

namespace b3os::runtime {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A host out of room (space, quota, loop devices) is the node's capacity, 503 with a retry:
// the user can do nothing about it but wait or go elsewhere.
ErrorCode code_for(int err) { return err == ENOSPC || err == EDQUOT ? ErrorCode::kCapacityUnavailable : ErrorCode::kInternal; }

// Attaches `image_fd` to a free loop device with autoclear (the device is let go once the
// filesystem on it is unmounted) and direct I/O on the image (its data is cached once, in the
// filesystem above, not again as the image's page cache). Returns the device's open fd and
// path; the caller closes the fd once the filesystem is mounted.
Result<std::pair<UniqueFd, std::string>> attach_loop(int image_fd, const std::string& image) {
  UniqueFd ctl(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!ctl) return fail(errno_error(ErrorCode::kInternal, "open /dev/loop-control", errno));
  // Another process may take the free device between the two calls: then ask again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = ::ioctl(ctl.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return fail(errno_error(ErrorCode::kCapacityUnavailable, "no free loop device on the host (LOOP_CTL_GET_FREE)", errno));
    const std::string dev = "/dev/loop" + std::to_string(n);
    UniqueFd loop(::open(dev.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) {
      if (errno == ENOENT) continue;  // the node appears a moment after the device
      return fail(errno_error(ErrorCode::kInternal, "open " + dev, errno));
    }
    loop_config lc{};
    lc.fd = static_cast<uint32_t>(image_fd);
    lc.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
    std::strncpy(reinterpret_cast<char*>(lc.info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &lc) == 0) return std::pair{std::move(loop), dev};
    if (errno == EBUSY) continue;
    const int err = errno;
    if (err != EINVAL && err != ENOTTY) return fail(errno_error(ErrorCode::kInternal, "attaching " + image + " to " + dev, err));
    // Kernels before 5.8 have no LOOP_CONFIGURE: the two-step form.
    if (::ioctl(loop.get(), LOOP_SET_FD, image_fd) != 0) {
      if (errno == EBUSY) continue;
      return fail(errno_error(ErrorCode::kInternal, "attaching " + image + " to " + dev, errno));
    }
    loop_info64 info{};
    info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(info.lo_file_name), image.c_str(), LO_NAME_SIZE - 1);
    if (::ioctl(loop.get(), LOOP_SET_STATUS64, &info) != 0) {
      const int e = errno;
      ::ioctl(loop.get(), LOOP_CLR_FD, 0);
      return fail(errno_error(ErrorCode::kInternal, "setting up " + dev, e));
    }
    return std::pair{std::move(loop), dev};
  }
  return fail(ErrorCode::kCapacityUnavailable, "no free loop device on the host after 16 tries (another process takes them)");
}

bool is_mount_point(const std::string& path) {
  struct stat a {}, b {};
  if (::stat(path.c_str(), &a) != 0) return false;
  if (::stat((path + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

}  // namespace

DiskPaths disk_paths(const DiskConfig& cfg, const std::string& id) {
  const std::string dir = cfg.dir + "/" + id;
  return {dir, dir + "/disk.img", dir + "/mnt"};
}

Result<std::string> make_disk(const DiskConfig& cfg, const std::string& id, int gib) {
  if (gib <= 0) return fail(ErrorCode::kInternal, "disk of " + std::to_string(gib) + " GiB");
  const DiskPaths p = disk_paths(cfg, id);
  std::error_code ec;
  fs::create_directories(cfg.dir, ec);
  if (::mkdir(p.dir.c_str(), 0700) != 0) return fail(errno_error(code_for(errno), "creating " + p.dir, errno));
  bool mounted = false;
  auto undo = [&](Error e) -> Result<std::string> {
    if (mounted) ::umount2(p.mount.c_str(), MNT_DETACH);
    std::error_code rm;
    fs::remove_all(p.dir, rm);
    e.wrap("disk of " + id);
    return fail(std::move(e));
  };
  if (::mkdir(p.mount.c_str(), 0700) != 0) return undo(errno_error(code_for(errno), "creating " + p.mount, errno));
  UniqueFd image(::open(p.image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!image) return undo(errno_error(code_for(errno), "creating " + p.image, errno));
  // Sparse: the host's disk is used as the sandbox writes, never more than gib.
  if (::ftruncate(image.get(), int64_t(gib) << 30) != 0)
    return undo(errno_error(code_for(errno), "sizing " + p.image, errno));
  // No journal (the disk lives no longer than its sandbox, which a host crash ends anyway),
  // no reserved blocks (all of disk_gib is the sandbox's), inode tables left uninitialised
  // (mkfs writes a few MB and takes ~30 ms, at any size).
  auto made = sys::run({cfg.mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard,lazy_itable_init=1",
                        p.image},
                       60s);
  if (!made) return undo(made.error());
  if (made->exit_code != 0) {
    const bool full = made->output.find("No space left") != std::string::npos;
    return undo(Error{full ? ErrorCode::kCapacityUnavailable : ErrorCode::kInternal,
                      cfg.mkfs + " failed (exit " + std::to_string(made->exit_code) + "): " + made->output, full ? ENOSPC : 0});
  }
  auto loop = attach_loop(image.get(), p.image);
  if (!loop) return undo(loop.error());
  // noinit_itable: the kernel does not zero the inode tables behind the sandbox's back;
  // discard: space the sandbox frees goes back to the host (holes punched in the image).
  if (::mount(loop->second.c_str(), p.mount.c_str(), "ext4", MS_NOSUID | MS_NODEV, "discard,noinit_itable") != 0) {
    const int err = errno;
    return undo(errno_error(ErrorCode::kInternal, "mounting " + loop->second + " on " + p.mount, err));
  }
  mounted = true;
  // The mount holds the device now; with autoclear it is let go at the unmount.
  return p.mount;
}

Result<void> remove_disk(const DiskConfig& cfg, const std::string& id) {
  const DiskPaths p = disk_paths(cfg, id);
  if (::access(p.dir.c_str(), F_OK) != 0) return {};
  if (is_mount_point(p.mount) && ::umount2(p.mount.c_str(), 0) != 0) {
    // Still busy (a sentry not quite gone): detached now, released (and its loop device with
    // it) when the last user goes.
    if (errno != EBUSY || ::umount2(p.mount.c_str(), MNT_DETACH) != 0) {
      return fail(errno_error(ErrorCode::kInternal, "unmounting " + p.mount, errno));
    }
  }
  if (is_mount_point(p.mount)) return fail(ErrorCode::kInternal, p.mount + " is still mounted");
  std::error_code ec;
  fs::remove_all(p.dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "removing " + p.dir + ": " + ec.message());
  return {};
}

Result<std::vector<std::string>> list_disks(const DiskConfig& cfg) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (auto it = fs::directory_iterator(cfg.dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    ids.push_back(it->path().filename().string());
  if (ec && ec != std::errc::no_such_file_or_directory) return fail(ErrorCode::kInternal, "listing " + cfg.dir + ": " + ec.message());
  return ids;
}

}  // namespace b3os::runtime
