/*
 * ui.c - the web page: GET / and its assets under /ui/, open routes (the page asks the user for
 * a token and sends it on every API call it makes; the files themselves hold no data).
 *
 * The files are embedded at build time (ui_assets.h), so the page always matches the server it
 * comes from. Every answer carries a Content-Security-Policy that lets the page load only what
 * this server serves and run no inline script or style: the page shows strings users wrote
 * (names, labels, log lines), and if one ever reached the DOM as HTML the policy would still
 * refuse to run it. The route table lists each asset's path: the router's templates have one
 * kind of variable segment, a job id.
 */
#include <string.h>

#include "api/api.h"
#include "api/api_int.h"
#include "api/ui_assets.h"

#define UI_CSP                                                                                     \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "             \
    "form-action 'self'"

static const struct ui_asset {
    const char *path;
    const char *content_type;
    const char *data;
    const size_t *len;
} ui_assets[] = {
    {"/", "text/html; charset=utf-8", api_ui_index_html, &api_ui_index_html_len},
    {"/ui/app.js", "text/javascript; charset=utf-8", api_ui_app_js, &api_ui_app_js_len},
    {"/ui/style.css", "text/css; charset=utf-8", api_ui_style_css, &api_ui_style_css_len},
    {"/ui/chart.js", "text/javascript; charset=utf-8", api_ui_chart_js, &api_ui_chart_js_len},
};

void api_ui_get(const api_req *req, api_resp *resp)
{
    for (size_t i = 0; i < sizeof ui_assets / sizeof ui_assets[0]; i++) {
        const struct ui_asset *a = &ui_assets[i];
        if (strcmp(req->path, a->path) != 0)
            continue;
        api_reply_text(resp, 200, a->content_type, a->data, *a->len);
        api_resp_header(resp, "Content-Security-Policy", UI_CSP);
        api_resp_header(resp, "X-Content-Type-Options", "nosniff");
        /* Revalidated on every load: a new binary brings new files under the same names. */
        api_resp_header(resp, "Cache-Control", "no-cache");
        api_resp_header(resp, "Referrer-Policy", "no-referrer");
        return;
    }
    /* Only the paths above are routed here; anything else is a bug in the route table. */
    api_reply_problem(resp, 404, "not-found", NULL, "no such file of the web page", NULL);
}
