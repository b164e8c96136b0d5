# ctest driver for ds-convert (tools/ds_convert.cpp).
#   cmake -DCONVERT=<ds-convert> -DMODE=modes -DMODEL=<digits.onnx> -DWORK=<dir> \
#         -P check_ds_convert.cmake
#       converts the digits model in every mode (int8-dynamic, int8-weight, bf16, fp16, auto with
#       --max-accuracy-drop 0.005, and
#       int8-static calibrated on digits_train.csv beside the model, else digits_test.csv,
#       pixels scaled by 1/16), each with --bench-runs 2 --report: exit 0, a summary on stdout,
#       the output file written, the report's JSON parses and has the mode, the sizes (smaller
#       for the int8 modes), the layers, two timed runs of each model, the calibration table
#       (int8-static) and the machine's ISA; then --quiet (nothing on stdout), level 0 with no
#       measurement, and an already quantized model (a note, the file still written).
#   cmake -DCONVERT=<ds-convert> -DMODE=bad -DMODEL=<digits.onnx> -DWORK=<dir> -P ...
#       bad command lines exit 2 with the usage and one line naming the problem; failures
#       (a missing input or calibration file) exit 1 naming it; --help and --version.
set(TOOL ${CONVERT})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
get_filename_component(digits_dir ${MODEL} DIRECTORY)
if(EXISTS ${digits_dir}/digits_train.csv)
  set(csv ${digits_dir}/digits_train.csv)
else()
  set(csv ${digits_dir}/digits_test.csv)
endif()

