# The Generator's tests on a generated decoder (tests/unit/test_generate.cpp, [generate-model]),
# and the decoder fusions' llama_tiny case (tests/unit/test_decoder_fusions.cpp):
#   cmake -DTESTS=<dsinfer_tests> -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir> -P run_generate_tiny.cmake
# writes llama_tiny.onnx with tools/make_models.py, then runs the cases with DSINFER_LLAMA_TINY
# pointing at it; they must have run and passed.
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK}
                        --only llama_tiny llama_tiny_attn23
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py --only llama_tiny llama_tiny_attn23 failed (${rc})")
endif()
set(ENV{DSINFER_LLAMA_TINY} ${WORK}/llama_tiny.onnx)
set(ENV{DSINFER_LLAMA_TINY_ATTN23} ${WORK}/llama_tiny_attn23.onnx)
set(ENV{DSINFER_LLAMA_TINY_ORT} ${SRC}/tests/models/generate/llama_tiny_ort_greedy.txt)
execute_process(COMMAND ${TESTS} "[generate-model]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the generator cases failed (${rc})")
endif()
if(NOT out MATCHES "All tests passed \\([0-9]+ assertions in 4 test cases\\)")
  message(FATAL_ERROR "the generator cases did not all run")
endif()
# The decoder fusions on the same model (tests/unit/test_decoder_fusions.cpp): every layer fuses.
execute_process(COMMAND ${TESTS} "decoder fusions: every layer of llama_tiny*"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0 OR out MATCHES "skipped" OR NOT out MATCHES "All tests passed")
  message(FATAL_ERROR "the llama_tiny fusion case failed or did not run (${rc})")
endif()
