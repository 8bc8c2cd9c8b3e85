# One precompiled header of torch's heaviest headers, made once and reused by every target that
# compiles against libtorch (mfsdp_torch). ATen/ATen.h alone takes about 13 s to parse at -O3 on
# the 2-core CI machine and c10d's Backend.hpp (which includes it) about 16 s; nearly every
# translation unit reaches one of them, so a fresh build parsed them about 120 times.
#
# GCC accepts a precompiled header only where the macros it depends on are defined the same way,
# so the reuse is limited to targets compiled with the same flags: those reaching mfsdp_torch (its
# USE_* definitions), and not fuzz_readers (its own -O1 and sanitizers). Targets on c10 alone
# (core/plan, sim's model, the dashboard) keep their own narrow includes. -Winvalid-pch (which
# CMake adds) warns where a header could not be used.
#
# -DMFSDP_PRECOMPILED_HEADERS=OFF builds without it: the build that checks each file includes what
# it uses (docs/building.md).
option(MFSDP_PRECOMPILED_HEADERS "reuse one precompiled header of torch's headers across targets" ON)

# Whether `target` links mfsdp_torch, directly or through the libraries it links.
function(_mfsdp_links_torch target out)
  set(_seen "")
  set(_todo "${target}")
  set(_found FALSE)
  while(_todo)
    list(POP_FRONT _todo _t)
    if(_t IN_LIST _seen OR NOT TARGET "${_t}")
      continue()
    endif()
    list(APPEND _seen "${_t}")
    if(_t STREQUAL "mfsdp_torch")
      set(_found TRUE)
      break()
    endif()
    get_target_property(_type "${_t}" TYPE)
    set(_libs "")
    if(NOT _type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_direct "${_t}" LINK_LIBRARIES)
      if(_direct)
        list(APPEND _libs ${_direct})
      endif()
    endif()
    get_target_property(_iface "${_t}" INTERFACE_LINK_LIBRARIES)
    if(_iface)
      list(APPEND _libs ${_iface})
    endif()
    list(APPEND _todo ${_libs})
  endwhile()
  set(${out} ${_found} PARENT_SCOPE)
endfunction()

function(_mfsdp_targets_under dir out)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_d ${_subdirs})
    _mfsdp_targets_under("${_d}" _more)
    list(APPEND _targets ${_more})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()

# Called once at the end of the top-level CMakeLists.txt, when every target exists.
function(mfsdp_reuse_torch_pch)
  if(NOT MFSDP_PRECOMPILED_HEADERS)
    return()
  endif()
  add_library(mfsdp_torch_pch OBJECT "${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp")
  target_link_libraries(mfsdp_torch_pch PRIVATE mfsdp_torch)
  target_precompile_headers(mfsdp_torch_pch PRIVATE <ATen/ATen.h> <torch/csrc/distributed/c10d/Backend.hpp>
                                                    <torch/csrc/distributed/c10d/Store.hpp>)
  _mfsdp_targets_under("${PROJECT_SOURCE_DIR}" _all)
  set(_reusing 0)
  foreach(_t ${_all})
    get_target_property(_type "${_t}" TYPE)
    get_target_property(_options "${_t}" COMPILE_OPTIONS)
    if(_t STREQUAL "mfsdp_torch_pch" OR NOT _type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$"
       OR _options)
      continue()
    endif()
    _mfsdp_links_torch("${_t}" _torch)
    if(_torch)
      target_precompile_headers("${_t}" REUSE_FROM mfsdp_torch_pch)
      math(EXPR _reusing "${_reusing} + 1")
    endif()
  endforeach()
  message(STATUS "MatrixFSDP: ${_reusing} targets reuse the precompiled torch header (MFSDP_PRECOMPILED_HEADERS)")
endfunction()
