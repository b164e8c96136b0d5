# ctest driver for ds-benchmark.
#   cmake -DBENCH=<ds-benchmark> -DMODE=json -DMODEL=<model.onnx> -DARGS="--batch;4" \
#         [-DBATCH=N] [-DSEQ=N] [-DIDS_HIGH=N] -P check_ds_benchmark.cmake
#       runs ds-benchmark --json and checks that the line parses and every field is sane;
#       SEQ: expected "seq"; IDS_HIGH: expected upper bound of the token ids of input 0.
#   ... -DMAKE_MODEL=NAME -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir>
#       first writes NAME.onnx with tools/make_models.py into WORK and uses it as MODEL.
#   ... -DPRECISION=int8 (with --precision int8 in ARGS): the float32 model is quantized at
#       load (the JSON's "int8" report counts its MatMuls).
#   cmake -DBENCH=<ds-benchmark> -DMODE=generate -DMAKE_MODEL=llama_tiny ... -DARGS="--generate;8"
#       the decode mode: its JSON line's counts, speeds and latencies (PRECISION=int8: the
#       weights are int8).
#   cmake -DBENCH=<ds-benchmark> -DMODE=bad -DMODEL=<model.onnx> -P check_ds_benchmark.cmake
#       checks that bad command lines exit 2 with the usage, that tf32 precision on the
#       CPU fails with "needs a CUDA device"; and --help.
set(TOOL ${BENCH})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)

if(MODE STREQUAL "bad")
  # exit status | stderr must match | arguments, space-separated (@M@ is the model)
  set(cases
      "2|unknown option '--frobnicate'|--model @M@ --frobnicate"
      "2|unexpected argument '.*digits.onnx'|@M@"
      "2|--batch: must be in|--model @M@ --batch 0"
      "2|--iterations: expects an integer, got 'ten'|--model @M@ --iterations ten"
      "2|--device: must be cpu, cuda or cuda:N|--model @M@ --device gpu"
      "2|--precision: must be fp32, tf32, fp16, bf16 or int8|--model @M@ --precision fp8"
      "2|--min-time: expects a number of seconds >= 0|--model @M@ --min-time -1"
      "2|--model PATH is required|--batch 2"
      "2|--model: missing value|--model"
      "2|--model: expects a value, got the option '--json'|--model --json"
      "2|--json: takes no value|--model @M@ --json=yes"
      "2|--backends: unknown backend 'gpu'|--model @M@ --backends onednn,gpu"
      "2|--backends: lists 'cpu' twice|--model @M@ --backends cpu,cpu"
      "2|--shape: expects NAME=DxD|--model @M@ --shape pixels"
      "2|--shape: pixels is given twice|--model @M@ --shape pixels=1x64 --shape pixels=2x64"
      "2|not an input of the model|--model @M@ --shape nope=2x64 --min-time 0"
      "1|needs a CUDA device|--model @M@ --precision tf32"
      "2|--generate: must be in|--model @M@ --generate 0"
      "2|--generate runs --precision fp32, bf16 or int8, not fp16|--model @M@ --generate 4 --precision fp16"
      "2|--generate takes --seq, not --shape|--model @M@ --generate 4 --shape pixels=1x64"
      "2|--generate runs on the CPU only|--model @M@ --generate 4 --device cuda"
      "1|not a decoder in a recognized form|--model @M@ --generate 4"
      "1|io_error|--model @M@.missing")
  check_bad_cases(ds-benchmark ${MODEL} ${cases})
  check_help(ds-benchmark --model --json --shape --profile-nodes)
  return()
endif()

if(DEFINED MAKE_MODEL)
  file(MAKE_DIRECTORY ${WORK})
  execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK} --only ${MAKE_MODEL}
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_models.py --only ${MAKE_MODEL} failed (${rc})")
  endif()
  set(MODEL ${WORK}/${MAKE_MODEL}.onnx)
endif()

run_json(ds-benchmark --model ${MODEL} ${ARGS})

