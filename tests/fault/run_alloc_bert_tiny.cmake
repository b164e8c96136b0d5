# A bert_tiny case of tests/fault/test_fault_injection.cpp (default: the planned-run allocation
# count):
#   cmake -DTESTS=<dsinfer_fault_tests> -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir>
#         [-DCASE=<test case name> -DMATCH=<regex its output must match>]
#         -P run_alloc_bert_tiny.cmake
# writes bert_tiny.onnx with tools/make_models.py, then runs the test case with
# DSINFER_BERT_TINY pointing at it; the transformer case must have run and passed.
if(NOT DEFINED CASE)
  set(CASE "a planned run allocates only for its inputs and outputs outside the kernels")
  set(MATCH "bert_tiny: [0-9.]+ allocations per planned run")
endif()
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK} --only bert_tiny
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py --only bert_tiny failed (${rc})")
endif()
set(ENV{DSINFER_BERT_TINY} ${WORK}/bert_tiny.onnx)
execute_process(COMMAND ${TESTS} "${CASE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the test case failed (${rc})")
endif()
if(NOT out MATCHES "${MATCH}")
  message(FATAL_ERROR "the bert_tiny case did not run")
endif()
