#pragma once

// CPU time per thread of this process, for the benchmark programs: a
// shared machine's load changes it much less than wall time.

#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>

namespace sv::bench {

/// CPU seconds (user + system) used so far by each thread of this process,
/// by thread id.
inline std::map<std::string, double> thread_cpu_s() {
  std::map<std::string, double> out;
  auto tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  auto* dir = opendir("/proc/self/task");
  if (dir == nullptr)
    return out;
  while (auto* e = readdir(dir)) {
    if (e->d_name[0] == '.')
      continue;
    std::ifstream in{std::string{"/proc/self/task/"} + e->d_name + "/stat"};
    std::string line;
    std::getline(in, line);
    // After the command name's closing parenthesis, utime and stime are the
    // 12th and 13th fields.
    auto p = line.rfind(')');
    if (p == std::string::npos || p + 2 > line.size())
      continue;
    std::istringstream rest{line.substr(p + 2)};
    std::string field;
    double utime = 0;
    double stime = 0;
    for (int i = 1; i <= 13 && rest >> field; ++i) {
      if (i == 12)
        utime = std::strtod(field.c_str(), nullptr);
      if (i == 13)
        stime = std::strtod(field.c_str(), nullptr);
    }
    out[e->d_name] = (utime + stime) / tick;
  }
  closedir(dir);
  return out;
}

} // namespace sv::bench