if(MODE STREQUAL "bad")
  set(o ${WORK}/bad.onnx)
  # exit status | first stderr line must match | arguments, space-separated (@M@ is the model)
  check_bad_cases(ds-convert ${MODEL}
    "1|io_error|@M@.missing -o ${o}"
    "2|--quantize: must be none, int8-dynamic, int8-static, int8-weight, bf16, fp16 or auto, got 'int4'|@M@ -o ${o} --quantize int4"
    "2|--quantize auto needs --calibration|@M@ -o ${o} --quantize auto --min-cosine 0.99"
    "2|give one budget|@M@ -o ${o} --quantize auto --calibration ${csv} --min-cosine 0.99 --min-top1 0.9"
    "2|--min-cosine: a cosine is at most 1|@M@ -o ${o} --quantize auto --calibration ${csv} --min-cosine 1.5"
    "2|--min-cosine: only --quantize auto uses it|@M@ -o ${o} --quantize int8-dynamic --min-cosine 0.99"
    "2|--max-accuracy-drop: needs labelled data|@M@ -o ${o} --quantize auto --calibration ${WORK} --max-accuracy-drop 0.01"
    "2|--quantize int8-static needs --calibration|@M@ -o ${o} --quantize int8-static"
    "2|--optimize-level: level 3 writes dsinfer's fused operators .*use 0 or 1|@M@ -o ${o} --optimize-level 3"
    "2|-o: '.*digits.onnx' is the input model itself|@M@ -o @M@"
    "2|-o OUT.onnx is required|@M@"
    "2|INPUT.onnx is required|-o ${o}"
    "2|unknown option '--frobnicate'|@M@ -o ${o} --frobnicate"
    "2|unexpected argument 'extra'|@M@ extra -o ${o}"
    "2|--calibration: only --quantize int8-static and auto, and the pruner|@M@ -o ${o} --quantize int8-dynamic --calibration ${csv}"
    "2|--calibration-method: only --quantize int8-static and auto use it|@M@ -o ${o} --prune 0.3 --calibration ${csv} --calibration-method mse"
    "2|--prune: expects a ratio in .0, 1. .1 would remove every channel|@M@ -o ${o} --prune 1"
    "2|--prune and --prune-target: give one|@M@ -o ${o} --prune 0.3 --prune-target flops:0.3"
    "2|--prune-target: expects flops:X or params:X|@M@ -o ${o} --prune-target 0.3"
    "2|--prune-target: expects a fraction in \\(0, 1\\)|@M@ -o ${o} --prune-target flops:1.5"
    "2|--prune-global: applies to --prune RATIO|@M@ -o ${o} --prune-target flops:0.2 --prune-global"
    "2|--prune-recovery: must be none, bias or lsq|@M@ -o ${o} --prune 0.3 --prune-recovery magic"
    "2|--prune-recovery: needs --calibration|@M@ -o ${o} --prune 0.3 --prune-recovery lsq"
    "2|--prune-recovery: applies with --prune RATIO or --prune-target|@M@ -o ${o} --prune-recovery bias"
    "2|--prune-ridge: applies to --prune-recovery lsq|@M@ -o ${o} --prune 0.3 --calibration ${csv} --prune-recovery bias --prune-ridge 0.1"
    "2|--per-tensor: only the int8 modes use it|@M@ -o ${o} --quantize bf16 --per-tensor"
    "2|--calibration-method: must be minmax, percentile, entropy or mse|@M@ -o ${o} --quantize int8-static --calibration ${csv} --calibration-method kl"
    "2|--percentile: expects a percentile|@M@ -o ${o} --quantize int8-static --calibration ${csv} --percentile 40"
    "2|--percentile: applies to --calibration-method percentile, not mse|@M@ -o ${o} --quantize int8-static --calibration ${csv} --calibration-method mse --percentile 99"
    "2|--calibration: '.*nowhere' does not exist|@M@ -o ${o} --quantize int8-static --calibration ${WORK}/nowhere"
    "1|io_error.*missing.csv|@M@ -o ${o} --quantize int8-static --calibration ${WORK}/missing.csv"
    "2|--exclude: 'no_such_node' names no node|@M@ -o ${o} --quantize int8-dynamic --exclude no_such_node"
    "2|--bench-runs: must be in|@M@ -o ${o} --bench-runs -1")
  if(EXISTS ${o})
    message(FATAL_ERROR "a failed command line wrote ${o}")
  endif()
  check_help(ds-convert --quantize --calibration --calibration-method --bench-runs --report
             --optimize-level --exclude --quiet --prune --prune-target --prune-recovery)
  run_tool(rc so se --version)
  if(NOT rc EQUAL 0 OR NOT so MATCHES "^ds-convert \\(dsinfer [0-9]+\\.[0-9]+\\.[0-9]+\\)")
    message(FATAL_ERROR "ds-convert --version: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
  endif()
  return()
endif()

if(NOT MODE STREQUAL "modes")
  message(FATAL_ERROR "check_ds_convert.cmake: MODE must be modes or bad, got '${MODE}'")
endif()

macro(json_get var)
  string(JSON ${var} ERROR_VARIABLE _err GET "${doc}" ${ARGN})
  if(_err)
    message(FATAL_ERROR "${report}: ${ARGN}: ${_err}\n${doc}")
  endif()
endmacro()
macro(json_type var)
  string(JSON ${var} ERROR_VARIABLE _err TYPE "${doc}" ${ARGN})
  if(_err)
    message(FATAL_ERROR "${report}: ${ARGN}: ${_err}")
  endif()
endmacro()
macro(json_length var)
  string(JSON ${var} ERROR_VARIABLE _err LENGTH "${doc}" ${ARGN})
  if(_err)
    message(FATAL_ERROR "${report}: ${ARGN}: ${_err}")
  endif()
endmacro()

file(SIZE ${MODEL} model_bytes)
foreach(mode int8-dynamic int8-weight bf16 fp16 int8-static auto)
  set(out ${WORK}/digits_${mode}.onnx)
  set(report ${WORK}/digits_${mode}.json)
  set(extra)
  if(mode STREQUAL "int8-static")
    set(extra --calibration ${csv} --calibration-scale 0.0625)
  elseif(mode STREQUAL "auto")
    # The task metric: top-1 accuracy on the labelled CSV may drop at most half a point.
    set(extra --calibration ${csv} --calibration-scale 0.0625 --max-accuracy-drop 0.005)
  endif()
  run_tool(rc so se ${MODEL} -o ${out} --quantize ${mode} ${extra} --bench-runs 2 --threads 2
           --report ${report})
  message("ds-convert --quantize ${mode}:\n${so}${se}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ds-convert --quantize ${mode} exited ${rc}:\n${se}")
  endif()
  if(NOT so MATCHES "size " OR NOT so MATCHES "speed ")
    message(FATAL_ERROR "--quantize ${mode}: no size or speed in the summary:\n${so}")
  endif()
  if(NOT EXISTS ${out} OR NOT EXISTS ${report})
    message(FATAL_ERROR "--quantize ${mode}: ${out} or ${report} was not written")
  endif()
  file(READ ${report} doc)
  string(JSON type ERROR_VARIABLE err TYPE "${doc}")
  if(err OR NOT type STREQUAL "OBJECT")
    message(FATAL_ERROR "${report} is no JSON object (${type} ${err}):\n${doc}")
  endif()
  json_get(got_mode mode)
  json_get(in_bytes sizes input_bytes)
  json_get(out_bytes sizes output_bytes)
  json_get(runs timings runs)
  json_length(n_in timings input_ms)
  json_length(n_out timings output_ms)
  json_get(ratio timings speed_ratio)
  json_length(n_fidelity fidelity outputs)
  json_get(cosine fidelity outputs 0 cosine)
  json_get(fidelity_rows fidelity outputs 0 rows)
  json_length(n_layers layers)
  json_get(isa machine isa)
  json_get(kernel_isa machine kernel_isa)
  file(SIZE ${out} file_bytes)
  if(NOT got_mode STREQUAL mode)
    message(FATAL_ERROR "${report}: mode '${got_mode}', want '${mode}'")
  endif()
  if(NOT in_bytes EQUAL model_bytes OR NOT out_bytes EQUAL file_bytes)
    message(FATAL_ERROR "${report}: sizes ${in_bytes} -> ${out_bytes}, the files have "
                        "${model_bytes} and ${file_bytes} bytes")
  endif()
  if(mode MATCHES "^int8|auto" AND NOT out_bytes LESS in_bytes)
    message(FATAL_ERROR "--quantize ${mode}: the output (${out_bytes} bytes) is not smaller "
                        "than the input (${in_bytes})")
  endif()
  if(NOT runs EQUAL 2 OR NOT n_in EQUAL 2 OR NOT n_out EQUAL 2 OR NOT ratio GREATER 0)
    message(FATAL_ERROR "${report}: timings: ${runs} runs, ${n_in} and ${n_out} times, ratio "
                        "${ratio}; want 2, 2, 2 and > 0")
  endif()
  # OUT against INPUT (logits, probabilities) on the calibration CSV where one is given, else on
  # the generated inputs: every mode keeps the digits logits close.
  if(NOT n_fidelity EQUAL 2 OR NOT cosine GREATER 0.99 OR NOT fidelity_rows GREATER 0
     OR NOT so MATCHES "fidelity +OUT against INPUT[^\n]*\n +logits +cosine")
    message(FATAL_ERROR "${report}: fidelity: ${n_fidelity} outputs, cosine ${cosine}, "
                        "${fidelity_rows} rows; want 2, > 0.99, > 0, and a fidelity line:\n${so}")
  endif()
  if(n_layers EQUAL 0)
    message(FATAL_ERROR "${report}: no layers")
  endif()
  json_get(layer0 layers 0)
  foreach(key node op_type precision reason weight_bytes_before weight_bytes_after)
    string(JSON _v ERROR_VARIABLE _err GET "${layer0}" ${key})
    if(_err)
      message(FATAL_ERROR "${report}: layers[0] has no ${key}: ${layer0}")
    endif()
  endforeach()
  if(isa STREQUAL "" OR kernel_isa STREQUAL "")
    message(FATAL_ERROR "${report}: no machine ISA")
  endif()
  json_type(calibration calibration)
  if(mode STREQUAL "int8-static")
    json_get(batches calibration batches)
    json_get(method calibration method)
    json_length(n_tensors calibration tensors)
    json_get(tensor0 calibration tensors 0)
    foreach(key name min max lo hi count nonfinite)
      string(JSON _v ERROR_VARIABLE _err GET "${tensor0}" ${key})
      if(_err)
        message(FATAL_ERROR "${report}: calibration.tensors[0] has no ${key}: ${tensor0}")
      endif()
    endforeach()
    if(NOT batches GREATER 0 OR NOT method STREQUAL "minmax" OR n_tensors EQUAL 0)
      message(FATAL_ERROR "${report}: calibration: ${batches} batches, method ${method}, "
                          "${n_tensors} tensors")
    endif()
    if(NOT so MATCHES "calibration ")
      message(FATAL_ERROR "--quantize int8-static: no calibration line in the summary:\n${so}")
    endif()
  elseif(NOT calibration STREQUAL "NULL" AND NOT mode STREQUAL "auto")
    message(FATAL_ERROR "${report}: calibration is ${calibration} for ${mode}, want null")
  endif()
  json_type(automatic automatic)
  if(mode STREQUAL "auto")
    json_get(met automatic met)
    json_get(metric automatic metric)
    json_get(drop_budget automatic budget)
    json_get(sens layers 0 sensitivity)
    if(NOT met OR NOT metric STREQUAL "accuracy_drop" OR NOT drop_budget EQUAL 0.005 OR
       NOT so MATCHES "auto +accuracy drop budget <= 0.005" OR NOT so MATCHES "alone INT8")
      message(FATAL_ERROR "--quantize auto: met ${met}, metric ${metric}, budget ${drop_budget}, "
                          "summary:\n${so}")
    endif()
  elseif(NOT automatic STREQUAL "NULL")
    message(FATAL_ERROR "${report}: automatic is ${automatic} for ${mode}, want null")
  endif()
endforeach()

# --quiet: nothing on stdout; level 0 and no measurement: no timings, no optimize record.
set(report ${WORK}/quiet.json)
run_tool(rc so se ${MODEL} -o ${WORK}/quiet.onnx --optimize-level 0 --bench-runs 0 --quiet
         --report ${report})
if(NOT rc EQUAL 0 OR NOT so STREQUAL "" OR NOT EXISTS ${WORK}/quiet.onnx)
  message(FATAL_ERROR "--quiet: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
endif()
file(READ ${report} doc)
json_get(got_mode mode)
json_type(timings timings)
json_type(optimized optimize)
if(NOT got_mode STREQUAL "none" OR NOT timings STREQUAL "NULL" OR NOT optimized STREQUAL "NULL")
  message(FATAL_ERROR "${report}: mode ${got_mode}, timings ${timings}, optimize ${optimized}; "
                      "want none, null, null")
endif()

# An already quantized model: said so, and written all the same.
set(requant ${WORK}/digits_int8_twice.onnx)
run_tool(rc so se ${WORK}/digits_int8-dynamic.onnx -o ${requant} --quantize int8-dynamic
         --bench-runs 0)
if(NOT rc EQUAL 0 OR NOT se MATCHES "already holds quantized operators" OR NOT EXISTS ${requant})
  message(FATAL_ERROR "an INT8 model quantized again: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
endif()

# Pruning: 30% of the hidden neurons with least-squares recovery on the CSV (fidelity before
# and after in the report, the refit layer listed); a parameter target met by sensitivity; and
# "lite mode", pruned and then quantized, smaller than quantized alone.
set(report ${WORK}/pruned.json)
run_tool(rc so se ${MODEL} -o ${WORK}/pruned.onnx --prune 0.3 --prune-multiple 1
         --calibration ${csv} --calibration-scale 0.0625 --bench-runs 2 --threads 2
         --report ${report})
message("ds-convert --prune 0.3:\n${so}${se}")
if(NOT rc EQUAL 0 OR NOT so MATCHES "recovery lsq of 1 layer")
  message(FATAL_ERROR "--prune 0.3 with recovery: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
endif()
file(READ ${report} doc)
json_get(recovery prune recovery)
json_get(removed prune removed_channels)
json_get(cos_before prune fidelity_before_recovery cosine)
json_get(cos_after prune fidelity_after_recovery cosine)
json_length(n_recovered prune recovered_layers)
json_get(refit prune recovered_layers 0 node)
json_get(err_before prune recovered_layers 0 error_before)
json_get(err_after prune recovered_layers 0 error_after)
if(NOT recovery STREQUAL "lsq" OR NOT removed EQUAL 19 OR NOT n_recovered EQUAL 1 OR
   NOT refit STREQUAL "fc2" OR NOT err_after LESS err_before OR NOT cos_after GREATER cos_before)
  message(FATAL_ERROR "${report}: recovery ${recovery}, ${removed} removed, ${n_recovered} "
                      "refit (${refit}, error ${err_before} -> ${err_after}), cosine "
                      "${cos_before} -> ${cos_after}")
endif()

set(report ${WORK}/pruned_target.json)
run_tool(rc so se ${MODEL} -o ${WORK}/pruned_target.onnx --prune-target params:0.2
         --calibration ${csv} --calibration-scale 0.0625 --bench-runs 0 --report ${report})
message("ds-convert --prune-target params:0.2:\n${so}${se}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--prune-target: exit ${rc}, stdout:\n${so}\nstderr:\n${se}")
endif()
file(READ ${report} doc)
json_get(allocation prune target allocation)
json_get(achieved prune target achieved)
json_length(n_sensitivity prune target sensitivity)
if(NOT allocation STREQUAL "sensitivity" OR achieved LESS 0.2 OR NOT n_sensitivity EQUAL 1)
  message(FATAL_ERROR "${report}: allocation ${allocation}, achieved ${achieved}, "
                      "${n_sensitivity} groups measured")
endif()

run_tool(rc so se ${MODEL} -o ${WORK}/lite.onnx --prune 0.3 --quantize int8-static
         --calibration ${csv} --calibration-scale 0.0625 --bench-runs 0)
file(SIZE ${WORK}/lite.onnx lite_bytes)
file(SIZE ${WORK}/digits_int8-static.onnx static_bytes)
if(NOT rc EQUAL 0 OR NOT lite_bytes LESS static_bytes)
  message(FATAL_ERROR "lite mode: exit ${rc}, ${lite_bytes} bytes against int8-static alone "
                      "${static_bytes}:\n${so}\n${se}")
endif()
