# The planned-run allocation count on bert_tiny (tests/fault/test_fault_injection.cpp):
#   cmake -DTESTS=<dsinfer_fault_tests> -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir>
#         -P run_alloc_bert_tiny.cmake
# writes bert_tiny.onnx with tools/make_models.py, then runs the test case with
# DSINFER_BERT_TINY pointing at it; the transformer case must have run and passed.
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK} --only bert_tiny
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py --only bert_tiny failed (${rc})")
endif()
set(ENV{DSINFER_BERT_TINY} ${WORK}/bert_tiny.onnx)
execute_process(COMMAND ${TESTS} "a planned run allocates only for its inputs and outputs outside the kernels"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the allocation test failed (${rc})")
endif()
if(NOT out MATCHES "bert_tiny: [0-9.]+ allocations per planned run")
  message(FATAL_ERROR "the bert_tiny case did not run")
endif()
