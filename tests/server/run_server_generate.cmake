# The generate extension's cases of the server tests (tests/server/test_server_generate.cpp,
# [.server-generate]) on a generated decoder:
#   cmake -DTESTS=<dsinfer_server_tests> -DPYTHON=<python3> -DSRC=<repo> -DWORK=<dir>
#         -P run_server_generate.cmake
# writes llama_tiny.onnx with tools/make_models.py, then runs the cases with DSINFER_LLAMA_TINY
# pointing at it; they must all have run and passed.
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_models.py --out ${WORK} --only llama_tiny
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_models.py --only llama_tiny failed (${rc})")
endif()
set(ENV{DSINFER_LLAMA_TINY} ${WORK}/llama_tiny.onnx)
execute_process(COMMAND ${TESTS} "[server-generate]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the server's generate cases failed (${rc})")
endif()
if(NOT out MATCHES "All tests passed \\([0-9]+ assertions in 6 test cases\\)")
  message(FATAL_ERROR "the server's generate cases did not all run")
endif()
