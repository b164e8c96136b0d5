# ctest driver for ds-inspect (tools/ds_inspect.cpp) and the command-line front door every tool
# shares (tools/tool_cli.hpp: --version, the manual page of --help).
#   cmake -DINSPECT=<ds-inspect> -DMODE=digits -DMODEL=<digits.onnx> -P check_ds_inspect.cmake
#       the text summary and --json of the digits model: its IR version, opset and producer
#       (tools/train_digits.py), input "pixels" float32 [batch, 64],
#       its op histogram (Add, Gemm, MatMul, Relu, Softmax, one each), the parameters equal to
#       the sum of the initializers' elements (each the product of its shape; 4 bytes each, all
#       float32), FLOPs those of its MatMul and Gemm and 8 times as many at --batch 8, every
#       node with a kernel, and with --backends reference every node reference-only; then bad
#       command lines (exit 2 with the usage), a missing file (exit 1, io_error) and the help.
#   cmake -DINSPECT=<ds-inspect> -DMODE=bad -DMAKE_BAD=<make-bad-models> -DWORK=<dir> -P ...
#       malformed models written by make-bad-models: a truncated file (invalid_model) and a
#       future IR version (unsupported) exit 1 with the typed error on stderr and nothing on
#       stdout, also with --json; a model with an op no backend has is read (exit 0) and its
#       node listed as unsupported.
#   cmake -DMODE=tools -DVERSION=<X.Y.Z> "-DTOOLS=<tool>;<tool>..." -P check_ds_inspect.cmake
#       every tool's --version prints "<tool> (dsinfer X.Y.Z)" (the project version) and its
#       --help is a manual page (NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXAMPLES, EXIT STATUS).
if(MODE STREQUAL "tools")
  include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)
  foreach(TOOL IN LISTS TOOLS)
    get_filename_component(program ${TOOL} NAME_WE)
    check_version(${program} ${VERSION})
    check_help(${program} --version)
    message("${program}: --version and --help ok")
  endforeach()
  return()
endif()

set(TOOL ${INSPECT})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)

# Runs ds-inspect ARG...: it must exit 1 with "ds-inspect: error [CODE]: ..." on stderr and
# nothing on stdout.
function(expect_typed_error code)
  run_tool(rc so se ${ARGN})
  if(NOT rc EQUAL 1 OR NOT so STREQUAL "" OR NOT se MATCHES "^ds-inspect: error \\[${code}\\]: ")
    message(FATAL_ERROR "ds-inspect ${ARGN}: exit ${rc} (want 1), want stderr "
                        "'ds-inspect: error [${code}]: ...' and no stdout; stdout:\n${so}\n"
                        "stderr:\n${se}")
  endif()
  message("ds-inspect ${ARGN}: ${se}")
endfunction()

