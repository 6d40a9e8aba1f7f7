# FindCAF: locates the C++ Actor Framework as Debian packages it (libcaf-dev),
# which ships headers and libraries but no CMake config file.
#
# Components: core, io, openssl. Result: CAF_FOUND, CAF_VERSION, imported
# targets CAF::core, CAF::io and CAF::openssl (openssl depends on io, io on
# core, core on Threads::Threads).

find_package(Threads REQUIRED)

find_path(CAF_INCLUDE_DIR NAMES caf/config.hpp)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_version_num
                       "${_caf_version_line}")
  if(_caf_version_num)
    # CAF encodes MAJOR * 10000 + MINOR * 100 + PATCH, e.g. 1706 -> 0.17.6.
    math(EXPR CAF_VERSION_MAJOR "${_caf_version_num} / 10000")
    math(EXPR CAF_VERSION_MINOR "(${_caf_version_num} / 100) % 100")
    math(EXPR CAF_VERSION_PATCH "${_caf_version_num} % 100")
    set(CAF_VERSION "${CAF_VERSION_MAJOR}.${CAF_VERSION_MINOR}.${CAF_VERSION_PATCH}")
  endif()
endif()

set(_caf_required_vars CAF_INCLUDE_DIR)
foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${_comp}_LIBRARY NAMES caf_${_comp})
  if(CAF_${_comp}_LIBRARY)
    set(CAF_${_comp}_FOUND TRUE)
  else()
    set(CAF_${_comp}_FOUND FALSE)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS ${_caf_required_vars}
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)

if(CAF_FOUND)
  if(CAF_core_FOUND AND NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_core_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  if(CAF_io_FOUND AND NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_io_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(CAF_openssl_FOUND AND NOT TARGET CAF::openssl)
    add_library(CAF::openssl UNKNOWN IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_openssl_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()

mark_as_advanced(CAF_INCLUDE_DIR CAF_core_LIBRARY CAF_io_LIBRARY
                 CAF_openssl_LIBRARY)
