# Run with cmake -P (see CMakeLists.txt). Steps:
#  1. install the dsinfer build tree into a fresh prefix, then MOVE the prefix elsewhere (the
#     package must be relocatable); the installed *.cmake files must name no absolute path of
#     the build, the source, the first prefix or the CUDA toolkit, and no CUDA library; the
#     tools run from the moved bin/ (--version) and the docs are in share/doc/dsinfer;
#  2. the CPU-only consumer configures with the CUDA toolkit hidden (CMAKE_DISABLE_FIND_PACKAGE_
#     CUDAToolkit, the toolkit's prefix ignored, no nvcc on PATH), builds, has no CUDA library
#     (nor the plugin) among its NEEDED entries, stays small, and runs a CPU engine without
#     mapping any CUDA library;
#  3. with CUDA in the build: the plugin exports its entry point only; a consumer with
#     COMPONENTS cuda configures (toolkit hidden too), builds and runs, and a CUDA engine on a
#     machine without a GPU fails with a typed error from the loaded plugin; a plugin that is not
#     there (DSINFER_CUDA_PLUGIN) gives a typed error naming it; COMPONENTS cuda fails to
#     configure, with a clear message, when the plugin is missing from the prefix.
#     Without CUDA: COMPONENTS cuda fails to configure with a clear message.
# What this build cannot check is reported as "skipped" with the reason.
foreach(var DSINFER_BINARY_DIR WORK_DIR CONSUMER_SOURCE_DIR GENERATOR CXX_COMPILER SOURCE_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "package_test.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()
if(NOT DEFINED WITH_CUDA)
  set(WITH_CUDA 0)
endif()
# The CPU consumer is ~7 MiB; linked with the CUDA backend it was 47 MiB.
if(NOT MAX_CONSUMER_MB)
  set(MAX_CONSUMER_MB 20)
endif()
if(NOT LIBDIR)
  set(LIBDIR lib)
endif()

set(first_prefix ${WORK_DIR}/prefix)
set(moved_root ${WORK_DIR}/moved)
set(prefix ${moved_root}/prefix)
file(REMOVE_RECURSE ${first_prefix} ${moved_root} ${WORK_DIR}/server-consumer-build ${WORK_DIR}/consumer-build
     ${WORK_DIR}/consumer-cuda-build ${WORK_DIR}/consumer-cuda-negative)

function(run_step name)
  message(STATUS "package_consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "package_consumer: step '${name}' failed (${rc}): ${cmd}")
  endif()
endfunction()

# Like run_step, and returns the output (stdout and stderr) in out_var.
function(run_step_output name out_var)
  message(STATUS "package_consumer: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "package_consumer: step '${name}' failed (${rc}): ${cmd}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# ---- 1. install, move, inspect ----------------------------------------------------------------
run_step("install into ${first_prefix}"
  ${CMAKE_COMMAND} --install ${DSINFER_BINARY_DIR} --prefix ${first_prefix} --config ${CONFIG})
file(MAKE_DIRECTORY ${moved_root})
file(RENAME ${first_prefix} ${prefix})
message(STATUS "package_consumer: moved the prefix to ${prefix}")
if(EXISTS ${first_prefix})
  message(FATAL_ERROR "package_consumer: ${first_prefix} still exists after the move")
endif()

if(NOT EXISTS ${prefix}/include/dsinfer/dsinfer.hpp)
  message(FATAL_ERROR "package_consumer: the install has no include/dsinfer/dsinfer.hpp")
endif()
# The tools in bin/ (when the build has them), running from the moved prefix, and the docs.
if(EXISTS ${DSINFER_BINARY_DIR}/tools/ds-inspect)
  set(_tools ds-benchmark ds-compare ds-conformance ds-convert ds-inspect ds-loadgen ds-profiler)
  if(EXISTS ${DSINFER_BINARY_DIR}/tools/ds-serve)
    list(APPEND _tools ds-serve)
  endif()
  foreach(tool IN LISTS _tools)
    execute_process(COMMAND ${prefix}/bin/${tool} --version RESULT_VARIABLE rc
                    OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "^${tool} \\(dsinfer [0-9]+\\.[0-9]+\\.[0-9]+\\)")
      message(FATAL_ERROR "package_consumer: ${prefix}/bin/${tool} --version: exit ${rc}\n"
                          "${out}${err}")
    endif()
  endforeach()
  message(STATUS "package_consumer: the tools in bin/ run from the moved prefix")
endif()
foreach(doc README.md LICENSE ARCHITECTURE.md)
  if(NOT EXISTS ${prefix}/share/doc/dsinfer/${doc})
    message(FATAL_ERROR "package_consumer: the install has no share/doc/dsinfer/${doc}")
  endif()
endforeach()

file(GLOB_RECURSE installed_cmake ${prefix}/*.cmake)
if(NOT installed_cmake)
  message(FATAL_ERROR "package_consumer: the install has no *.cmake files")
endif()
set(forbidden ${first_prefix} ${DSINFER_BINARY_DIR} ${SOURCE_DIR} /usr/local/cuda)
if(CUDA_ROOT)
  file(REAL_PATH ${CUDA_ROOT} cuda_real)
  list(APPEND forbidden ${CUDA_ROOT} ${cuda_real})
endif()
foreach(f IN LISTS installed_cmake)
  file(READ ${f} text)
  foreach(path IN LISTS forbidden)
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "package_consumer: ${f} names the absolute path ${path}: "
                          "the package is not relocatable")
    endif()
  endforeach()
  if(f MATCHES "dsinfer-targets")
    string(REGEX MATCH "[^\n]*(cudart|cudnn|cublas|CUDA::)[^\n]*" cuda_ref "${text}")
    if(cuda_ref)
      message(FATAL_ERROR "package_consumer: the exported targets (${f}) name CUDA: ${cuda_ref}")
    endif()
  endif()
endforeach()
message(STATUS "package_consumer: no absolute path or CUDA library in the installed *.cmake files")

find_program(READELF NAMES readelf)
if(NOT READELF)
  message(FATAL_ERROR "package_consumer: readelf not found (binutils)")
endif()

# Runs readelf with ARGN; out_var: for each output line matching line_regex, the first group
# of field_regex in it.
function(readelf_list out_var line_regex field_regex)
  execute_process(COMMAND ${READELF} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package_consumer: readelf ${ARGN} failed")
  endif()
  string(REGEX MATCHALL "${line_regex}" lines "${out}")
  set(fields "")
  foreach(l IN LISTS lines)
    string(REGEX REPLACE "${field_regex}" "\\1" field "${l}")
    list(APPEND fields ${field})
  endforeach()
  set(${out_var} "${fields}" PARENT_SCOPE)
endfunction()

# Fails when `exe` needs a CUDA library or the plugin, or is larger than MAX_CONSUMER_MB.
function(check_consumer_binary exe)
  readelf_list(libs "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" ".*\\[(.*)\\]" -d ${exe})
  foreach(lib IN LISTS libs)
    if(lib MATCHES "cuda|cudnn|cublas|nvrtc|nvJit")
      message(FATAL_ERROR "package_consumer: ${exe} needs ${lib} (NEEDED: ${libs})")
    endif()
  endforeach()
  file(SIZE ${exe} bytes)
  math(EXPR mb "${bytes} / 1048576")
  if(mb GREATER ${MAX_CONSUMER_MB})
    message(FATAL_ERROR "package_consumer: ${exe} is ${mb} MiB (limit ${MAX_CONSUMER_MB} MiB): "
                        "a CPU consumer should not carry the CUDA backend")
  endif()
  message(STATUS "package_consumer: ${exe}: ${bytes} bytes, NEEDED: ${libs}")
endfunction()

set(plugin ${prefix}/${LIBDIR}/libdsinfer_cuda.so)
if(WITH_CUDA)
  if(NOT EXISTS ${plugin})
    message(FATAL_ERROR "package_consumer: the install has no CUDA plugin ${plugin}")
  endif()
  # One exported symbol: the entry point (everything else is bound inside the plugin).
  readelf_list(exported "[^\n]*(GLOBAL|WEAK|UNIQUE) +DEFAULT +[0-9]+ [^\n]*" ".* ([^ ]+)$"
               --dyn-syms -W ${plugin})
  if(NOT exported STREQUAL "dsinfer_cuda_plugin_v1")
    list(LENGTH exported n)
    message(FATAL_ERROR "package_consumer: the plugin exports ${n} symbols, expected only "
                        "dsinfer_cuda_plugin_v1: ${exported}")
  endif()
  execute_process(COMMAND ${READELF} -d ${plugin} OUTPUT_VARIABLE dyn)
  string(FIND "${dyn}" "${DSINFER_BINARY_DIR}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "package_consumer: the installed plugin's RUNPATH names the build tree")
  endif()
  message(STATUS "package_consumer: the plugin exports dsinfer_cuda_plugin_v1 only")
elseif(EXISTS ${plugin})
  message(FATAL_ERROR "package_consumer: a build without CUDA installed ${plugin}")
endif()

# ---- 2. CPU-only consumer, CUDA toolkit hidden ---------------------------------------------
# Hidden: find_package(CUDAToolkit) is disabled, the toolkit's prefix is ignored, and no PATH
# entry naming cuda (nvcc) remains. The dsinfer package of a CUDA build used to need it.
set(path_entries "$ENV{PATH}")
string(REPLACE ":" ";" path_entries "${path_entries}")
set(hidden_path "")
foreach(p IN LISTS path_entries)
  if(NOT p MATCHES "cuda")
    list(APPEND hidden_path ${p})
  endif()
endforeach()
string(REPLACE ";" ":" hidden_path "${hidden_path}")
set(ignore_prefixes /usr/local/cuda)
if(CUDA_ROOT)
  file(REAL_PATH ${CUDA_ROOT} cuda_real)
  list(APPEND ignore_prefixes ${CUDA_ROOT} ${cuda_real})
endif()
list(REMOVE_DUPLICATES ignore_prefixes)
set(hide_cuda_cache ${WORK_DIR}/hide_cuda.cmake)
file(WRITE ${hide_cuda_cache}
  "set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit ON CACHE BOOL \"hidden by package_test.cmake\")\n"
  "set(CMAKE_IGNORE_PREFIX_PATH \"${ignore_prefixes}\" CACHE STRING \"hidden by package_test.cmake\")\n")
set(hide_cuda_env ${CMAKE_COMMAND} -E env --unset=CUDA_PATH --unset=CUDA_HOME --unset=CUDACXX
    --unset=CUDAToolkit_ROOT "PATH=${hidden_path}")

function(consumer_configure_args build_dir out_var)
  set(args
    -S ${CONSUMER_SOURCE_DIR} -B ${build_dir} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=${CONFIG}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_PREFIX_PATH=${prefix}
    # Only the moved prefix may provide dsinfer (not a package registry or the build tree).
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    # The CUDA toolkit, hidden (CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit, CMAKE_IGNORE_PREFIX_PATH).
    -C ${hide_cuda_cache})
  if(EXTRA_FLAGS)
    list(APPEND args "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
  endif()
  set(${out_var} ${args} ${ARGN} PARENT_SCOPE)
endfunction()

function(find_app build_dir out_var)
  unset(app CACHE)
  find_program(app NAMES app PATHS ${build_dir} ${build_dir}/${CONFIG} NO_DEFAULT_PATH NO_CACHE)
  if(NOT app)
    message(FATAL_ERROR "package_consumer: built consumer executable not found in ${build_dir}")
  endif()
  set(${out_var} ${app} PARENT_SCOPE)
endfunction()

set(cpu_build ${WORK_DIR}/consumer-build)
consumer_configure_args(${cpu_build} cpu_args)
run_step("configure the CPU-only consumer (CUDA toolkit hidden)" ${hide_cuda_env} ${CMAKE_COMMAND} ${cpu_args})
run_step("build the CPU-only consumer" ${CMAKE_COMMAND} --build ${cpu_build} --config ${CONFIG})
find_app(${cpu_build} cpu_app)
check_consumer_binary(${cpu_app})
run_step("run the CPU-only consumer (a CPU engine maps no CUDA library)" ${cpu_app})

# ---- 2b. the README's quick start, as a user copies it -----------------------------------------
# The first ```cpp block after "## Quick start" and the first ```cmake block after "## Using
# dsinfer from another CMake project", written to a fresh folder, configured with only
# CMAKE_PREFIX_PATH (as the README says), built, and run from the source tree (its model path
# is relative): the README's run, outputs by name, submit and metrics must work as written.
function(readme_block heading lang out_var)
  file(READ ${SOURCE_DIR}/README.md readme)
  string(FIND "${readme}" "${heading}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "package_consumer: README.md has no '${heading}'")
  endif()
  string(SUBSTRING "${readme}" ${at} -1 rest)
  string(FIND "${rest}" "```${lang}\n" open)
  if(open EQUAL -1)
    message(FATAL_ERROR "package_consumer: README.md has no ```${lang} block after '${heading}'")
  endif()
  string(LENGTH "```${lang}\n" skip)
  math(EXPR open "${open} + ${skip}")
  string(SUBSTRING "${rest}" ${open} -1 rest)
  string(FIND "${rest}" "```" close)
  string(SUBSTRING "${rest}" 0 ${close} block)
  set(${out_var} "${block}" PARENT_SCOPE)
endfunction()
set(readme_src ${WORK_DIR}/readme-app)
set(readme_build ${WORK_DIR}/readme-app-build)
file(REMOVE_RECURSE ${readme_src} ${readme_build})
readme_block("## Quick start" "cpp" readme_cpp)
readme_block("## Using dsinfer from another CMake project" "cmake" readme_cmake)
file(WRITE ${readme_src}/main.cpp "${readme_cpp}")
file(WRITE ${readme_src}/CMakeLists.txt "${readme_cmake}")
set(readme_args -S ${readme_src} -B ${readme_build} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${CONFIG}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    -C ${hide_cuda_cache})
if(EXTRA_FLAGS)
  list(APPEND readme_args "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
endif()
run_step("configure the README's quick start" ${hide_cuda_env} ${CMAKE_COMMAND} ${readme_args})
run_step("build the README's quick start" ${CMAKE_COMMAND} --build ${readme_build} --config ${CONFIG})
find_app(${readme_build} readme_app)
message(STATUS "package_consumer: run the README's quick start")
execute_process(COMMAND ${readme_app} WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
# 100 submitted requests all answered, batched (mean batch size printed), and the Prometheus text.
if(NOT rc EQUAL 0 OR NOT out MATCHES "100 ok, mean batch [0-9.]+" OR NOT out MATCHES "dsinfer ")
  message(FATAL_ERROR "package_consumer: the README's quick start exited ${rc} or printed "
                      "no '100 ok, mean batch ...':\n${out}${err}")
endif()

# ---- 2c. COMPONENTS server: a program embedding the KServe v2 server ------------------------
if(EXISTS ${prefix}/${LIBDIR}/cmake/dsinfer/dsinfer-server-targets.cmake)
  set(server_src ${SOURCE_DIR}/tests/package/server_consumer)
  set(server_build ${WORK_DIR}/server-consumer-build)
  set(server_repo ${WORK_DIR}/server-repo)
  file(REMOVE_RECURSE ${server_build} ${server_repo})
  file(MAKE_DIRECTORY ${server_repo}/digits/1)
  file(COPY_FILE ${SOURCE_DIR}/models/digits/digits.onnx ${server_repo}/digits/1/model.onnx)
  set(server_args -S ${server_src} -B ${server_build} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${CONFIG}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
      -C ${hide_cuda_cache})
  if(EXTRA_FLAGS)
    list(APPEND server_args "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
  endif()
  run_step("configure a consumer with COMPONENTS server" ${hide_cuda_env} ${CMAKE_COMMAND} ${server_args})
  run_step("build the server consumer" ${CMAKE_COMMAND} --build ${server_build} --config ${CONFIG})
  unset(server_app CACHE)
  find_program(server_app NAMES server_app PATHS ${server_build} ${server_build}/${CONFIG}
               NO_DEFAULT_PATH NO_CACHE)
  if(NOT server_app)
    message(FATAL_ERROR "package_consumer: the server consumer was not built")
  endif()
  run_step("run the server consumer (serves a repository, then drains)" ${server_app} ${server_repo})
else()
  message(STATUS "package_consumer: skipped COMPONENTS server (this build has no dsinfer::server)")
endif()

# ---- 3. COMPONENTS cuda ----------------------------------------------------------------------
set(cuda_build ${WORK_DIR}/consumer-cuda-build)
set(negative_build ${WORK_DIR}/consumer-cuda-negative)
# Configures the CUDA consumer where it must fail; the output must match `expect`.
function(expect_cuda_configure_failure why expect)
  consumer_configure_args(${negative_build} args -DCONSUMER_CUDA=ON)
  message(STATUS "package_consumer: COMPONENTS cuda must fail to configure: ${why}")
  execute_process(COMMAND ${hide_cuda_env} ${CMAKE_COMMAND} ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  file(REMOVE_RECURSE ${negative_build})
  if(rc EQUAL 0)
    message(FATAL_ERROR "package_consumer: COMPONENTS cuda configured although ${why}:\n${out}")
  endif()
  # CMake wraps the package's message: match it with the line breaks folded.
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")
  if(NOT flat MATCHES "${expect}")
    message(FATAL_ERROR "package_consumer: COMPONENTS cuda failed (${why}) without the "
                        "expected message '${expect}':\n${out}")
  endif()
  string(REGEX MATCH "Reason given by package: .*" reason "${flat}")
  string(REGEX REPLACE " -- Configuring incomplete.*" "" reason "${reason}")
  message(STATUS "package_consumer: as expected, it failed. ${reason}")
endfunction()

if(WITH_CUDA)
  consumer_configure_args(${cuda_build} cuda_args -DCONSUMER_CUDA=ON)
  run_step("configure the consumer with COMPONENTS cuda (CUDA toolkit hidden)"
           ${hide_cuda_env} ${CMAKE_COMMAND} ${cuda_args})
  run_step("build the COMPONENTS cuda consumer" ${CMAKE_COMMAND} --build ${cuda_build} --config ${CONFIG})
  find_app(${cuda_build} cuda_app)
  check_consumer_binary(${cuda_app})
  run_step_output("run the COMPONENTS cuda consumer: a CUDA engine" out ${cuda_app} cuda)
  if(NOT out MATCHES "plugin mapped: ${plugin}")
    message(FATAL_ERROR "package_consumer: the plugin was not loaded from the moved prefix (${plugin})")
  endif()
  if(out MATCHES "cuda engine: ")
    # No GPU: the error came from the plugin (no device), not from loading it.
    if(out MATCHES "could not be loaded")
      message(FATAL_ERROR "package_consumer: the CUDA plugin failed to load")
    endif()
    message(STATUS "package_consumer: skipped: a CUDA engine on a GPU (this machine has none); "
                   "checked the typed 'unavailable' error instead")
  endif()
  set(missing ${WORK_DIR}/no-such-dir/libdsinfer_cuda.so)
  run_step_output("run the COMPONENTS cuda consumer with DSINFER_CUDA_PLUGIN=${missing}" out
                  ${CMAKE_COMMAND} -E env DSINFER_CUDA_PLUGIN=${missing} ${cuda_app} cuda-missing)
  if(NOT out MATCHES "unavailable: .*DSINFER_CUDA_PLUGIN.*no-such-dir/libdsinfer_cuda.so")
    message(FATAL_ERROR "package_consumer: the missing plugin's error does not name it")
  endif()

  file(RENAME ${plugin} ${plugin}.hidden)
  expect_cuda_configure_failure("the plugin is missing from the prefix"
                                "component 'cuda': the CUDA plugin .*libdsinfer_cuda.so is missing")
  file(RENAME ${plugin}.hidden ${plugin})
  message(STATUS "package_consumer: skipped: COMPONENTS cuda on a build without CUDA "
                 "(this build has CUDA; a -DDSINFER_WITH_CUDA=OFF build checks it)")
else()
  expect_cuda_configure_failure("this build has no CUDA backend"
                                "component 'cuda': this dsinfer was built without the CUDA backend")
  message(STATUS "package_consumer: skipped: the COMPONENTS cuda consumer build and run "
                 "(this build has no CUDA backend)")
endif()
message(STATUS "package_consumer: passed")
