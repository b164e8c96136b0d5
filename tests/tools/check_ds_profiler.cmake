# ctest driver for ds-profiler (tools/ds_profiler.cpp):
#   cmake -DPROFILER=<ds-profiler> -DMODEL=<digits.onnx> -DWORK=<dir> -P check_ds_profiler.cmake
# runs the digits model with --json and --trace and checks
#   * the JSON: the peaks, every node with its op, provider, algorithm, shapes, median ms, bytes and a
#     roofline verdict, the MatMul and Gemm with FLOPs, the op types covering the nodes, and
#     the sum of the node times positive and within a sane ratio of the end-to-end latency;
#   * the trace (Chrome trace-event JSON): a traceEvents array whose complete ("X") events all
#     have a name, ph, ts, dur, pid and tid, the numbers non-negative; one per node per profiled
#     run, one per run; the activation-bytes counter ("C") events; the process and thread names
#     ("M");
#   * the text: the header, the top table counting the JSON's nodes, the op types, the sum line;
#   * bad command lines (exit 2 with the usage), a missing model and an unwritable trace
#     (exit 1, io_error), --help and --version.
set(TOOL ${PROFILER})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)

set(runs 4)
set(common --model ${MODEL} --batch 16 --threads 2 --warmup 1 --runs ${runs})
file(MAKE_DIRECTORY ${WORK})
set(trace ${WORK}/digits.trace.json)
file(REMOVE ${trace})

# ---- --json ----
run_json(ds-profiler ${common} --trace ${trace})
string(JSON n_nodes LENGTH "${line}" nodes)
get_field(profiled runs profiled)
if(NOT n_nodes GREATER 0 OR NOT profiled EQUAL runs)
  message(FATAL_ERROR "${n_nodes} nodes, ${profiled} profiled runs; want nodes and ${runs} runs")
endif()
expect_positive(peaks gflops_per_s)
expect_positive(peaks gb_per_s)
expect_positive(peaks ridge_flops_per_byte)
get_field(source peaks source)
if(NOT source STREQUAL "measured")
  message(FATAL_ERROR "peaks source '${source}', want measured")
endif()
math(EXPR last "${n_nodes} - 1")
set(flop_nodes 0)
foreach(i RANGE ${last})
  get_field(op nodes ${i} op)
  get_field(provider nodes ${i} provider)
  get_field(algorithm nodes ${i} algorithm)
  get_field(ms nodes ${i} ms)
  get_field(bytes nodes ${i} bytes)
  get_field(flops nodes ${i} flops)
  get_field(bound nodes ${i} bound)
  get_field(out0 nodes ${i} outputs 0)
  if(op STREQUAL "" OR provider STREQUAL "" OR algorithm STREQUAL "" OR algorithm STREQUAL "?"
     OR ms LESS 0 OR NOT bytes GREATER 0
     OR NOT bound MATCHES "^(compute|memory)$" OR NOT out0 MATCHES "^\\[16,[0-9]+\\]$")
    message(FATAL_ERROR "node ${i}: op '${op}' on '${provider}' ('${algorithm}'), ${ms} ms, ${bytes} bytes, "
                        "bound '${bound}', output ${out0}")
  endif()
  if(op MATCHES "MatMul|Gemm")
    if(NOT flops GREATER 0)
      message(FATAL_ERROR "node ${i} (${op}): ${flops} FLOPs, want > 0")
    endif()
    math(EXPR flop_nodes "${flop_nodes} + 1")
  endif()
endforeach()
if(flop_nodes LESS 2)
  message(FATAL_ERROR "${flop_nodes} MatMul/Gemm nodes with FLOPs, want the digits model's 2")
endif()
# The op types cover every node once.
string(JSON n_ops LENGTH "${line}" ops)
math(EXPR olast "${n_ops} - 1")
set(grouped 0)
foreach(i RANGE ${olast})
  get_field(count ops ${i} nodes)
  math(EXPR grouped "${grouped} + ${count}")
endforeach()
if(NOT grouped EQUAL n_nodes)
  message(FATAL_ERROR "the op types group ${grouped} nodes of ${n_nodes}")
endif()
# The node times against the end-to-end latency of the same runs.
get_field(node_sum summary node_sum_ms)
get_field(e2e summary end_to_end_ms)
get_field(pct summary node_sum_pct_of_end_to_end)
string(JSON n_e2e LENGTH "${line}" summary end_to_end_ms_runs)
if(NOT node_sum GREATER 0 OR NOT e2e GREATER 0 OR pct LESS 20 OR pct GREATER 120
   OR NOT n_e2e EQUAL runs)
  message(FATAL_ERROR "node sum ${node_sum} ms vs end-to-end ${e2e} ms (${pct}%) over ${n_e2e} "
                      "runs: want both > 0 and 20-120%")
endif()
get_field(trace_field trace)
if(NOT trace_field STREQUAL trace)
  message(FATAL_ERROR "trace '${trace_field}', want '${trace}'")