if(MODE STREQUAL "bad")
  file(REMOVE_RECURSE ${WORK})
  foreach(c truncated_half future_ir_version unknown_op)
    execute_process(COMMAND ${MAKE_BAD} ${WORK} --filter ${c} RESULT_VARIABLE rc OUTPUT_QUIET)
    if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/${c}/model.onnx)
      message(FATAL_ERROR "make-bad-models ${WORK} --filter ${c}: exit ${rc}, no model")
    endif()
  endforeach()
  foreach(json "" --json)
    expect_typed_error(invalid_model ${WORK}/truncated_half/model.onnx ${json})
    expect_typed_error(unsupported ${WORK}/future_ir_version/model.onnx ${json})
  endforeach()
  # A model the importer reads but no backend runs: described, its node unsupported.
  run_json(ds-inspect ${WORK}/unknown_op/model.onnx)
  string(JSON n_unsupported LENGTH "${line}" kernels unsupported)
  get_field(op kernels unsupported 0 op)
  get_field(reason kernels unsupported 0 reason)
  if(NOT n_unsupported EQUAL 1 OR NOT op STREQUAL "NoSuchOp" OR NOT reason MATCHES "no backend")
    message(FATAL_ERROR "unknown_op: want one unsupported node NoSuchOp, got ${n_unsupported}: "
                        "${op} (${reason})")
  endif()
  run_tool(rc so se ${WORK}/unknown_op/model.onnx)
  if(NOT rc EQUAL 0 OR NOT so MATCHES "\nunsupported +1 node\\(s\\): NoSuchOp 1\n")
    message(FATAL_ERROR "unknown_op as text: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
  endif()
  return()
endif()

if(NOT MODE STREQUAL "digits")
  message(FATAL_ERROR "check_ds_inspect.cmake: MODE must be digits, bad or tools, got '${MODE}'")
endif()

# ---- --json ----
run_json(ds-inspect ${MODEL})
get_field(name inputs 0 name)
get_field(dtype inputs 0 dtype)
get_field(d0 inputs 0 shape 0)
get_field(d1 inputs 0 shape 1)
if(NOT name STREQUAL "pixels" OR NOT dtype STREQUAL "float32" OR NOT d0 STREQUAL "batch"
   OR NOT d1 EQUAL 64)
  message(FATAL_ERROR "input 0: ${name} ${dtype} [${d0}, ${d1}], want pixels float32 [batch, 64]")
endif()
get_field(ir ir_version)
get_field(opset opsets 0 version)
get_field(producer producer name)
if(NOT ir GREATER 0 OR NOT opset GREATER 0 OR NOT producer MATCHES "train_digits")
  message(FATAL_ERROR "IR version ${ir}, opset ${opset}, producer '${producer}': want both > 0 "
                      "and tools/train_digits.py")
endif()
get_field(nodes nodes)
if(NOT nodes EQUAL 5)
  message(FATAL_ERROR "nodes: ${nodes}, want 5")
endif()
string(JSON n_ops LENGTH "${line}" ops ai.onnx)
foreach(op Add Gemm MatMul Relu Softmax)
  get_field(count ops ai.onnx ${op})
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "ops ai.onnx ${op}: ${count}, want 1")
  endif()
endforeach()
if(NOT n_ops EQUAL 5)
  message(FATAL_ERROR "ops ai.onnx: ${n_ops} op types, want 5")
endif()

# Parameters: the sum of the initializers' elements, each the product of its shape.
get_field(params parameters)
get_field(init_bytes initializer_bytes)
string(JSON n_init LENGTH "${line}" initializers)
set(sum 0)
set(sum_bytes 0)
math(EXPR last "${n_init} - 1")
foreach(i RANGE ${last})
  get_field(elements initializers ${i} elements)
  get_field(bytes initializers ${i} bytes)
  get_field(idtype initializers ${i} dtype)
  string(JSON rank LENGTH "${line}" initializers ${i} shape)
  set(product 1)
  if(rank GREATER 0)
    math(EXPR rlast "${rank} - 1")
    foreach(k RANGE ${rlast})
      get_field(d initializers ${i} shape ${k})
      math(EXPR product "${product} * ${d}")
    endforeach()
  endif()
  math(EXPR want_bytes "${elements} * 4")
  if(NOT elements EQUAL product OR NOT idtype STREQUAL "float32" OR NOT bytes EQUAL want_bytes)
    message(FATAL_ERROR "initializer ${i}: ${elements} ${idtype} elements in ${bytes} bytes, "
                        "want ${product} float32 in ${want_bytes}")
  endif()
  math(EXPR sum "${sum} + ${elements}")
  math(EXPR sum_bytes "${sum_bytes} + ${bytes}")
endforeach()
if(NOT params EQUAL sum OR NOT init_bytes EQUAL sum_bytes OR NOT n_init EQUAL 4 OR params EQUAL 0)
  message(FATAL_ERROR "parameters ${params} in ${init_bytes} bytes, ${n_init} initializers; "
                      "want the sums ${sum} and ${sum_bytes} over 4")
endif()

