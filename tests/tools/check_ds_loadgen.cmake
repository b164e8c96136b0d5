# ctest driver for ds-loadgen.
#   cmake -DLOADGEN=<ds-loadgen> -DMODE=json -DMODEL=<model.onnx> -DARGS="--rate;200;..." \
#         -DEXPECT_MODE=open|closed [-DEXPECT_BATCHING=on|off] -P check_ds_loadgen.cmake
#       runs ds-loadgen --json and checks that the one line parses, that the required fields
#       are there and sane (completed > 0, ordered percentiles, outcomes adding up to issued,
#       one timeline entry per second) and that the mode and batching are those asked for.
#   cmake -DLOADGEN=<ds-loadgen> -DMODE=bad -DMODEL=<model.onnx> -P check_ds_loadgen.cmake
#       checks that bad command lines exit 2 with a message and the usage, and that a model
#       that cannot be loaded exits 1 with the dsinfer error; and --help.
set(TOOL ${LOADGEN})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)

if(MODE STREQUAL "bad")
  # exit status | stderr must match | arguments, space-separated (@M@ is the model)
  set(cases
      "2|unknown option '--frobnicate'|--model @M@ --rate 10 --duration 1 --frobnicate"
      "2|--model PATH is required|--rate 10 --duration 1"
      "2|--model: missing value|--model"
      "2|not both|--model @M@ --rate 10 --concurrency 2 --duration 1"
      "2|give --rate QPS or --rate-steps|--model @M@ --duration 1"
      "2|--duration SECONDS is required|--model @M@ --concurrency 2"
      "2|--rate: expects a rate > 0, got 'fast'|--model @M@ --rate fast --duration 1"
      "2|--rate: expects a rate > 0, got '-5'|--model @M@ --rate -5 --duration 1"
      "2|--duration: expects a number of seconds > 0|--model @M@ --rate 5 --duration -1"
      "2|--concurrency: must be in|--model @M@ --concurrency -2 --duration 1"
      "2|--max-queue-delay-us: must be in|--model @M@ --rate 5 --duration 1 --max-queue-delay-us -1"
      "2|--adaptive needs --p99-target-ms|--model @M@ --rate 5 --duration 1 --adaptive"
      "2|--p99-target-ms: expects a number of milliseconds > 0|--model @M@ --rate 5 --duration 1 --adaptive --p99-target-ms 0"
      "2|--batching off runs requests alone|--model @M@ --rate 5 --duration 1 --batching off --max-batch 8"
      "2|--batching: must be on or off|--model @M@ --rate 5 --duration 1 --batching maybe"
      "2|--rate-steps: expects QPS:SECONDS|--model @M@ --rate-steps 10:1,20"
      "2|--rate-steps: SECONDS expects a number of seconds > 0, got '0'|--model @M@ --rate-steps 10:0"
      "2|--rate-steps: QPS expects a rate >= 0, got '-1'|--model @M@ --rate-steps -1:1"
      "2|drop --duration|--model @M@ --rate-steps 10:1 --duration 1"
      "2|--p99-target-ms needs --adaptive|--model @M@ --rate 5 --duration 1 --p99-target-ms 5"
      "2|--timeline: takes no value|--model @M@ --rate 5 --duration 1 --timeline=1"
      "2|--workers: must be in|--model @M@ --rate 5 --duration 1 --workers 0"
      "2|not an input of the model|--model @M@ --rate 5 --duration 1 --shape nope=2x64"
      "1|io_error|--model @M@.missing --rate 5 --duration 1")
  check_bad_cases(ds-loadgen ${MODEL} ${cases})
  check_help(ds-loadgen --model --json --rate-steps --max-queue-delay-us --timeline)
  return()
endif()

run_json(ds-loadgen --model ${MODEL} ${ARGS})

macro(expect_number)
  string(JSON _t ERROR_VARIABLE err TYPE "${line}" ${ARGN})
  if(err OR NOT _t STREQUAL "NUMBER")
    message(FATAL_ERROR "field ${ARGN}: want a number, got ${_t} ${err}")
  endif()
