#include "providers/local/detail/image/store.hpp"

#include "providers/local/detail/host/spawn.hpp"
#include "providers/local/detail/host/unique_fd.hpp"
#include "providers/local/detail/isolation.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <poll.h>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sv::detail {

namespace {

using clock = std::chrono::steady_clock;
using nlohmann::json;

/// Most bytes of an index, manifest or config read from a layout.
constexpr uint64_t max_meta_bytes = 4 << 20;
/// Most bytes of skopeo's error output kept for a message.
constexpr size_t max_error_bytes = 2000;
constexpr size_t max_ref_bytes = 1024;

std::string hex_sha256(const std::string& data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(),
                 nullptr) != 1)
    throw image_error("SHA-256 failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 0xf];
  }
  return out;
}

bool is_hex_digest(const std::string& digest) {
  return digest.size() == 71 && digest.compare(0, 7, "sha256:") == 0 &&
         std::all_of(digest.begin() + 7, digest.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string read_bounded(const std::string& path, const std::string& what) {
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
  if (!fd)
    throw image_error("cannot read the image's " + what + ": " +
                      std::strerror(errno));
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw image_error("cannot read the image's " + what + ": " +
                        std::strerror(errno));
    if (n == 0)
      return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_meta_bytes)
      throw image_error("the image's " + what + " is larger than 4 MiB");
  }
}

json parse_json(const std::string& text, const std::string& what) {
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    throw image_error("the image's " + what + " is not a JSON object");
  return doc;
}

/// Runs skopeo with `args` until `deadline`; stdout goes to `out_fd` (-1:
/// nowhere). Throws image_error with skopeo's own words.
void run_skopeo(const std::string& skopeo, const std::vector<std::string>& args,
                clock::time_point deadline, int out_fd,
                const std::string& tmp_dir, const std::atomic<bool>& aborted) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw image_error(std::string{"pipe: "} + std::strerror(errno));
  unique_fd rd{p[0]};
  unique_fd wr{p[1]};
  spawn_spec spec;
  spec.program = skopeo;
  spec.argv = {skopeo};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {launcher_env_path, "HOME=" + tmp_dir, "TMPDIR=" + tmp_dir};
  spec.stdout_fd = out_fd;
  spec.stderr_fd = wr.get();
  spec.new_process_group = true;
  int err = 0;
  auto pid = spawn_process(spec, err);
  wr.reset();
  if (pid < 0)
    throw image_error("cannot run skopeo: " + std::string{std::strerror(err)});
  std::string errors;
  bool late = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock::now());
    if (left.count() <= 0 || aborted.load()) {
      late = true;
      break;
    }
    // Woken every 200 ms to see an abort (shutdown).
    pollfd pfd{rd.get(), POLLIN, 0};
    auto r =
      ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    if (r == 0)
      continue;
    if (r < 0 && errno == EINTR)
      continue;
    char buf[4096];
    auto n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    if (errors.size() < max_error_bytes)
      errors.append(buf, static_cast<size_t>(n));
  }
  if (late)
    ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    // retry
  }
  if (late && aborted.load())
    throw image_error("the provider is shutting down");
  if (late)
    throw image_error("skopeo did not finish before the create's deadline");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!errors.empty() && (errors.back() == '\n' || errors.back() == ' '))
      errors.pop_back();
    if (errors.size() > 600)
      errors = errors.substr(0, 600) + "...";
    throw image_error("skopeo: " + (errors.empty() ? "failed" : errors));
  }
}

/// The image config's `Env` (["NAME=value", ...]) as pairs. An entry
/// holding a NUL byte (JSON's \u0000) is refused, not split or dropped:
/// the environment reaches bwrap's NUL-separated argument file.
std::vector<std::pair<std::string, std::string>> env_of(const json& list) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!list.is_array())
    return out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string())
      continue;
    auto text = list[i].get<std::string>();
    if (text.find('\0') != std::string::npos)
      throw image_error("the image's config Env[" + std::to_string(i) +
                        "] holds a NUL byte");
    auto eq = text.find('=');
    if (eq != std::string::npos && eq > 0)
      out.emplace_back(text.substr(0, eq), text.substr(eq + 1));
  }
  return out;
}

bool make_dir(const std::string& path, mode_t mode) {
  return ::mkdir(path.c_str(), mode) == 0 || errno == EEXIST;
}

} // namespace