# FLOPs: the MatMul's and the Gemm's, at batch 1 unless given, linear in the batch.
get_field(flops1 flops total)
get_field(f_matmul flops by_op MatMul)
get_field(f_gemm flops by_op Gemm)
get_field(b1 flops input_shapes pixels 0)
math(EXPR f_sum "${f_matmul} + ${f_gemm}")
if(NOT flops1 GREATER 0 OR NOT flops1 EQUAL f_sum OR NOT b1 EQUAL 1)
  message(FATAL_ERROR "FLOPs ${flops1} (MatMul ${f_matmul} + Gemm ${f_gemm}) at batch ${b1}")
endif()
# Every node has a kernel: the providers of the best ones count every node.
string(JSON n_unsupported LENGTH "${line}" kernels unsupported)
string(JSON n_providers LENGTH "${line}" kernels providers)
set(placed 0)
math(EXPR plast "${n_providers} - 1")
foreach(i RANGE ${plast})
  string(JSON provider MEMBER "${line}" kernels providers ${i})
  get_field(count kernels providers ${provider})
  math(EXPR placed "${placed} + ${count}")
endforeach()
if(NOT n_unsupported EQUAL 0 OR NOT placed EQUAL nodes)
  message(FATAL_ERROR "digits: ${n_unsupported} unsupported nodes, ${placed} placed of ${nodes}")
endif()
run_json(ds-inspect ${MODEL} --batch 8)
get_field(flops8 flops total)
get_field(b8 flops input_shapes pixels 0)
math(EXPR want8 "${flops1} * 8")
if(NOT flops8 EQUAL want8 OR NOT b8 EQUAL 8)
  message(FATAL_ERROR "--batch 8: FLOPs ${flops8} at batch ${b8}, want ${want8} at 8")
endif()
# On the reference kernels alone, every node is reference-only.
run_json(ds-inspect ${MODEL} --backends reference)
get_field(ref kernels providers reference)
string(JSON n_ref LENGTH "${line}" kernels reference_only)
if(NOT ref EQUAL 5 OR NOT n_ref EQUAL 5)
  message(FATAL_ERROR "--backends reference: ${ref} nodes on reference kernels, ${n_ref} "
                      "listed reference-only; want 5 and 5")
endif()

# ---- text ----
run_tool(rc so se ${MODEL})
message("${so}")
foreach(re "^model +[^\n]*digits.onnx" "\ninputs +pixels +float32 +\\[batch,64\\]\n"
        "\nops +ai.onnx: [^\n]*Gemm 1" "\nparameters +${params} " "\nFLOPs +[^\n]*pixels=1x64"
        "\nunsupported +none\n" "\nreference +none\n")
  if(NOT so MATCHES "${re}")
    message(FATAL_ERROR "ds-inspect ${MODEL}: no match for '${re}' (exit ${rc}):\n${so}\n${se}")
  endif()
endforeach()
if(NOT rc EQUAL 0 OR NOT se STREQUAL "")
  message(FATAL_ERROR "ds-inspect ${MODEL}: exit ${rc}, stderr:\n${se}")
endif()

# ---- command line ----
check_bad_cases(ds-inspect ${MODEL}
  "2|MODEL is required|--json"
  "2|unknown option '--frobnicate'|@M@ --frobnicate"
  "2|unexpected argument 'extra'|@M@ extra"
  "2|--batch: must be in|@M@ --batch 0"
  "2|--seq: expects an integer, got 'ten'|@M@ --seq ten"
  "2|--shape: 'nope' is not an input of the model|@M@ --shape nope=1x64"
  "2|--shape pixels has rank 3|@M@ --shape pixels=1x8x8"
  "2|--backends: unknown backend 'gpu'|@M@ --backends gpu"
  "2|--json: takes no value|@M@ --json=yes"
  "1|io_error|@M@.missing")
check_help(ds-inspect --batch --seq --shape --backends --json --version)
check_version(ds-inspect)
