# ctest driver for ds-conformance's command line and exit status.
#   cmake -DCONFORMANCE=<ds-conformance> -DMODE=cli -DWORK=<dir> -P check_ds_conformance.cmake
#       --help and -h (exit 0, the manual page with every flag documented on stdout),
#       --version; bad command lines (exit 2,
#       "ds-conformance: <problem>" then the usage on stderr, nothing on stdout): malformed and
#       out-of-range numbers, unknown options, missing values, an unknown backend or device, a
#       suite folder that does not exist, a --json file that cannot be written; an empty suite
#       folder (exit 1: no tests).
#   cmake -DCONFORMANCE=<ds-conformance> -DMODE=suites -DDATA=<onnx-backend-tests> -DWORK=<dir>
#         -P check_ds_conformance.cmake
#       on scratch suites made of copies of two small node tests (test_relu, test_add): a good
#       suite passes (exit 0, "2 passed", a parsable --json, the --expect-pass and --filter
#       counts); a filter matching nothing, a test folder given as the suite, a must-pass test
#       that is missing, broken test data (a truncated and a missing output_0.pb, also under
#       --expect-pass) and a --json write that fails at the end each exit 1 with the reason on
#       stderr. Prints "SKIPPED: ..." when DATA lacks the node tests.
set(TOOL ${CONFORMANCE})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/empty)

# Runs TOOL ARG...: it must exit with `want_rc`; sets `so` and `se` (and echoes stdout).
function(expect_rc want_rc)
  run_tool(rc out err ${ARGN})
  message("ds-conformance ${ARGN} -> ${rc}\n${out}")
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "ds-conformance ${ARGN}: exit ${rc}, want ${want_rc}\n"
                        "stdout:\n${out}\nstderr:\n${err}")
  endif()
  set(so "${out}" PARENT_SCOPE)
  set(se "${err}" PARENT_SCOPE)
endfunction()
# `text` (a variable's name) must match each regex.
function(expect_match what text)
  foreach(re IN LISTS ARGN)
    if(NOT "${${text}}" MATCHES "${re}")
      message(FATAL_ERROR "${what}: no match for '${re}' in:\n${${text}}")
    endif()
  endforeach()
endfunction()

if(MODE STREQUAL "cli")
  set(flags --suite --filter --rtol --atol --json --expect-pass --timeout --no-fork --quiet --stats
            --backends --device --precision --compare-levels --help)
  foreach(h --help -h)
    expect_rc(0 ${h})
    if(NOT se STREQUAL "")
      message(FATAL_ERROR "${h} printed on stderr:\n${se}")
    endif()
    expect_match("${h}" so "^NAME\n    ds-conformance - " "\nSYNOPSIS\n    ds-conformance --suite DIR"
                 "\nEXIT STATUS\n")
    foreach(f IN LISTS flags)
      # In the synopsis and with its own line in the option list.
      expect_match("${h}: ${f}" so "[[ ]${f}[] \n]" "\n  (-h,)?${f}[ \n]")
    endforeach()
  endforeach()

  check_version(ds-conformance)

  file(WRITE ${WORK}/not_a_folder "")
  # exit status | first stderr line must match | arguments, space-separated (@M@: an empty folder)
  set(cases
      "2|--rtol: 'abc' is not a number|--suite @M@ --rtol abc"
      "2|--atol: '1e-3x' is not a number|--suite @M@ --atol 1e-3x"
      "2|--rtol: '-1' is out of range|--suite @M@ --rtol -1"
      "2|--atol: 'nan' is out of range|--suite @M@ --atol nan"
      "2|--timeout: '0' is out of range|--suite @M@ --timeout 0"
      "2|--timeout: '-5' is out of range|--suite @M@ --timeout -5"
      "2|--timeout: '1.5' is not a whole number|--suite @M@ --timeout 1.5"
      "2|--timeout: 'ten' is not a whole number|--suite @M@ --timeout ten"
      "2|unknown option '--frobnicate'|--suite @M@ --frobnicate"
      "2|unexpected argument 'extra'|--suite @M@ extra"
      "2|--rtol: missing value|--suite @M@ --rtol"
      "2|--suite: missing value|--suite"
      "2|--json: expects a value, got the option '--quiet'|--suite @M@ --json --quiet"
      "2|--suite is required|--rtol 1e-3"
      "2|--filter: 'a\\(b' is not a valid regex|--suite @M@ --filter a(b"
      "2|--backends: unknown backend 'gpu'|--suite @M@ --backends cpu,gpu"
      "2|--backends: backend 'cuda'|--suite @M@ --backends cuda"
      "2|--backends: 'cpu,' has an empty backend name|--suite @M@ --backends cpu,"
      "2|--device: .*'gpu' is not one of cpu, cuda, cuda:N|--suite @M@ --device gpu"
      "2|--precision: 'fp8' is not one of fp32, tf32, fp16, bf16|--suite @M@ --precision fp8"
      "2|--precision fp16 needs a CUDA --device|--suite @M@ --precision fp16"
      "2|--suite: no such folder|--suite @M@/missing"
      "2|--suite: '.*/not_a_folder' is not a folder|--suite ${WORK}/not_a_folder"
      "2|--expect-pass: cannot read|--suite @M@ --expect-pass @M@/missing.txt"
      "2|--json: cannot write '.*/missing/out.json'|--suite @M@ --json @M@/missing/out.json"
      "2|--json: cannot write '/proc/ds-conformance.json'|--suite @M@ --json /proc/ds-conformance.json"
      "1|no tests in '.*/empty'|--suite @M@")
  check_bad_cases(ds-conformance ${WORK}/empty ${cases})
  return()
