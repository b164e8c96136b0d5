# The op rules on generated models (tests/unit/test_op_info.cpp, "generated models are annotated
# without an evaluator"):
#   cmake -DTESTS=<dsinfer_tests> -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir>
#         -P run_op_rules_models.cmake
# writes mlp, bert_tiny and resnet50 with tools/make_models.py into WORK, then runs the test
# case with DSINFER_TEST_MODELS pointing there; every model must have been checked (no skip).
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK}
                        --only mlp bert_tiny resnet50
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py --only mlp bert_tiny resnet50 failed (${rc})")
endif()
set(ENV{DSINFER_TEST_MODELS} ${WORK})
execute_process(COMMAND ${TESTS} "op rules: generated models are annotated without an evaluator*"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the test case failed (${rc})")
endif()
if(out MATCHES "SKIPPED" OR out MATCHES "No test cases matched")
  message(FATAL_ERROR "a generated model was not checked")
endif()
