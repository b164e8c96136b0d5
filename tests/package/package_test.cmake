# Run with cmake -P (see CMakeLists.txt). Steps: install the dsinfer build tree into a fresh
# prefix, configure and build the consumer project against that prefix only, run it.
foreach(var DSINFER_BINARY_DIR WORK_DIR CONSUMER_SOURCE_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "package_test.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${prefix} ${consumer_build})

function(run_step name)
  message(STATUS "package_consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "package_consumer: step '${name}' failed (${rc}): ${cmd}")
  endif()
endfunction()

run_step("install into ${prefix}"
  ${CMAKE_COMMAND} --install ${DSINFER_BINARY_DIR} --prefix ${prefix} --config ${CONFIG})

if(NOT EXISTS ${prefix}/include/dsinfer/dsinfer.hpp)
  message(FATAL_ERROR "package_consumer: the install has no include/dsinfer/dsinfer.hpp")
endif()

set(configure_args
  -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build} -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${CONFIG}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  -DCMAKE_PREFIX_PATH=${prefix}
  # Only the fresh prefix may provide dsinfer (not a package registry or the build tree).
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(EXTRA_FLAGS)
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}"
       "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
endif()
run_step("configure the consumer" ${CMAKE_COMMAND} ${configure_args})
run_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${CONFIG})

find_program(app NAMES app PATHS ${consumer_build} ${consumer_build}/${CONFIG} NO_DEFAULT_PATH)
if(NOT app)
  message(FATAL_ERROR "package_consumer: built consumer executable not found")
endif()
run_step("run the consumer" ${app})
message(STATUS "package_consumer: passed")
