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
foreach(dir messages actors providers facade testing)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${dir}"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/sandbox_verification"
          FILES_MATCHING PATTERN "*.hpp")
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