if(MODE STREQUAL "generate")
  if(NOT DEFINED PRECISION)
    set(PRECISION fp32)
  endif()
  get_field(mode mode)
  get_field(precision precision)
  get_field(weights weights)
  get_field(sequences sequences)
  get_field(prompt prompt_tokens)
  get_field(gen generate_tokens)
  get_field(iterations iterations)
  set(want_weights none)
  if(PRECISION STREQUAL "int8")
    set(want_weights int8)
  endif()
  if(NOT mode STREQUAL "generate" OR NOT precision STREQUAL PRECISION
     OR NOT weights STREQUAL want_weights OR NOT sequences EQUAL BATCH OR NOT prompt EQUAL SEQ
     OR NOT gen EQUAL GENERATE OR iterations LESS 2)
    message(FATAL_ERROR "unexpected mode/precision/weights/counts in ${line}")
  endif()
  foreach(f prefill_tokens_per_s decode_tokens_per_s aggregate_tokens_per_s ttft_ms run_ms)
    expect_positive(${f} median)
    get_field(lo ${f} min)
    get_field(mid ${f} median)
    get_field(hi ${f} max)
    if(lo GREATER mid OR mid GREATER hi)
      message(FATAL_ERROR "${f}: min ${lo} median ${mid} max ${hi} out of order")
    endif()
  endforeach()
  foreach(f steps peak_rss_bytes kv_cache_bytes load_ms)
    expect_positive(${f})
  endforeach()
  get_field(p50 inter_token_ms p50)
  get_field(p99 inter_token_ms p99)
  if(NOT p50 GREATER 0 OR p50 GREATER p99)
    message(FATAL_ERROR "inter-token p50 ${p50}, p99 ${p99}")
  endif()
  # Every sequence generated exactly GENERATE tokens: steps >= GENERATE per run.
  get_field(steps steps)
  math(EXPR min_steps "${GENERATE} * ${iterations}")
  if(steps LESS min_steps)
    message(FATAL_ERROR "${steps} steps for ${iterations} runs of ${GENERATE} tokens")
  endif()
  return()
endif()

get_field(model model)
get_field(device device)
get_field(precision precision)
get_field(seq seq)
string(JSON seq_type TYPE "${line}" seq)
string(JSON backends_type TYPE "${line}" backends)
string(JSON cpu_type TYPE "${line}" cpu)
get_field(isa isa)
if(NOT DEFINED PRECISION)
  set(PRECISION fp32)
endif()
if(NOT model STREQUAL MODEL OR NOT device STREQUAL "cpu" OR NOT precision STREQUAL PRECISION
   OR NOT backends_type STREQUAL "ARRAY" OR NOT cpu_type STREQUAL "STRING"
   OR NOT isa MATCHES "^(avx512|avx2|sse4.2|baseline)$")
  message(FATAL_ERROR "unexpected model/device/precision/backends/cpu/isa in ${line}")
endif()
foreach(f load_ms first_run_ms throughput peak_rss_bytes iterations threads batch)
  expect_positive(${f})
endforeach()
foreach(q p50 p90 p99 mean min)
  expect_positive(latency_ms ${q})
endforeach()
get_field(p50 latency_ms p50)
get_field(p90 latency_ms p90)
get_field(p99 latency_ms p99)
get_field(lmin latency_ms min)
if(lmin GREATER p50 OR p50 GREATER p90 OR p90 GREATER p99)
  message(FATAL_ERROR "latencies out of order: min ${lmin} p50 ${p50} p90 ${p90} p99 ${p99}")
endif()
if(PRECISION STREQUAL "int8")
  # A float32 model is quantized dynamically at load: its MatMul layers with constant weights.
  get_field(already int8 already_quantized)
  get_field(int8_matmuls int8 matmuls)
  if(already OR NOT int8_matmuls GREATER 0)
    message(FATAL_ERROR "--precision int8: already_quantized ${already}, ${int8_matmuls} MatMul "
                        "quantized; want a float32 model's MatMuls quantized")
  endif()
endif()
get_field(finite outputs_finite)
if(NOT finite)
  message(FATAL_ERROR "the model produced non-finite outputs")
endif()
if(DEFINED BATCH)
  get_field(batch batch)
  get_field(shape0 inputs 0 shape 0)
  if(NOT batch EQUAL BATCH OR NOT shape0 EQUAL BATCH)
    message(FATAL_ERROR "batch ${batch}, first input dim ${shape0}: want ${BATCH}")
  endif()
endif()
if(DEFINED SEQ)
  get_field(shape1 inputs 0 shape 1)
  if(NOT seq EQUAL SEQ OR NOT shape1 EQUAL SEQ)
    message(FATAL_ERROR "seq ${seq}, input 0 dim 1 ${shape1}: want ${SEQ}")
  endif()
elseif(NOT seq_type STREQUAL "NULL")
  message(FATAL_ERROR "seq is ${seq} for a model without a sequence dim, want null")
endif()
if(DEFINED IDS_HIGH)
  get_field(fill inputs 0 fill)
  get_field(high inputs 0 range 1)
  if(NOT fill STREQUAL "token ids" OR NOT high EQUAL IDS_HIGH)
    message(FATAL_ERROR "input 0: ${fill} up to ${high}, want token ids below ${IDS_HIGH}")
  endif()
endif()