image_source parse_image_ref(const std::string& ref) {
  auto bad = [&](const std::string& why) -> image_error {
    return image_error("image \"" + ref.substr(0, 200) + "\": " + why);
  };
  if (ref.empty() || ref.size() > max_ref_bytes)
    throw bad("expected 1 to 1024 bytes");
  if (std::any_of(ref.begin(), ref.end(), [](char c) {
        return static_cast<unsigned char>(c) <= ' ' || c == 0x7f;
      }))
    throw bad("holds a space or a control character");
  image_source out;
  if (ref.front() == '/') {
    if (ref.find("/../") != std::string::npos ||
        ref.find("/./") != std::string::npos ||
        (ref.size() >= 3 && ref.compare(ref.size() - 3, 3, "/..") == 0))
      throw bad("a root file system directory must be a normalized path");
    if (ref == "/")
      throw bad("is the host's root; leave image empty for the host's view");
    out.rootfs = ref;
    while (out.rootfs.size() > 1 && out.rootfs.back() == '/')
      out.rootfs.pop_back();
    return out;
  }
  auto starts = [&](const char* prefix) {
    return ref.compare(0, std::strlen(prefix), prefix) == 0;
  };
  if (starts("oci:") || starts("oci-archive:") || starts("docker-archive:")) {
    auto path = ref.substr(ref.find(':') + 1);
    if (path.empty() || path.front() != '/')
      throw bad("the layout or archive path must be absolute");
    out.transport = ref;
    return out;
  }
  auto name = starts("docker://") ? ref.substr(9) : ref;
  if (name.empty() || name.front() == '-' || name.front() == '/')
    throw bad("expected a registry reference like python:3.12-slim or "
              "HOST[:PORT]/NAME:TAG");
  if (name.find("://") != std::string::npos ||
      (name.find(':') != std::string::npos &&
       name.find('/') == std::string::npos &&
       name.find('@') == std::string::npos &&
       std::count(name.begin(), name.end(), ':') > 1))
    throw bad("unknown form; expected a registry reference, oci:DIR[:TAG], "
              "oci-archive:FILE, docker-archive:FILE or an absolute "
              "directory");
  auto slash = name.find('/');
  if (slash != std::string::npos) {
    auto host = name.substr(0, slash);
    if (host.find('.') != std::string::npos ||
        host.find(':') != std::string::npos || host == "localhost")
      out.registry = host;
  }
  out.transport = "docker://" + name;
  return out;
}

struct image_store::impl {
  image_store_settings cfg;
  std::string policy;

  struct entry {
    std::shared_ptr<image_tree> tree;
    bool pulling = false;
    std::string error;
    clock::time_point used;
  };

  mutable std::mutex mtx;
  std::condition_variable changed;
  std::map<std::string, entry> images;
  /// What a reference resolved to: its digest, when it was asked, and
  /// since when it has named that digest (as far as this store saw).
  struct tag {
    std::string digest;
    clock::time_point asked;
    clock::time_point since;
  };
  std::map<std::string, tag> tags;
  std::atomic<bool> aborted{false};
  /// The manifests an index (a multi-platform image) of a digest lists: a
  /// pull of it yields one of them.
  std::map<std::string, std::set<std::string>> listed;
  uint64_t pulls = 0;
  uint64_t next_tmp = 0;
  /// The directory is made (and a previous run's images loaded) at the
  /// first image a create asks for: a provider that runs none leaves none.
  std::mutex open_mtx;
  bool opened = false;

  void open();
  void ensure_open();
  /// The real path of the host path `path` (with `strip_tag`, an oci
  /// layout's `DIR:TAG` may name DIR), refused when it is, holds or lies
  /// in a path sandboxes may not see (cfg.forbidden).
  std::string check_host_path(const std::string& path, bool strip_tag) const;

  std::string tmp_dir() const { return cfg.dir + "/tmp"; }

  std::vector<std::string> tls_args(const image_source& src,
                                    const char* flag) const {
    if (!src.registry.empty() &&
        std::find(cfg.insecure_registries.begin(),
                  cfg.insecure_registries.end(),
                  src.registry) != cfg.insecure_registries.end())
      return {std::string{flag} + "=false"};
    return {};
  }

