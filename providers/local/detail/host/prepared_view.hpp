#pragma once

// The sandbox's read-only view of the host, prepared once per provider (as
// root) instead of by one bwrap --ro-bind per top-level entry per exec:
// each --ro-bind makes bwrap read the whole mount table again (~0.1 ms of
// CPU each, 16 of them here; bench/README.md section 7). A tmpfs holds the
// host's top-level entries, directories and files bound (recursively, then
// the whole tree made private, so later host mounts neither propagate in
// nor multiply), symlinks copied, and empty mount points for the rest; bwrap
// then binds it read-only at / in one step.
//
// It lives in /run/sv-views/<pid>-<n>/: a small unbindable tmpfs (so a
// recursive bind of /run copies nothing of it) holding the view's tmpfs
// at `v`. The destructor detaches it; views of a process that is gone
// (a crash) are removed by remove_stale_views at the next start.

#include <memory>
#include <string>
#include <vector>

namespace sv::detail {

/// One top-level entry of the view.
struct view_entry {
  enum kind_t { bind_dir, bind_file, symlink, empty_dir, empty_file };
  std::string name; // without the leading '/'
  kind_t kind = empty_dir;
  std::string target; // the host path (binds) or the link's target
};

class prepared_view {
public:
  /// Prepares a view of `entries` (root only). Throws std::runtime_error
  /// saying what failed, having removed what it made.
  static std::shared_ptr<const prepared_view>
  make(const std::vector<view_entry>& entries);

  ~prepared_view();
  prepared_view(const prepared_view&) = delete;
  prepared_view& operator=(const prepared_view&) = delete;

  /// What bwrap binds at / (`<dir>/v`).
  const std::string& path() const { return root_; }

  /// Whether the view has the top-level entry `name`.
  bool has(const std::string& name) const;

private:
  prepared_view() = default;
  std::string dir_;
  std::string root_;
  std::vector<std::string> names_;
};

/// Where views are made.
inline constexpr const char* view_dir = "/run/sv-views";

/// Detaches and removes the views in view_dir whose process is gone.
/// Returns how many.
size_t remove_stale_views();

} // namespace sv::detail