endmacro()
get_field(mode mode)
get_field(from latency_from)
if(NOT mode STREQUAL EXPECT_MODE)
  message(FATAL_ERROR "mode ${mode}, want ${EXPECT_MODE}")
endif()
if(mode STREQUAL "open" AND NOT from STREQUAL "scheduled_arrival" OR
   mode STREQUAL "closed" AND NOT from STREQUAL "submit")
  message(FATAL_ERROR "latency_from ${from} in ${mode} loop")
endif()
foreach(f offered_rate throughput completed issued duration_s mean_batch_size first_run_ms
          batches)
  expect_number(${f})
  expect_positive(${f})
endforeach()
foreach(f rejected timed_out failed cancelled)
  expect_number(${f})
endforeach()
foreach(q p50 p90 p99 max)
  expect_number(latency_ms ${q})
  expect_positive(latency_ms ${q})
endforeach()
foreach(h queue_ms compute_ms)
  foreach(q p50 p99)
    expect_number(${h} ${q})
  endforeach()
endforeach()
expect_positive(compute_ms p50)
get_field(p50 latency_ms p50)
get_field(p90 latency_ms p90)
get_field(p99 latency_ms p99)
get_field(lmax latency_ms max)
if(p50 GREATER p90 OR p90 GREATER p99 OR p99 GREATER lmax)
  message(FATAL_ERROR "latencies out of order: p50 ${p50} p90 ${p90} p99 ${p99} max ${lmax}")
endif()
get_field(issued issued)
get_field(completed completed)
get_field(failed failed)
get_field(rejected rejected)
get_field(timed_out timed_out)
get_field(cancelled cancelled)
math(EXPR outcomes "${completed} + ${failed} + ${rejected} + ${timed_out} + ${cancelled}")
if(NOT outcomes EQUAL issued)
  message(FATAL_ERROR "outcomes add up to ${outcomes}, issued ${issued}")
endif()
if(NOT failed EQUAL 0)
  message(FATAL_ERROR "${failed} requests failed")
endif()
get_field(mean_batch mean_batch_size)
get_field(max_batch batching max_batch_size)
get_field(enabled batching enabled)
if(mean_batch GREATER max_batch)
  message(FATAL_ERROR "mean batch size ${mean_batch} above the max batch ${max_batch}")
endif()
if(DEFINED EXPECT_BATCHING)
  if(EXPECT_BATCHING STREQUAL "off" AND (enabled OR NOT max_batch EQUAL 1 OR NOT mean_batch EQUAL 1))
    message(FATAL_ERROR "--batching off: enabled ${enabled}, max batch ${max_batch}, mean ${mean_batch}")
  endif()
endif()
get_field(duration duration_s)
string(JSON ntl LENGTH "${line}" timeline)
string(REGEX REPLACE "\\.0*$" "" duration "${duration}")  # 2.0 -> 2
math(EXPR want_tl "${duration}")  # integer durations in these tests
if(NOT ntl EQUAL want_tl)
  message(FATAL_ERROR "timeline has ${ntl} entries for ${duration} s")
endif()
foreach(f t offered completed p99_ms max_batch_size max_queue_delay_us queued)
  string(JSON _t ERROR_VARIABLE err TYPE "${line}" timeline 0 ${f})
  if(err)
    message(FATAL_ERROR "timeline 0 ${f}: ${err}")
  endif()
endforeach()
if(mode STREQUAL "open")
  get_field(late generator late)
  get_field(rate offered_rate)
  string(JSON nsteps LENGTH "${line}" rate_steps)
  get_field(rate0 rate_steps 0 qps)
  if(nsteps EQUAL 1 AND NOT rate EQUAL rate0)
    message(FATAL_ERROR "offered_rate ${rate}, rate_steps[0].qps ${rate0}")
  endif()
else()
  expect_positive(concurrency)
endif()
