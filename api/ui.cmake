# The web page (web/) and Chart.js (Debian's libjs-chart.js), embedded into ty_api the way
# openapi.yaml is, so that the binary serves its page with nothing to install beside it.
# Sets API_UI_SOURCES, the generated C files api/CMakeLists.txt adds to ty_api.
find_file(API_CHART_JS chart.min.js PATHS /usr/share/javascript/chart.js NO_DEFAULT_PATH)
if(NOT API_CHART_JS)
  message(FATAL_ERROR "Chart.js not found (/usr/share/javascript/chart.js/chart.min.js): "
                      "install Debian's libjs-chart.js (scripts/install-deps)")
endif()

set(API_UI_INPUTS ${PROJECT_SOURCE_DIR}/web/index.html ${PROJECT_SOURCE_DIR}/web/app.js
                  ${PROJECT_SOURCE_DIR}/web/style.css ${API_CHART_JS})
set(API_UI_SYMBOLS api_ui_index_html api_ui_app_js api_ui_style_css api_ui_chart_js)
set(API_UI_SOURCES)
foreach(input symbol IN ZIP_LISTS API_UI_INPUTS API_UI_SYMBOLS)
  set(output ${CMAKE_CURRENT_BINARY_DIR}/${symbol}.c)
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${output} -DNAME=${symbol}
            -DHEADER=api/ui_assets.h -P ${CMAKE_CURRENT_SOURCE_DIR}/embed.cmake
    DEPENDS ${input} ${CMAKE_CURRENT_SOURCE_DIR}/embed.cmake
    COMMENT "Embedding ${input}"
    VERBATIM)
  list(APPEND API_UI_SOURCES ${output})
endforeach()