endif()

if(NOT MODE STREQUAL "suites")
  message(FATAL_ERROR "MODE must be cli or suites, got '${MODE}'")
endif()
foreach(t test_relu test_add)
  if(NOT EXISTS ${DATA}/node/${t}/model.onnx OR NOT EXISTS ${DATA}/node/${t}/test_data_set_0/output_0.pb)
    message("SKIPPED: no ONNX backend test ${DATA}/node/${t}")
    return()
  endif()
endforeach()

# A good suite: two node tests that pass.
file(COPY ${DATA}/node/test_relu ${DATA}/node/test_add DESTINATION ${WORK}/good NO_SOURCE_PERMISSIONS)
set(summary "2 passed, 0 failed, 0 skipped \\(0 unsupported, 0 not run\\), 0 broken data\n$")
expect_rc(0 --suite ${WORK}/good --json ${WORK}/good.json)
expect_match("good suite" so "(^|\n)pass test_add\n" "\npass test_relu\n" "${summary}")
file(READ ${WORK}/good.json line)
foreach(key passed failed broken unsupported not_run crashed)
  get_field(n_${key} ${key})
endforeach()
string(JSON ntests LENGTH "${line}" tests)
get_field(first tests 0 name)
get_field(first_status tests 0 status)
if(NOT n_passed EQUAL 2 OR NOT n_failed EQUAL 0 OR NOT n_broken EQUAL 0 OR NOT n_unsupported EQUAL 0
   OR NOT n_not_run EQUAL 0 OR NOT n_crashed EQUAL 0 OR NOT ntests EQUAL 2
   OR NOT first STREQUAL "test_add" OR NOT first_status STREQUAL "pass")
  message(FATAL_ERROR "unexpected --json counts or tests: ${line}")
endif()

# --expect-pass listing both, --no-fork --quiet: prints only the summary lines.
file(WRITE ${WORK}/both.txt "# must pass\ntest_add\ntest_relu\n")
expect_rc(0 --suite ${WORK}/good --quiet --no-fork --expect-pass ${WORK}/both.txt)
expect_match("--expect-pass" so "^must-pass list: 2 tests, 0 regressions\n${summary}")
# --filter: the other test is counted as not run (and as skipped).
expect_rc(0 --suite ${WORK}/good --filter relu --rtol 1e-4 --atol 0 --timeout 60)
expect_match("--filter" so "^pass test_relu\n1 passed, 0 failed, 1 skipped \\(0 unsupported, 1 not run\\), 0 broken data\n$")
# A must-pass test that is not in the suite.
file(WRITE ${WORK}/missing.txt "test_relu\ntest_nope\n")
expect_rc(1 --suite ${WORK}/good --quiet --expect-pass ${WORK}/missing.txt)
expect_match("must-pass test missing" so "MISSING test_nope")
expect_match("must-pass test missing" se "^ds-conformance: 1 must-pass test regressed\n$")

# No test selected; the suite is one test's folder; the --json write fails at the end
# (/dev/full opens, then every write fails).
check_bad_cases(ds-conformance ${WORK}/good
                "1|--filter 'nomatch' matches none of the 2 tests in|--suite @M@ --filter nomatch"
                "1|'.*/test_relu' is one test \\(it holds model.onnx\\), not a suite|--suite @M@/test_relu")
if(EXISTS /dev/full)
  expect_rc(1 --suite ${WORK}/good --quiet --json /dev/full)
  expect_match("--json /dev/full" se "^ds-conformance: cannot write --json '/dev/full'")
endif()

# Broken data: test_relu's output_0.pb cut to half its size, test_add's removed. Both are
# broken (a failure, never unsupported or skipped), with or without a must-pass list.
file(COPY ${DATA}/node/test_relu ${DATA}/node/test_add DESTINATION ${WORK}/broken NO_SOURCE_PERMISSIONS)
set(pb ${WORK}/broken/test_relu/test_data_set_0/output_0.pb)
file(SIZE ${pb} size)
math(EXPR half "${size} / 2")
find_program(TRUNCATE truncate)
if(TRUNCATE)
  execute_process(COMMAND ${TRUNCATE} -s ${half} ${pb} RESULT_VARIABLE rc)
endif()
if(NOT TRUNCATE OR NOT rc EQUAL 0)
  file(WRITE ${pb} "")  # empty: as unusable
endif()
file(REMOVE ${WORK}/broken/test_add/test_data_set_0/output_0.pb)
set(broken_summary "0 passed, 0 failed, 0 skipped \\(0 unsupported, 0 not run\\), 2 broken data\n$")
expect_rc(1 --suite ${WORK}/broken --json ${WORK}/broken.json)
expect_match("broken data" so "^broken test_add: test_data_set_0: no output_0.pb"
             "\nbroken test_relu: test_data_set_0/output_0.pb: " "${broken_summary}")
expect_match("broken data" se "^ds-conformance: broken data in 2 tests\n$")
file(READ ${WORK}/broken.json line)
get_field(nbroken broken)
get_field(status1 tests 1 status)
if(NOT nbroken EQUAL 2 OR NOT status1 STREQUAL "broken")
  message(FATAL_ERROR "broken data not counted as broken in the --json: ${line}")
endif()
file(WRITE ${WORK}/none.txt "# nothing must pass\n")
expect_rc(1 --suite ${WORK}/broken --quiet --expect-pass ${WORK}/none.txt)
expect_match("broken data, --expect-pass" se "^ds-conformance: broken data in 2 tests\n$")
