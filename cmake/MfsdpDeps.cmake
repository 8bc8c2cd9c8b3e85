# Finds every dependency once, with a message that names the package and how to install it.
# libtorch comes from the PyPI torch wheel in the project's virtual environment (scripts/setup.sh
# passes CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path and MFSDP_PYTHON).

set(MFSDP_PYTHON "" CACHE FILEPATH "Python of the virtual environment holding the torch wheel")

macro(mfsdp_require pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "MatrixFSDP needs ${pkg}: install it with 'apt-get install -y ${debian}' "
                        "(or run scripts/setup.sh, which installs everything)")
  endif()
endmacro()

include(MfsdpTorch)

# Gloo's own headers are not shipped in the wheel, but c10d's ProcessGroupGloo.hpp includes them.
# Debian's libgloo-dev supplies declarations (only declarations are used: the Gloo that runs is the
# one linked statically into libtorch_cpu.so).
find_path(MFSDP_GLOO_INCLUDE gloo/rendezvous/store.h)
if(NOT MFSDP_GLOO_INCLUDE)
  message(FATAL_ERROR "MatrixFSDP needs Gloo's headers: install them with 'apt-get install -y libgloo-dev'")
endif()

mfsdp_require(GTest "libgtest-dev libgmock-dev")
mfsdp_require(benchmark libbenchmark-dev)
mfsdp_require(nlohmann_json nlohmann-json3-dev)
mfsdp_require(CLI11 libcli11-dev)
find_package(rapidcheck CONFIG QUIET)  # Debian's config has no version file
if(NOT rapidcheck_FOUND)
  message(FATAL_ERROR "MatrixFSDP needs RapidCheck: install it with 'apt-get install -y librapidcheck-dev'")
endif()
# RE2 (libre2-dev), for the tolerance files' tensor patterns: matching in linear time with bounded
# memory. Debian ships no CMake config for it, only the header and the library.
find_path(MFSDP_RE2_INCLUDE re2/re2.h)
find_library(MFSDP_RE2_LIBRARY re2)
if(NOT MFSDP_RE2_INCLUDE OR NOT MFSDP_RE2_LIBRARY)
  message(FATAL_ERROR "MatrixFSDP needs RE2: install it with 'apt-get install -y libre2-dev'")
endif()
add_library(mfsdp_re2 INTERFACE)
target_include_directories(mfsdp_re2 SYSTEM INTERFACE ${MFSDP_RE2_INCLUDE})
target_link_libraries(mfsdp_re2 INTERFACE ${MFSDP_RE2_LIBRARY})
find_package(Threads REQUIRED)
include(GoogleTest)
include(MfsdpTesting)

# One place for project-wide warnings.
add_library(mfsdp_warnings INTERFACE)
target_compile_options(mfsdp_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