  std::string unique_tmp(const std::string& what) {
    std::lock_guard<std::mutex> guard{mtx};
    return tmp_dir() + "/" + what + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(++next_tmp);
  }

  /// The digest `src` names now (asked of its source unless known).
  std::string resolve(const std::string& ref, const image_source& src,
                      clock::time_point deadline) {
    auto now = clock::now();
    {
      std::lock_guard<std::mutex> guard{mtx};
      auto i = tags.find(ref);
      if (i != tags.end() && now - i->second.asked < cfg.tag_ttl)
        return i->second.digest;
    }
    auto out = unique_tmp("manifest");
    unique_fd fd{::open(
      out.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (!fd)
      throw image_error("cannot write in the image store: " +
                        std::string{std::strerror(errno)});
    ::unlink(out.c_str());
    std::vector<std::string> args{"inspect", "--raw"};
    auto tls = tls_args(src, "--tls-verify");
    args.insert(args.end(), tls.begin(), tls.end());
    args.push_back(src.transport);
    run_skopeo(cfg.skopeo, args, deadline, fd.get(), tmp_dir(), aborted);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) > max_meta_bytes)
      throw image_error("the image's manifest is larger than 4 MiB");
    std::string raw(static_cast<size_t>(st.st_size), '\0');
    if (::pread(fd.get(), raw.data(), raw.size(), 0) !=
        static_cast<ssize_t>(raw.size()))
      throw image_error("cannot read the image's manifest");
    if (raw.empty())
      throw image_error("the image has an empty manifest");
    auto digest = "sha256:" + hex_sha256(raw);
    // A reference by digest must match it.
    auto at = ref.rfind('@');
    if (at != std::string::npos && ref.compare(at + 1, 7, "sha256:") == 0 &&
        ref.substr(at + 1) != digest)
      throw image_error("digest mismatch: the manifest is " + digest +
                        ", the reference names " + ref.substr(at + 1));
    std::set<std::string> children;
    auto doc = json::parse(raw, nullptr, false);
    if (doc.is_object() && doc["manifests"].is_array())
      for (auto& m : doc["manifests"])
        if (m.is_object() && m["digest"].is_string())
          children.insert(m["digest"].get<std::string>());
    std::lock_guard<std::mutex> guard{mtx};
    auto asked = clock::now();
    auto& t = tags[ref];
    if (t.digest != digest)
      t.since = asked; // new, or the tag moved
    t.digest = digest;
    t.asked = asked;
    listed[digest] = std::move(children);
    return digest;
  }

  /// What skopeo copies for `src` of `digest`: a registry's image by that
  /// digest, not by its tag (which can move between the resolve and the
  /// copy); other sources as they are (their result is checked).
  static std::string pinned(const image_source& src,
                            const std::string& digest) {
    if (src.transport.compare(0, 9, "docker://") != 0)
      return src.transport;
    // docker://[HOST[:PORT]/]NAME[:TAG][@DIGEST]: the tag and a digest
    // follow the last '/' (a port comes before it).
    auto name = src.transport;
    auto last = name.rfind('/');
    if (auto at = name.find('@', last); at != std::string::npos)
      name.erase(at);
    if (auto colon = name.find(':', last); colon != std::string::npos)
      name.erase(colon);
    return name + "@" + digest;
  }

