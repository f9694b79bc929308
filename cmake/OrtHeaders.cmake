# ONNX Runtime C/C++ headers, found the same way by the library and by examples/cpp. Sets ONNXRUNTIME_INCLUDE_DIR.
#   1. ONNXRUNTIME_INCLUDE_DIR (CMake or environment variable): a folder holding onnxruntime_c_api.h;
#   2. else, when ONNX_POOLS_ORT_HEADERS (CMake or environment: 1.21 or 1.23) is given, that pinned Debian
#      libonnxruntime-dev fetched by cmake/fetch_ort_headers.sh;
#   3. else a system install (e.g. Debian's libonnxruntime-dev);
#   4. else the pinned 1.21 headers fetched into the build tree (a ~100 KB download from this machine's apt
#      mirror, sha256-verified; nothing is installed).
# Any of them works: the library asks ORT for the C API version it needs (21), whatever version the headers declare.
set(_ort_headers_dir "${CMAKE_CURRENT_LIST_DIR}")

# The pinned Debian libonnxruntime-dev <version>, fetched into the build tree; <out_var> = its include folder.
function(ort_fetch_pinned_headers version out_var)
  set(fetch_dir "${CMAKE_BINARY_DIR}/ort-headers-${version}")
  message(STATUS "Fetching ONNX Runtime headers (Debian libonnxruntime-dev, pinned ${version}); "
                 "set ONNXRUNTIME_INCLUDE_DIR / ONNXRUNTIME_EP_INCLUDE_DIR to use headers you have")
  execute_process(COMMAND bash "${_ort_headers_dir}/fetch_ort_headers.sh" "${fetch_dir}" "${version}"
                  RESULT_VARIABLE fetch_result)
  if(NOT fetch_result EQUAL 0)
    message(FATAL_ERROR "Could not fetch the ONNX Runtime ${version} headers (see above); set "
                        "ONNXRUNTIME_INCLUDE_DIR (ONNXRUNTIME_EP_INCLUDE_DIR for the plugin EP) to headers you have")
  endif()
  set(${out_var} "${fetch_dir}/usr/include/onnxruntime" PARENT_SCOPE)
endfunction()

# <out_var> = the ORT_API_VERSION that <include_dir>/onnxruntime_c_api.h declares.
function(ort_headers_api_version include_dir out_var)
  file(STRINGS "${include_dir}/onnxruntime_c_api.h" api_line REGEX "^#define ORT_API_VERSION [0-9]+")
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" api_version "${api_line}")
  set(${out_var} "${api_version}" PARENT_SCOPE)
endfunction()

if(NOT ONNXRUNTIME_INCLUDE_DIR AND DEFINED ENV{ONNXRUNTIME_INCLUDE_DIR})
  set(ONNXRUNTIME_INCLUDE_DIR "$ENV{ONNXRUNTIME_INCLUDE_DIR}")
endif()
if(NOT ONNX_POOLS_ORT_HEADERS AND DEFINED ENV{ONNX_POOLS_ORT_HEADERS})
  set(ONNX_POOLS_ORT_HEADERS "$ENV{ONNX_POOLS_ORT_HEADERS}")
endif()
if(NOT ONNXRUNTIME_INCLUDE_DIR AND NOT ONNX_POOLS_ORT_HEADERS)
  find_path(ORT_SYSTEM_INCLUDE_DIR onnxruntime_c_api.h PATH_SUFFIXES onnxruntime onnxruntime/core/session)
  if(ORT_SYSTEM_INCLUDE_DIR)
    set(ONNXRUNTIME_INCLUDE_DIR "${ORT_SYSTEM_INCLUDE_DIR}")
  else()
    set(ONNX_POOLS_ORT_HEADERS 1.21)
  endif()
endif()
if(NOT ONNXRUNTIME_INCLUDE_DIR)
  ort_fetch_pinned_headers(${ONNX_POOLS_ORT_HEADERS} ONNXRUNTIME_INCLUDE_DIR)
endif()
if(NOT EXISTS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_c_api.h")
  message(FATAL_ERROR "onnxruntime_c_api.h not found in ONNXRUNTIME_INCLUDE_DIR=${ONNXRUNTIME_INCLUDE_DIR}")
endif()
ort_headers_api_version("${ONNXRUNTIME_INCLUDE_DIR}" ONNXRUNTIME_HEADERS_API_VERSION)
message(STATUS "ONNX Runtime headers: ${ONNXRUNTIME_INCLUDE_DIR} (C API ${ONNXRUNTIME_HEADERS_API_VERSION})")

# Headers for the plugin execution provider (csrc/ort/ep/, ONNX Runtime >= 1.24: kernel registries in
# onnxruntime_ep_c_api.h, C API 24 and newer). Sets ONNXRUNTIME_EP_INCLUDE_DIR:
#   1. ONNXRUNTIME_EP_INCLUDE_DIR (CMake or environment variable);
#   2. else ONNXRUNTIME_INCLUDE_DIR when its headers are of C API 24 or newer;
#   3. else the pinned Debian libonnxruntime-dev 1.27 (C API 27) fetched into the build tree.
# Only the EP sources see these headers; the rest of the library keeps ONNXRUNTIME_INCLUDE_DIR, and the library as a
# whole still asks ORT for C API 21 (the EP's entry points check for 1.24 themselves).
if(NOT ONNXRUNTIME_EP_INCLUDE_DIR AND DEFINED ENV{ONNXRUNTIME_EP_INCLUDE_DIR})
  set(ONNXRUNTIME_EP_INCLUDE_DIR "$ENV{ONNXRUNTIME_EP_INCLUDE_DIR}")
endif()
if(NOT ONNXRUNTIME_EP_INCLUDE_DIR AND ONNXRUNTIME_HEADERS_API_VERSION GREATER_EQUAL 24
   AND EXISTS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_ep_c_api.h")
  set(ONNXRUNTIME_EP_INCLUDE_DIR "${ONNXRUNTIME_INCLUDE_DIR}")
endif()
if(NOT ONNXRUNTIME_EP_INCLUDE_DIR)
  ort_fetch_pinned_headers(1.27 ONNXRUNTIME_EP_INCLUDE_DIR)
endif()
if(NOT EXISTS "${ONNXRUNTIME_EP_INCLUDE_DIR}/onnxruntime_ep_c_api.h")
  message(FATAL_ERROR "onnxruntime_ep_c_api.h not found in ONNXRUNTIME_EP_INCLUDE_DIR=${ONNXRUNTIME_EP_INCLUDE_DIR}")
endif()
ort_headers_api_version("${ONNXRUNTIME_EP_INCLUDE_DIR}" ONNXRUNTIME_EP_HEADERS_API_VERSION)
if(ONNXRUNTIME_EP_HEADERS_API_VERSION LESS 24)
  message(FATAL_ERROR "ONNXRUNTIME_EP_INCLUDE_DIR=${ONNXRUNTIME_EP_INCLUDE_DIR} has headers of C API "
                      "${ONNXRUNTIME_EP_HEADERS_API_VERSION}; the plugin execution provider needs 24 or newer")
endif()
message(STATUS "ONNX Runtime headers for the plugin EP: ${ONNXRUNTIME_EP_INCLUDE_DIR} (C API ${ONNXRUNTIME_EP_HEADERS_API_VERSION})")
