# ty_report: rank 0's metrics reporter (runtime/report.h), the runtime's one HTTP client.
# Included from runtime/CMakeLists.txt; ty_runtime links it.
add_library(ty_report STATIC ${CMAKE_CURRENT_LIST_DIR}/report.c)
ty_target(ty_report)
target_link_libraries(ty_report PUBLIC PkgConfig::CURL PkgConfig::JANSSON Threads::Threads m)