  /// Pulls `src` (of `digest`) and unpacks it; returns the tree.
  std::shared_ptr<image_tree> pull(const image_source& src,
                                   const std::string& digest,
                                   clock::time_point deadline) {
    auto layout = unique_tmp("pull");
    struct cleanup {
      std::string path;
      ~cleanup() { remove_tree(path); }
    } drop_layout{layout};
    std::vector<std::string> args{"--policy", policy, "copy", "--quiet"};
    auto tls = tls_args(src, "--src-tls-verify");
    args.insert(args.end(), tls.begin(), tls.end());
    args.push_back(pinned(src, digest));
    args.push_back("oci:" + layout + ":image");
    {
      std::lock_guard<std::mutex> guard{mtx};
      ++pulls;
    }
    auto started = clock::now();
    run_skopeo(cfg.skopeo, args, deadline, -1, tmp_dir(), aborted);
    auto pulled = clock::now();
    auto blob = [&](const std::string& d) {
      if (!is_hex_digest(d))
        throw image_error("the image names a blob \"" + d.substr(0, 100) +
                          "\" that is not a sha256 digest");
      return layout + "/blobs/sha256/" + d.substr(7);
    };
    auto index =
      parse_json(read_bounded(layout + "/index.json", "index"), "index");
    auto& manifests = index["manifests"];
    if (!manifests.is_array() || manifests.size() != 1 ||
        !manifests[0].is_object() || !manifests[0]["digest"].is_string())
      throw image_error("the pulled layout holds no single manifest");
    // What was copied is what was resolved (a source may change between
    // the two): else another image would be filed under this digest.
    {
      auto got = manifests[0]["digest"].get<std::string>();
      std::lock_guard<std::mutex> guard{mtx};
      auto i = listed.find(digest);
      if (got != digest && (i == listed.end() || i->second.count(got) == 0))
        throw image_error("digest mismatch: resolved " + digest +
                          ", the pull copied " + got.substr(0, 80));
    }
    auto manifest = parse_json(
      read_bounded(blob(manifests[0]["digest"].get<std::string>()), "manifest"),
      "manifest");
    if (!manifest["config"].is_object() ||
        !manifest["config"]["digest"].is_string() ||
        !manifest["layers"].is_array())
      throw image_error("the image's manifest has no config or layers");
    auto config = parse_json(
      read_bounded(blob(manifest["config"]["digest"].get<std::string>()),
                   "config"),
      "config");
    auto tree = std::make_shared<image_tree>();
    tree->digest = digest;
    tree->env = env_of(config["config"]["Env"]);
    auto hex = digest.substr(7);
    auto partial = cfg.dir + "/images/" + hex + ".partial";
    remove_tree(partial);
    if (!make_dir(partial, 0755) || !make_dir(partial + "/rootfs", 0755))
      throw image_error("cannot make " + partial + ": " + std::strerror(errno));
    layer_totals totals;
    for (auto& layer : manifest["layers"]) {
      if (!layer.is_object() || !layer["digest"].is_string())
        throw image_error("the image's manifest lists a malformed layer");
      auto type = layer.value("mediaType", std::string{});
      if (type.find("zstd") != std::string::npos)
        throw image_error("layer " + layer["digest"].get<std::string>() +
                          ": zstd layers are not supported (" + type + ")");
      if (clock::now() >= deadline) {
        remove_tree(partial);
        throw image_error("unpacking did not finish before the create's "
                          "deadline");
      }
      try {
        apply_layer(blob(layer["digest"].get<std::string>()),
                    partial + "/rootfs", cfg.limits, totals, deadline);
      } catch (const layer_error& e) {
        remove_tree(partial);
        throw image_error("bad layer " + layer["digest"].get<std::string>() +
                          ": " + e.what());
      }
    }
    tree->bytes = totals.bytes;
    json meta{{"digest", digest}, {"bytes", totals.bytes}};
    json env = json::array();
    for (auto& [k, v] : tree->env)
      env.push_back(k + "=" + v);
    meta["env"] = env;
    {
      std::ofstream out{partial + "/image.json"};
      out << meta.dump();
      if (!out)
        throw image_error("cannot write " + partial + "/image.json");
    }
    auto final_dir = cfg.dir + "/images/" + hex;
    remove_tree(final_dir);
    if (::rename(partial.c_str(), final_dir.c_str()) != 0)
      throw image_error("cannot move the unpacked image into place: " +
                        std::string{std::strerror(errno)});
    tree->rootfs = final_dir + "/rootfs";
    auto ms = [](auto d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    spdlog::info("local provider: image {} ({}): pulled in {} ms, unpacked "
                 "({} files, {} MiB) in {} ms",
                 src.transport, digest, ms(pulled - started), totals.entries,
                 totals.bytes >> 20, ms(clock::now() - pulled));
    return tree;
  }

  /// Under mtx: evicts unused images, least recently used first, while the
  /// store holds more than its bound.
  void evict(std::unique_lock<std::mutex>& lock, const std::string& keep) {
    for (;;) {
      uint64_t total = 0;
      for (auto& [d, e] : images)
        if (e.tree)
          total += e.tree->bytes;
      if (total <= cfg.max_bytes)
        return;
      auto victim = images.end();
      for (auto i = images.begin(); i != images.end(); ++i)
        if (i->first != keep && i->second.tree && !i->second.pulling &&
            i->second.tree.use_count() == 1 &&
            (victim == images.end() || i->second.used < victim->second.used))
          victim = i;
      if (victim == images.end()) {
        spdlog::warn("local provider: the image store holds {} MiB, above "
                     "its bound of {} MiB, all in use",
                     total >> 20, cfg.max_bytes >> 20);
        return;
      }
      auto dir = cfg.dir + "/images/" + victim->first.substr(7);
      auto trash = tmp_dir() + "/evict-" + victim->first.substr(7) + "-" +
                   std::to_string(++next_tmp);
      spdlog::info("local provider: evicting image {} ({} MiB) from the store",
                   victim->first, victim->second.tree->bytes >> 20);
      images.erase(victim);
      ::rename(dir.c_str(), trash.c_str());
      lock.unlock();
      remove_tree(trash);
      lock.lock();
    }
  }

  void load_existing() {
    auto images_dir = cfg.dir + "/images";
    auto* d = ::opendir(images_dir.c_str());
    if (d == nullptr)
      return;
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        names.push_back(name);
    }
    ::closedir(d);
    for (auto& name : names) {
      auto path = images_dir + "/" + name;
      try {
        if (name.size() != 64 || !is_hex_digest("sha256:" + name))
          throw image_error("not an image");
        auto meta =
          parse_json(read_bounded(path + "/image.json", "record"), "record");
        auto tree = std::make_shared<image_tree>();
        tree->digest = "sha256:" + name;
        tree->rootfs = path + "/rootfs";
        tree->bytes = meta.value("bytes", uint64_t{0});
        tree->env = env_of(meta["env"]);
        images[tree->digest].tree = std::move(tree);
      } catch (const std::exception&) {
        remove_tree(path); // half-made, or not ours
      }
    }
  }
};

