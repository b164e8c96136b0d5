# cmake -DCXX=<compiler> -DINCLUDE_SRC=<dir> -DINCLUDE_BIN=<dir> -DSOURCE=<file> -P check_compile_fail.cmake
#
# dsinfer's element types are checked at compile time: SOURCE (tensor_element_type.cpp) must
# compile with the types a tensor holds (the positive controls, so that a missing include path
# or a broken header cannot pass for the expected failure) and must fail to compile, with
# dtype.hpp's static_assert message, with every other type.
foreach(v CXX INCLUDE_SRC SOURCE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_compile_fail.cmake: -D${v}=... is required")
  endif()
endforeach()
set(_flags -std=c++20 -fsyntax-only -I${INCLUDE_SRC})
if(DEFINED INCLUDE_BIN)
  list(APPEND _flags -I${INCLUDE_BIN})
endif()
set(_expect "is not a tensor element type")

function(compile element out_rc out_text)
  execute_process(COMMAND ${CXX} ${_flags} "-DELEMENT=${element}" ${SOURCE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

# Positive controls: the same file compiles with element types dsinfer holds.
foreach(good "float" "long long" "unsigned char" "dsinfer::float16")
  compile("${good}" rc text)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "positive control failed: ELEMENT=${good} does not compile "
                        "(rc ${rc}):\n${text}")
  endif()
  message(STATUS "ELEMENT=${good}: compiles (positive control)")
endforeach()

# Every unsupported type: a compile error carrying the static_assert's message.
foreach(bad "std::complex<float>" "NotAnElement" "char" "long double" "float*")
  compile("${bad}" rc text)
  if(rc EQUAL 0)
    message(FATAL_ERROR "ELEMENT=${bad} compiled; it must be rejected at compile time")
  endif()
  string(FIND "${text}" "${_expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "ELEMENT=${bad} failed to compile, but not with the message "
                        "'${_expect}':\n${text}")
  endif()
  message(STATUS "ELEMENT=${bad}: rejected at compile time with '${_expect}'")
endforeach()
message(STATUS "PASSED: unsupported element types are compile errors")
