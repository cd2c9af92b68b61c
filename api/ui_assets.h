/*
 * ui_assets.h - the files of the web page, embedded at build time (api/ui.cmake runs
 * api/embed.cmake on web/ and on Debian's Chart.js). Each array holds the file's bytes plus a
 * NUL; the _len constant excludes the NUL. Served by api/ui.c.
 */
#ifndef TY_API_UI_ASSETS_H
#define TY_API_UI_ASSETS_H

#include <stddef.h>

extern const char api_ui_index_html[];
extern const size_t api_ui_index_html_len;
extern const char api_ui_app_js[];
extern const size_t api_ui_app_js_len;
extern const char api_ui_style_css[];
extern const size_t api_ui_style_css_len;
extern const char api_ui_chart_js[]; /* Chart.js's UMD build (chart.min.js) */
extern const size_t api_ui_chart_js_len;

#endif