image_store::image_store(image_store_settings cfg)
    : impl_(std::make_unique<impl>()) {
  impl_->cfg = std::move(cfg);
  auto& dir = impl_->cfg.dir;
  if (dir.empty() || dir.front() != '/')
    throw std::runtime_error("image store: expected an absolute directory, "
                             "got \"" +
                             dir + "\"");
}

void image_store::impl::open() {
  auto& dir = cfg.dir;
  // Its parents too (like /var/lib/sv/images on a fresh host).
  for (auto slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1))
    if (::mkdir(dir.substr(0, slash).c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("image store: cannot make " +
                               dir.substr(0, slash) + ": " +
                               std::strerror(errno));
  for (auto& sub : {std::string{}, std::string{"/images"}}) {
    auto path = dir + sub;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("image store: cannot make " + path + ": " +
                               std::strerror(errno));
  }
  remove_tree(tmp_dir());
  if (::mkdir(tmp_dir().c_str(), 0700) != 0)
    throw std::runtime_error("image store: cannot make " + tmp_dir() + ": " +
                             std::strerror(errno));
  policy = dir + "/policy.json";
  {
    // Images are pulled unsigned; their digests are what is trusted.
    std::ofstream out{policy};
    out << R"({"default": [{"type": "insecureAcceptAnything"}]})" << '\n';
  }
  load_existing();
}

void image_store::impl::ensure_open() {
  std::lock_guard<std::mutex> guard{open_mtx};
  if (opened)
    return;
  try {
    open();
  } catch (const std::exception& e) {
    throw image_error(e.what());
  }
  opened = true;
}

image_store::~image_store() = default;

uint64_t image_store::pulls() const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  return impl_->pulls;
}

const image_store_settings& image_store::settings() const {
  return impl_->cfg;
}

std::string image_store::impl::check_host_path(const std::string& path,
                                               bool strip_tag) const {
  char real[PATH_MAX];
  bool found = ::realpath(path.c_str(), real) != nullptr;
  if (!found && strip_tag) {
    auto colon = path.rfind(':');
    found = colon != std::string::npos && colon > 0 &&
            ::realpath(path.substr(0, colon).c_str(), real) != nullptr;
  }
  if (!found)
    throw image_error(path + " does not exist");
  std::string resolved = real;
  for (auto& hidden : cfg.forbidden)
    if (path_within(resolved, hidden) || path_within(hidden, resolved))
      throw image_error(path + " is, holds or is inside " + hidden +
                        ", which sandboxes may not see");
  return resolved;
}

