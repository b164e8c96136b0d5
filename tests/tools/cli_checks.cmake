# Shared by the ctest drivers of the command-line tools (check_ds_benchmark.cmake,
# check_ds_loadgen.cmake), included after TOOL (the executable) is set:
#   run_tool(RC STDOUT STDERR ARG...)   runs TOOL with the arguments
#   check_bad_cases(PROGRAM MODEL CASE...)
#       each CASE is "exit status|regex|arguments separated by spaces" (@M@ = MODEL): the tool
#       must exit with that status, print nothing on stdout, and a first stderr line
#       "PROGRAM: ..." matching the regex; exit status 2 must also print the usage.
#   run_json(PROGRAM ARG...)   runs TOOL ARG... --json: it must exit 0 and print one line,
#       which is set as `line` (and echoed)
#   get_field(VAR KEY...) / expect_positive(KEY...)   read the JSON document in `line`
function(run_tool out_rc out_stdout out_stderr)
  execute_process(COMMAND ${TOOL} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE so
                  ERROR_VARIABLE se)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_stdout} "${so}" PARENT_SCOPE)
  set(${out_stderr} "${se}" PARENT_SCOPE)
endfunction()

function(check_bad_cases program model)
  foreach(c IN LISTS ARGN)
    string(REPLACE "|" ";" parts "${c}")
    list(GET parts 0 want_rc)
    list(GET parts 1 want_msg)
    list(GET parts 2 argstr)
    string(REPLACE " " ";" args "${argstr}")
    list(TRANSFORM args REPLACE "^@M@" "${model}")
    run_tool(rc so se ${args})
    string(REGEX MATCH "^[^\n]*" first_line "${se}")
    if(NOT rc EQUAL want_rc OR NOT first_line MATCHES "^${program}: .*${want_msg}")
      message(FATAL_ERROR "${program} ${args}: exit ${rc} (want ${want_rc}), stderr:\n${se}"
                          "\nwant a first line '${program}: ...' matching '${want_msg}'")
    endif()
    if(want_rc EQUAL 2 AND NOT se MATCHES "usage: ${program}")
      message(FATAL_ERROR "${program} ${args}: no usage on a bad command line:\n${se}")
    endif()
    if(NOT so STREQUAL "")
      message(FATAL_ERROR "${program} ${args}: printed on stdout:\n${so}")
    endif()
  endforeach()
endfunction()

function(run_json program)
  run_tool(rc so se ${ARGN} --json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${program} ${ARGN} --json exited ${rc}:\n${se}")
  endif()
  string(STRIP "${so}" one)
  if(one MATCHES "\n")
    message(FATAL_ERROR "--json printed more than one line:\n${so}")
  endif()
  message("${one}")
  set(line "${one}" PARENT_SCOPE)
endfunction()

macro(get_field var)
  string(JSON ${var} ERROR_VARIABLE _err GET "${line}" ${ARGN})
  if(_err)
    message(FATAL_ERROR "field ${ARGN}: ${_err}")
  endif()
endmacro()
macro(expect_positive)
  get_field(_v ${ARGN})
  if(NOT _v GREATER 0)
    message(FATAL_ERROR "field ${ARGN} = ${_v}, want > 0")
  endif()
endmacro()