endif()

# ---- the trace ----
if(NOT EXISTS ${trace})
  message(FATAL_ERROR "--trace ${trace}: no file written")
endif()
file(READ ${trace} doc)
string(JSON events_type ERROR_VARIABLE err TYPE "${doc}" traceEvents)
if(err OR NOT events_type STREQUAL "ARRAY")
  message(FATAL_ERROR "${trace}: no traceEvents array (${events_type} ${err})")
endif()
string(JSON n_events LENGTH "${doc}" traceEvents)
set(node_events 0)
set(run_events 0)
set(counters 0)
set(meta "")
math(EXPR elast "${n_events} - 1")
foreach(i RANGE ${elast})
  string(JSON ph GET "${doc}" traceEvents ${i} ph)
  if(ph STREQUAL "X")
    string(JSON name GET "${doc}" traceEvents ${i} name)
    string(JSON cat GET "${doc}" traceEvents ${i} cat)
    if(name STREQUAL "")
      message(FATAL_ERROR "trace event ${i}: an X event without a name")
    endif()
    foreach(key ts dur pid tid)
      string(JSON t ERROR_VARIABLE err TYPE "${doc}" traceEvents ${i} ${key})
      string(JSON v ERROR_VARIABLE err2 GET "${doc}" traceEvents ${i} ${key})
      if(err OR err2 OR NOT t STREQUAL "NUMBER" OR v MATCHES "^-")
        message(FATAL_ERROR "trace event ${i} (${name}): ${key} = '${v}' (${t}), want a "
                            "non-negative number")
      endif()
    endforeach()
    if(cat STREQUAL "run")
      math(EXPR run_events "${run_events} + 1")
    else()
      math(EXPR node_events "${node_events} + 1")
    endif()
  elseif(ph STREQUAL "C")
    string(JSON live GET "${doc}" traceEvents ${i} args live)
    if(live MATCHES "^-")
      message(FATAL_ERROR "trace event ${i}: counter value ${live}")
    endif()
    math(EXPR counters "${counters} + 1")
  elseif(ph STREQUAL "M")
    string(JSON name GET "${doc}" traceEvents ${i} name)
    list(APPEND meta ${name})
  endif()
endforeach()
math(EXPR want_node_events "${n_nodes} * ${runs}")
if(NOT node_events EQUAL want_node_events OR NOT run_events EQUAL runs)
  message(FATAL_ERROR "trace: ${node_events} node events and ${run_events} run events; want "
                      "${want_node_events} (${n_nodes} nodes x ${runs} runs) and ${runs}")
endif()
list(FIND meta process_name at_process)
list(FIND meta thread_name at_thread)
if(counters LESS 1 OR at_process LESS 0 OR at_thread LESS 0)
  message(FATAL_ERROR "trace: ${counters} counter events, metadata '${meta}'; want counters, "
                      "process_name and thread_name")
endif()
message("trace: ${n_events} events (${node_events} nodes, ${run_events} runs, ${counters} "
        "counters, metadata ${meta})")

# ---- text ----
run_tool(rc so se ${common} --top 2 --peaks 100,10)
message("${so}")
foreach(re "^ds-profiler [^\n]*digits.onnx" "\n  peaks +100.0 GFLOP/s, 10.0 GB/s \\(--peaks\\)"
        "\ntop 2 of ${n_nodes} nodes by median time\n" " shapes +node +algorithm\n" "\nby op type"
        "\nsum of node times [0-9.]+ ms vs end-to-end [0-9.]+ ms \\([0-9.]+%\\)")
  if(NOT so MATCHES "${re}")
    message(FATAL_ERROR "ds-profiler text: no match for '${re}' (exit ${rc}):\n${so}\n${se}")
  endif()
endforeach()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ds-profiler text: exit ${rc}\n${se}")
endif()

# ---- command line ----
check_bad_cases(ds-profiler ${MODEL}
  "2|--model PATH is required|--json"
  "2|--top: must be in .1, |--model @M@ --top 0"
  "2|--top: must be in .1, .*got -5|--model @M@ --top -5"
  "2|--top: expects an integer, got 'ten'|--model @M@ --top ten"
  "2|--runs: must be in|--model @M@ --runs 0"
  "2|--peaks: expects GFLOPS,GBPS|--model @M@ --peaks 100"
  "2|--peaks: expects GFLOPS,GBPS|--model @M@ --peaks 100,-1"
  "2|--precision: must be fp32|--model @M@ --precision fp8"
  "2|unknown option '--frobnicate'|--model @M@ --frobnicate"
  "2|not an input of the model|--model @M@ --shape nope=2x64"
  "1|io_error|--model @M@.missing"
  "1|io_error.*--trace|--model @M@ --trace ${WORK}/no/such/dir/t.json")
check_help(ds-profiler --model --batch --threads --runs --top --peaks --trace --json --version)
check_version(ds-profiler)
