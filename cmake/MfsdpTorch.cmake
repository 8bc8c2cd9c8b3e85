# libtorch from the PyPI torch wheel, as imported targets made here rather than by the wheel's own
# TorchConfig.cmake: that config enables the CUDA language and requires a CUDA toolkit (nvcc,
# FindCUDAToolkit) even for code that compiles no kernel, so a plain Debian/Ubuntu machine without
# a system CUDA install could not build. Everything needed is in the wheel and the nvidia-* wheels
# it depends on: headers, libtorch*.so, the CUDA runtime headers and the NCCL header.
#
#   mfsdp_c10           c10 only (core/plan: no ATen, no c10d)
#   mfsdp_torch         ATen, autograd, c10d (Gloo; NCCL and the CUDA device helpers where the
#                       wheel has CUDA), torch_cuda loaded (--no-as-needed) so CUDA registers
#   mfsdp_cuda_headers  the CUDA runtime and NCCL headers of the wheel (only the NCCL backend's TU)
#
# Inputs: MFSDP_PYTHON (the venv's python; scripts/setup.sh passes it) or MFSDP_TORCH_DIR (the
# torch package directory, .../site-packages/torch).

set(MFSDP_TORCH_DIR "" CACHE PATH "The torch package directory (.../site-packages/torch)")
if(NOT MFSDP_TORCH_DIR AND MFSDP_PYTHON)
  execute_process(COMMAND ${MFSDP_PYTHON} -c "import os, torch; print(os.path.dirname(torch.__file__))"
                  OUTPUT_VARIABLE _torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0)
    set(MFSDP_TORCH_DIR "${_torch_dir}" CACHE PATH "The torch package directory" FORCE)
  endif()
endif()
if(NOT MFSDP_TORCH_DIR OR NOT EXISTS "${MFSDP_TORCH_DIR}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "MatrixFSDP needs libtorch from the torch 2.11.0 wheel: run scripts/setup.sh, or pass "
                      "-DMFSDP_PYTHON=<python with torch> or -DMFSDP_TORCH_DIR=<.../site-packages/torch> "
                      "(looked in '${MFSDP_TORCH_DIR}')")
endif()
file(STRINGS "${MFSDP_TORCH_DIR}/version.py" _torch_version_line REGEX "^__version__")
string(REGEX REPLACE "^__version__ = '([^']*)'.*" "\\1" MFSDP_TORCH_VERSION "${_torch_version_line}")
message(STATUS "MatrixFSDP: torch ${MFSDP_TORCH_VERSION} from ${MFSDP_TORCH_DIR} (no CUDA toolkit needed)")

set(_tlib "${MFSDP_TORCH_DIR}/lib")
get_filename_component(_site "${MFSDP_TORCH_DIR}/.." ABSOLUTE)

add_library(mfsdp_c10 INTERFACE)
target_include_directories(mfsdp_c10 SYSTEM INTERFACE "${MFSDP_TORCH_DIR}/include")
target_link_libraries(mfsdp_c10 INTERFACE "${_tlib}/libc10.so")

add_library(mfsdp_torch INTERFACE)
target_include_directories(mfsdp_torch SYSTEM INTERFACE "${MFSDP_TORCH_DIR}/include"
                                                        "${MFSDP_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(mfsdp_torch INTERFACE USE_DISTRIBUTED USE_C10D_GLOO USE_RPC USE_TENSORPIPE)
set(_torch_libs "${_tlib}/libtorch_cpu.so" "${_tlib}/libtorch.so")
set(MFSDP_TORCH_HAS_CUDA OFF)
if(EXISTS "${_tlib}/libtorch_cuda.so")
  set(MFSDP_TORCH_HAS_CUDA ON)
  target_compile_definitions(mfsdp_torch INTERFACE USE_C10D_NCCL)
  list(APPEND _torch_libs "${_tlib}/libtorch_cuda.so" "${_tlib}/libc10_cuda.so")
endif()
# Load every torch library whether or not a symbol of it is used (CUDA and c10d register
# themselves from static initialisers), as the wheel's own config does.
string(JOIN "," _no_as_needed ${_torch_libs})
target_link_libraries(mfsdp_torch INTERFACE "-Wl,--no-as-needed,${_no_as_needed},--as-needed" "${_tlib}/libc10.so" Threads::Threads)
# The libraries torch_cuda needs (cudart, cublas, nccl, ...) are found at link time through the
# directories of the nvidia-* wheels, and at run time through libtorch's own RUNPATH.
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${_site}/nvidia/*/lib")
foreach(_d ${_nvidia_lib_dirs} "${_tlib}")
  target_link_options(mfsdp_torch INTERFACE "-Wl,-rpath-link,${_d}")
endforeach()
target_link_options(mfsdp_torch INTERFACE "-Wl,-rpath,${_tlib}")

add_library(mfsdp_cuda_headers INTERFACE)
if(MFSDP_TORCH_HAS_CUDA)
  # CUDA 13 wheels put every header under nvidia/cu13/include; CUDA 12 wheels one folder each.
  file(GLOB _cuda_include_dirs LIST_DIRECTORIES true "${_site}/nvidia/cu*/include" "${_site}/nvidia/cuda_runtime/include"
       "${_site}/nvidia/cublas/include" "${_site}/nvidia/cusparse/include" "${_site}/nvidia/nccl/include")
  if(NOT _cuda_include_dirs)
    # A torch installed without the nvidia-* wheels (a system CUDA install beside it): its headers.
    foreach(_c "$ENV{CUDA_HOME}" "$ENV{CUDAToolkit_ROOT}" /usr/local/cuda)
      if(_c AND EXISTS "${_c}/include/cuda_runtime_api.h")
        set(_cuda_include_dirs "${_c}/include")
        break()
      endif()
    endforeach()
  endif()
  if(NOT _cuda_include_dirs)
    message(FATAL_ERROR "MatrixFSDP: torch was built with CUDA but the CUDA runtime headers of its nvidia-* "
                        "wheels were not found under ${_site}/nvidia (reinstall torch with its dependencies)")
  endif()
  target_include_directories(mfsdp_cuda_headers SYSTEM INTERFACE ${_cuda_include_dirs})
endif()
