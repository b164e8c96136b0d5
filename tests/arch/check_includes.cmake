# The include walls of docs/ARCHITECTURE.md ("Rooms and walls"), checked on the source tree:
#   cmake -DROOT=<repo> -P tests/arch/check_includes.cmake
# Each rule names the files it governs and the includes they must not have. A violation fails
# with the file, the line and the rule. PENDING lists known violations still being removed:
# each must still occur (so the list only shrinks), and none may be added.
cmake_minimum_required(VERSION 3.20)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository root> -P check_includes.cmake")
endif()

# Rules: name, files (comma-separated directories relative to ROOT), forbidden include (regex
# on the path between the quotes or brackets).
set(RULES
  "kernels do not include the optimizer" "src/cpu/,src/kernels/,src/onednn/,cuda/" "^dsinfer/passes[.]hpp$"
  "passes reach no executor or backend" "src/passes/" "^(core|cpu|kernels|onednn|cuda)/"
  "backends reach no cpu/ internals" "src/onednn/,cuda/" "^cpu/"
  "the kernels room (dsinfer's CPU compute library) depends on the vocabulary, ops and runtime only"
  "src/kernels/" "^(core|cpu|onednn|cuda|passes|onnx|serving)/"
  "the ops room depends on the vocabulary only" "src/ops/" "^(core|cpu|kernels|onednn|cuda|passes|onnx|runtime)/"
  "the runtime (threads) depends on the vocabulary only" "src/runtime/" "^(core|cpu|kernels|onednn|cuda|passes|onnx|ops)/"
  "the importer does not include the engine" "src/onnx/" "^(dsinfer/engine[.]hpp|core/|cpu/|kernels/|onednn/|cuda/)"
  "the engine reaches backends through their interfaces" "src/core/" "^(cpu|onednn)/"
  "serving wraps the public engine (no executor, no backend)" "src/serving/" "^(core|cpu|kernels|onednn|cuda|passes|ops|onnx)/"
  "the engine core does not include serving" "src/core/" "^(serving/|dsinfer/serving[.]hpp$)"
  "the quantizer drives the public engine (no executor, no backend, no importer)" "src/quantizer/" "^(core|cpu|kernels|onednn|cuda|onnx|serving)/"
  "nothing below the quantizer includes it" "src/core/,src/passes/,src/ops/,src/runtime/,src/kernels/,src/cpu/,src/onednn/,src/onnx/,src/serving/,cuda/" "^quantizer/"
  "the pruner drives the public engine (no executor, no backend, no importer)" "src/pruner/" "^(core|cpu|kernels|onednn|cuda|onnx|serving|quantizer)/"
  "nothing below the pruner includes it" "src/core/,src/passes/,src/ops/,src/runtime/,src/kernels/,src/cpu/,src/onednn/,src/onnx/,src/serving/,src/quantizer/,cuda/" "^pruner/"
  "the server fronts the public engine and serving (no executor, backend or importer)" "src/server/" "^(core|cpu|kernels|onednn|cuda|passes|ops|onnx|quantizer|pruner)/"
  "nothing below the server includes it" "src/core/,src/passes/,src/ops/,src/runtime/,src/kernels/,src/cpu/,src/onednn/,src/onnx/,src/serving/,src/quantizer/,src/pruner/,cuda/" "^(server/|dsinfer/server[.]hpp$|httplib[.]h$|boost/(asio|beast)|grpcpp/)"
  "public headers include no third-party or internal header" "include/dsinfer/"
  "^(cuda|cudnn|cublas|dnnl|oneapi|Eigen|unsupported/Eigen|fmt|nlohmann|core|cpu|kernels|onednn|passes|ops|onnx|server|httplib|boost|openssl|grpc|grpcpp|google)[/_.]"
)

# Known violations being removed: "file|include". Keep sorted. None are left.
set(PENDING)

set(found "")
set(errors "")
list(LENGTH RULES nrules)
math(EXPR last "${nrules} - 1")
foreach(i RANGE 0 ${last} 3)
  math(EXPR j "${i} + 1")
  math(EXPR k "${i} + 2")
  list(GET RULES ${i} name)
  list(GET RULES ${j} globs)
  list(GET RULES ${k} forbidden)
  string(REPLACE "," ";" globs "${globs}")
  set(files "")
  foreach(g IN LISTS globs)
    set(dir "${g}")
    file(GLOB_RECURSE f RELATIVE "${ROOT}" "${ROOT}/${dir}*.hpp" "${ROOT}/${dir}*.cpp"
         "${ROOT}/${dir}*.cu" "${ROOT}/${dir}*.cuh" "${ROOT}/${dir}*.inc" "${ROOT}/${dir}*.in")
    list(APPEND files ${f})
  endforeach()
  list(REMOVE_DUPLICATES files)
  foreach(f IN LISTS files)
    file(STRINGS "${ROOT}/${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" inc "${line}")
      if(inc MATCHES "${forbidden}")
        list(APPEND found "${f}|${inc}")
        list(FIND PENDING "${f}|${inc}" pending)
        if(pending EQUAL -1)
          string(APPEND errors "  ${f}: #include \"${inc}\" breaks '${name}'\n")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

foreach(p IN LISTS PENDING)
  list(FIND found "${p}" at)
  if(at EQUAL -1)
    string(APPEND errors "  PENDING entry '${p}' no longer occurs: remove it from the list\n")
  endif()
endforeach()

list(LENGTH PENDING npending)
if(errors)
  message(FATAL_ERROR "include walls broken:\n${errors}")
endif()
message(STATUS "include walls hold (${npending} known violations pending)")
