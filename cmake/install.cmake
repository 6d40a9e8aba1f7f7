# Installing: `cmake --install build [--prefix DIR]` puts the apps in bin/,
# the headers in include/sandbox_verification/, libsv_protocol.a, libsv_runtime.a and libsv.a in lib/, and a CMake
# package in lib/cmake/sandbox_verification/ whose target
# `sandbox_verification::sv` finds its own dependencies:
#
#   find_package(sandbox_verification REQUIRED)
#   target_link_libraries(my_app PRIVATE sandbox_verification::sv)
#
# and the test kit, for message-level tests of the user's own services:
#
#   find_package(sandbox_verification REQUIRED COMPONENTS testing)
#   target_link_libraries(my_tests PRIVATE sandbox_verification::testing)
#
# An app installs itself next to its add_executable (apps/CMakeLists.txt):
#   install(TARGETS sv-grade RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# `cpack -G DEB` (in the build directory) packs the same into a .deb.

include(CMakePackageConfigHelpers)

set(SV_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/sandbox_verification")

install(TARGETS sv_protocol sv_runtime sv sv_testing EXPORT sandbox_verificationTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
# The installed headers are the documented API (docs/embedding.md,
# docs/testing.md), nothing more: every header of the library outside a
# detail/ folder (DESIGN.md, "Layout"); a backend's internals
# (providers/*/detail/: host primitives, one sandbox's life, transports) and
# the runtime's own helpers (*/detail/) stay in the tree.
# package_install_embed checks the list against the tree and compiles every
# installed header alone against the prefix, so a public header that
# includes an internal one fails there.
set(SV_PUBLIC_HEADERS
    messages/atoms.hpp messages/batch_format.hpp messages/bounded_json.hpp
    messages/config_file.hpp messages/enums.hpp messages/errors.hpp
    messages/json.hpp messages/json_inspect.hpp messages/protocol.hpp
    messages/provider.hpp messages/registry.hpp messages/validation.hpp
    actors/supervisor.hpp actors/retry.hpp actors/verification.hpp
    actors/verification_protocol.hpp actors/provider_restarter.hpp
    actors/scheduler.hpp
    providers/factory.hpp providers/local.hpp providers/remote.hpp
    providers/scripted.hpp
    facade/grader.hpp service/service.hpp
    testing/deterministic.hpp testing/faults.hpp testing/grading_bench.hpp)
foreach(header ${SV_PUBLIC_HEADERS})
  get_filename_component(dir "${header}" DIRECTORY)
  install(FILES "${PROJECT_SOURCE_DIR}/${header}"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/sandbox_verification/${dir}")
endforeach()
install(EXPORT sandbox_verificationTargets NAMESPACE sandbox_verification::
        DESTINATION "${SV_INSTALL_CMAKEDIR}")
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/sandbox_verificationConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/sandbox_verificationConfig.cmake"
  INSTALL_DESTINATION "${SV_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/sandbox_verificationConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/sandbox_verificationConfig.cmake"
              "${PROJECT_BINARY_DIR}/sandbox_verificationConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake"
        DESTINATION "${SV_INSTALL_CMAKEDIR}")

# -- the Python package (clients/python) -------------------------------------
#
# Installed as Debian installs Python modules: the package `sv_client` and a
# dist-info directory holding its entry point, so importlib.metadata (NeMo
# Gym's registry) finds the provider `sv_serve` with no pip on the machine.
# Name, version and entry points are read from clients/python/pyproject.toml.

set(SV_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the Python package goes, relative to the install prefix")
set(SV_PYPROJECT "${PROJECT_SOURCE_DIR}/clients/python/pyproject.toml")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${SV_PYPROJECT}")
file(STRINGS "${SV_PYPROJECT}" sv_pyproject_lines)
set(sv_py_section "")
set(sv_py_in_entry_points FALSE)
set(SV_PY_ENTRY_POINTS "")
set(sv_py_entry_count 0)
foreach(line IN LISTS sv_pyproject_lines)
  if(line MATCHES "^\\[(.*)\\]$")
    set(sv_py_section "${CMAKE_MATCH_1}")
    set(sv_py_in_entry_points FALSE)
    if(sv_py_section MATCHES "^project\\.entry-points\\.\"(.*)\"$")
      string(APPEND SV_PY_ENTRY_POINTS "[${CMAKE_MATCH_1}]\n")
      set(sv_py_in_entry_points TRUE)
    endif()
  elseif(sv_py_in_entry_points AND line MATCHES "^([A-Za-z0-9_.-]+) = \"(.*)\"$")
    string(APPEND SV_PY_ENTRY_POINTS "${CMAKE_MATCH_1} = ${CMAKE_MATCH_2}\n")
    math(EXPR sv_py_entry_count "${sv_py_entry_count} + 1")
  elseif(sv_py_section STREQUAL "project" AND line MATCHES "^name = \"(.*)\"$")
    set(SV_PY_NAME "${CMAKE_MATCH_1}")
  elseif(sv_py_section STREQUAL "project" AND line MATCHES "^version = \"(.*)\"$")
    set(SV_PY_VERSION "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT SV_PY_NAME OR NOT SV_PY_VERSION OR sv_py_entry_count EQUAL 0)
  message(FATAL_ERROR "${SV_PYPROJECT}: no [project] name/version or entry points")
endif()
string(REPLACE "-" "_" sv_py_dist "${SV_PY_NAME}")
set(sv_dist_info "${PROJECT_BINARY_DIR}/python/${sv_py_dist}-${SV_PY_VERSION}.dist-info")
file(WRITE "${sv_dist_info}/METADATA"
     "Metadata-Version: 2.1\nName: ${SV_PY_NAME}\nVersion: ${SV_PY_VERSION}\n"
     "Summary: sv-serve from Python and NeMo Gym's sv_serve sandbox provider\n"
     "Requires-Python: >=3.8\n")
file(WRITE "${sv_dist_info}/entry_points.txt" "${SV_PY_ENTRY_POINTS}")
file(WRITE "${sv_dist_info}/top_level.txt" "sv_client\n")
file(WRITE "${sv_dist_info}/INSTALLER" "dpkg\n")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/clients/python/src/sv_client"
        DESTINATION "${SV_PYTHON_INSTALL_DIR}" FILES_MATCHING PATTERN "*.py")
install(DIRECTORY "${sv_dist_info}" DESTINATION "${SV_PYTHON_INSTALL_DIR}")

# -- the .deb -----------------------------------------------------------------

set(CPACK_PACKAGE_NAME "sandbox-verification")
set(CPACK_PACKAGE_VENDOR "sandbox-verification")
set(CPACK_PACKAGE_CONTACT "sandbox-verification maintainers <root@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Grades untrusted code in single-use sandboxes (CAF runtime, apps, library)")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "devel")
# Debian's names: the -dev packages (the library is static and its headers
# include theirs), bubblewrap and setpriv for the local provider's isolation.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libcaf-dev (>= 0.17.6), libcaf-dev (<< 0.17.7), nlohmann-json3-dev (>= 3.11), libboost1.81-dev, libspdlog-dev (>= 1:1.10), libyaml-cpp-dev (>= 0.7), libseccomp-dev (>= 2.5), pkg-config, libsqlite3-0 (>= 3.7.0), libssl3, python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bubblewrap, util-linux")
set(CPACK_GENERATOR "DEB")
include(CPack)