/// The source of `ref` made ready to ask: its host path checked, the store
/// open, skopeo there. Throws image_error.
static void ready_source(image_store::impl& s, const image_source& src) {
  if (src.transport.compare(0, 9, "docker://") != 0)
    s.check_host_path(src.transport.substr(src.transport.find(':') + 1),
                      src.transport.compare(0, 4, "oci:") == 0);
  s.ensure_open();
  if (s.cfg.skopeo.empty())
    throw image_error("skopeo is not installed (Debian: apt-get install "
                      "skopeo); only root file system directories work");
  if (s.aborted.load())
    throw image_error("the provider is shutting down");
}

std::string image_store::resolve(const std::string& ref,
                                 clock::time_point deadline) {
  auto src = parse_image_ref(ref);
  if (!src.rootfs.empty())
    return "";
  ready_source(*impl_, src);
  return impl_->resolve(ref, src, deadline);
}

bool image_store::unchanged_since(const std::string& ref,
                                  const std::string& digest,
                                  clock::time_point since) const {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  auto i = impl_->tags.find(ref);
  return i != impl_->tags.end() && i->second.digest == digest &&
         i->second.since <= since;
}

void image_store::abort() {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  impl_->aborted = true;
  impl_->changed.notify_all();
}

std::shared_ptr<const image_tree>
image_store::acquire(const std::string& ref, clock::time_point deadline) {
  auto src = parse_image_ref(ref);
  auto& s = *impl_;
  if (!src.rootfs.empty()) {
    auto real = s.check_host_path(src.rootfs, false);
    // The merged root takes the upper layer's owner and mode: a host
    // directory nobody else may read (0700) would be readable through it.
    // Only directories the operator set aside as images may be one.
    if (std::none_of(s.cfg.image_dirs.begin(), s.cfg.image_dirs.end(),
                     [&](const std::string& dir) {
                       char dir_real[PATH_MAX];
                       return ::realpath(dir.c_str(), dir_real) != nullptr &&
                              path_within(real, dir_real);
                     }))
      throw image_error("root file system directory " + src.rootfs +
                        " does not lie in a directory of the provider's "
                        "image_dirs setting" +
                        (s.cfg.image_dirs.empty() ? " (empty: none may)" : ""));
    struct stat st;
    if (::stat(real.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw image_error("root file system directory " + src.rootfs +
                        " is not a directory");
    // It becomes a mount option (lowerdir=...).
    if (real.find_first_of(",:\\") != std::string::npos)
      throw image_error("root file system directory " + src.rootfs +
                        " holds ',', ':' or '\\'");
    auto tree = std::make_shared<image_tree>();
    tree->digest = "dir:" + real;
    tree->rootfs = real;
    return tree;
  }
  ready_source(s, src);
  auto digest = s.resolve(ref, src, deadline);
  std::unique_lock<std::mutex> lock{s.mtx};
  for (;;) {
    auto& e = s.images[digest];
    if (e.tree) {
      e.used = clock::now();
      return e.tree;
    }
    if (!e.pulling)
      break;
    if (s.aborted.load())
      throw image_error("the provider is shutting down");
    if (s.changed.wait_until(lock, deadline) == std::cv_status::timeout)
      throw image_error("the pull of " + digest +
                        " by another create did "
                        "not finish before this create's deadline");
    auto i = s.images.find(digest);
    if (i != s.images.end() && !i->second.error.empty() && !i->second.pulling)
      throw image_error(i->second.error);
  }
  s.images[digest].pulling = true;
  s.images[digest].error.clear();
  lock.unlock();
  std::shared_ptr<image_tree> tree;
  std::string error;
  try {
    tree = s.pull(src, digest, deadline);
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  auto& e = s.images[digest];
  e.pulling = false;
  if (!tree) {
    // Waiters read the error; the entry goes with the last of them.
    e.error = error;
    s.changed.notify_all();
    lock.unlock();
    {
      std::lock_guard<std::mutex> guard{s.mtx};
      auto i = s.images.find(digest);
      if (i != s.images.end() && !i->second.tree && !i->second.pulling)
        s.images.erase(i);
      // Another try asks the source again.
      s.tags.erase(ref);
    }
    throw image_error(error);
  }
  e.tree = tree;
  e.used = clock::now();
  s.changed.notify_all();
  std::shared_ptr<const image_tree> out = tree;
  s.evict(lock, digest);
  return out;
}

} // namespace sv::detail
