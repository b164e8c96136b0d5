# ctest driver for ds-compare (tools/ds_compare.cpp):
#   cmake -DCOMPARE=<ds-compare> -DMODEL=<model.onnx> -P check_ds_compare.cmake
# checks that a model against itself agrees exactly (cosine 1, difference 0, every top-1),
# that its dynamic INT8 form (--precision int8) stays close (cosine above 0.99) but is not the
# same numbers, and the bad command lines and --help.
set(TOOL ${COMPARE})
include(${CMAKE_CURRENT_LIST_DIR}/cli_checks.cmake)

check_bad_cases(ds-compare ${MODEL}
  "2|--reference PATH is required|--model @M@"
  "2|--precision: must be fp32, tf32, fp16, bf16 or int8|--model @M@ --reference @M@ --precision fp8"
  "2|--seeds: must be in|--model @M@ --reference @M@ --seeds 0"
  "1|io_error|--model @M@ --reference @M@.missing")
check_help(ds-compare --model --reference --seeds --precision)

run_json(ds-compare --model ${MODEL} --reference ${MODEL} --batch 4 --seeds 3 --threads 2)
get_field(cos outputs 0 cosine)
get_field(diff outputs 0 max_abs_diff)
get_field(rows outputs 0 rows)
get_field(top1 outputs 0 top1_agree)
if(NOT cos EQUAL 1 OR NOT diff EQUAL 0 OR NOT rows EQUAL 12 OR NOT top1 EQUAL 12)
  message(FATAL_ERROR "the model against itself: cosine ${cos}, max diff ${diff}, top-1 ${top1} "
                      "of ${rows}; want 1, 0, 12 of 12")
endif()

run_json(ds-compare --model ${MODEL} --reference ${MODEL} --precision int8 --batch 4 --seeds 3
         --threads 2)
get_field(cos outputs 0 cosine)
get_field(diff outputs 0 max_abs_diff)
get_field(layers int8_quantized_layers)
if(NOT layers GREATER 0 OR cos LESS 0.99 OR NOT diff GREATER 0)
  message(FATAL_ERROR "INT8 against float32: ${layers} layers quantized, cosine ${cos}, max diff "
                      "${diff}; want layers, cosine >= 0.99 and some difference")
endif()
