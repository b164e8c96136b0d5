# ctest driver: regenerates the tiny models with tools/make_models.py (deterministic), checks
# that they are byte-identical to the ones ONNX Runtime was run on (model_sha256 in case.json),
# and runs ds-conformance on the committed ONNX Runtime outputs with rtol 1e-4.
#   cmake -DPYTHON=... -DSRC=<repo> -DWORK=<dir> -DCONFORMANCE=<ds-conformance> -P run_ort_cases.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/models ${WORK}/cases)
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK}/models
                        --only bert_tiny bert_tiny_ln17 resnet_tiny
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py failed (${rc})")
endif()
file(GLOB cases LIST_DIRECTORIES true ${SRC}/tests/models/ort_cases/*)
foreach(case IN LISTS cases)
  get_filename_component(name ${case} NAME)
  file(READ ${case}/case.json json)
  string(JSON want GET "${json}" model_sha256)
  file(SHA256 ${WORK}/models/${name}.onnx got)
  if(NOT want STREQUAL got)
    message(FATAL_ERROR "${name}.onnx regenerated with sha256 ${got}, but the ONNX Runtime "
                        "reference was made from ${want}: regenerate tests/models/ort_cases")
  endif()
  file(COPY ${case}/test_data_set_0 DESTINATION ${WORK}/cases/${name})
  file(COPY ${WORK}/models/${name}.onnx DESTINATION ${WORK}/cases/${name})
  file(RENAME ${WORK}/cases/${name}/${name}.onnx ${WORK}/cases/${name}/model.onnx)
endforeach()
execute_process(COMMAND ${CONFORMANCE} --suite ${WORK}/cases --rtol 1e-4 --atol 1e-5 --stats
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES " 0 failed, 0 skipped")
  message(FATAL_ERROR "dsinfer does not match ONNX Runtime on the tiny models")
endif()
