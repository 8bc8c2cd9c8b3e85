# Properties (labels, cost) of tests that gtest_discover_tests finds. Their names are known only
# when ctest runs, so a file that ctest reads after the discovered tests sets them: it reads the
# discovered names of TARGET from gtest's generated list and applies LABELS and COST (ctest's
# scheduling weight: higher starts first under -j) to those whose name matches the regular
# expression MATCH (default: every test of TARGET) and not EXCLUDE (default: none). ctest ADDS
# labels set this way to the test's labels (it never removes one), so a test kept out of a label
# must be excluded where the label is given, not relabelled later.
# ENVIRONMENT "VAR=value" sets the tests' environment (gtest_discover_tests' own PROPERTIES ENVIRONMENT
# reached none of them under CMake 3.25). Call after gtest_discover_tests(TARGET ...) in the same directory.
#   mfsdp_discovered_test_properties(differential_tests MATCH "/W[35]_" LABELS differential quick COST 60)
#   mfsdp_discovered_test_properties(hsdp_tests MATCH "^Meshes/" EXCLUDE "/R2xS2_" LABELS exhaustive)
function(mfsdp_discovered_test_properties target)
  cmake_parse_arguments(A "" "MATCH;EXCLUDE;COST;ENVIRONMENT" "LABELS" ${ARGN})
  # ctest runs the directory's include files in order: properties set before the target's
  # discovered tests are added reach no test (the grid's quick rows were lost that way).
  get_property(_discovered TARGET ${target} PROPERTY CTEST_DISCOVERED_TEST_COUNTER)
  if(NOT _discovered)
    message(FATAL_ERROR "mfsdp_discovered_test_properties(${target} ...) comes before gtest_discover_tests(${target}): "
                        "move it after, or its properties reach no test")
  endif()
  if(NOT A_MATCH)
    set(A_MATCH ".")
  endif()
  set(_props "")
  if(A_LABELS)
    string(JOIN ";" _labels ${A_LABELS})
    string(APPEND _props " LABELS \"${_labels}\"")
  endif()
  if(A_COST)
    string(APPEND _props " COST ${A_COST}")
  endif()
  if(A_ENVIRONMENT)
    string(APPEND _props " ENVIRONMENT \"${A_ENVIRONMENT}\"")
  endif()
  set(_condition "_name MATCHES [==[${A_MATCH}]==]")
  if(A_EXCLUDE)
    string(APPEND _condition " AND NOT _name MATCHES [==[${A_EXCLUDE}]==]")
  endif()
  string(SHA1 _id "${target}${A_MATCH}${A_EXCLUDE}${_props}")
  string(SUBSTRING "${_id}" 0 12 _id)
  set(_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_properties_${_id}.cmake")
  set(_list "${CMAKE_CURRENT_BINARY_DIR}/${target}[1]_tests.cmake")
  file(WRITE "${_file}"
"if(EXISTS [==[${_list}]==])
  file(STRINGS [==[${_list}]==] _lines REGEX [==[^add_test\\(\\[=\\[]==])
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE [==[^add_test\\(\\[=\\[([^]]*)\\]=\\].*]==] [==[\\1]==] _name \"\${_line}\")
    if(${_condition})
      set_tests_properties(\"\${_name}\" PROPERTIES${_props})
    endif()
  endforeach()
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_file}")
endfunction()
