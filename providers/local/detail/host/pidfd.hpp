#pragma once

// glibc 2.36's <sys/pidfd.h> lacks __BEGIN_DECLS, so C++ code would look for
// C++-mangled pidfd_open and fail to link; declare it as the C API it is.

#include <csignal>
#include <fcntl.h>

extern "C" {
#include <sys/pidfd.h>
}
