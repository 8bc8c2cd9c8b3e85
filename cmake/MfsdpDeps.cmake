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
find_package(Threads REQUIRED)
include(GoogleTest)
include(MfsdpTesting)

# One place for project-wide warnings.
add_library(mfsdp_warnings INTERFACE)
target_compile_options(mfsdp_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
