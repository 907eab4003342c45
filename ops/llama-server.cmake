# Included by llama.cpp's CMakeLists when ops/lib.sh builds llama-server (CMAKE_PROJECT_INCLUDE).
# The build is a unity build (sources compiled in batches: about half the CPU time), but these files
# do not compile inside one: they are built on their own. Deferred to the end of the top directory,
# once every target exists.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL set_source_files_properties
  ${CMAKE_SOURCE_DIR}/common/json.cpp
  ${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper.cpp
  ${CMAKE_SOURCE_DIR}/tools/mtmd/mtmd-helper-gen.cpp
  DIRECTORY ${CMAKE_SOURCE_DIR}/common ${CMAKE_SOURCE_DIR}/tools/mtmd
  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
