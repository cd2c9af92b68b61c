/*
 * test_api_ui.c - api/ui.c: the web page and its files, as the route table serves them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "api/api_int.h"
#include "api/ui_assets.h"
#include "tests/unit/test_api_fixture.h"

static const struct file_case {
    const char *path;
    const char *content_type;
    const char *data;
    const size_t *len;
    const char *contains; /* a piece of text the file must hold */
} file_cases[] = {
    {"/", "text/html; charset=utf-8", api_ui_index_html, &api_ui_index_html_len,
     "<script src=\"/ui/app.js\""},
    {"/ui/app.js", "text/javascript; charset=utf-8", api_ui_app_js, &api_ui_app_js_len,
     "Authorization"},
    {"/ui/style.css", "text/css; charset=utf-8", api_ui_style_css, &api_ui_style_css_len, ".badge"},
    {"/ui/chart.js", "text/javascript; charset=utf-8", api_ui_chart_js, &api_ui_chart_js_len,
     "Chart.js v"},
};

/* Every file comes whole, with its type, the policy and nosniff, without a token. */
static void test_files_are_served_with_policy(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < sizeof file_cases / sizeof file_cases[0]; i++) {
        const struct file_case *tc = &file_cases[i];
        api_resp resp;
        fx_req r = {.principal = ""};
        fx_call(f, "GET", tc->path, &r, &resp);
        assert_int_equal(resp.status, 200);
        assert_string_equal(resp.content_type, tc->content_type);
        assert_int_equal(resp.body_len, *tc->len);
        assert_memory_equal(resp.body, tc->data, *tc->len);
        assert_non_null(strstr(resp.body, tc->contains));
        const char *csp = fx_header(&resp, "Content-Security-Policy");
        assert_non_null(csp);
        assert_non_null(strstr(csp, "default-src 'self'"));
        assert_non_null(strstr(csp, "script-src 'self';"));
        assert_non_null(strstr(csp, "style-src 'self';"));
        assert_non_null(strstr(csp, "connect-src 'self'"));
        assert_non_null(strstr(csp, "object-src 'none'"));
        assert_non_null(strstr(csp, "frame-ancestors 'none'"));
        assert_null(strstr(csp, "unsafe"));
        assert_string_equal(fx_header(&resp, "X-Content-Type-Options"), "nosniff");
        assert_non_null(fx_header(&resp, "Cache-Control"));
        api_resp_free(&resp);
    }
}

/* Every route of the page is open; nothing else in the table answers with this handler. */
static void test_routes_are_open(void **state)
{
    size_t n = 0;
    (void)state;
    for (size_t i = 0; i < api_nroutes; i++) {
        if (api_routes[i].handler != api_ui_get)
            continue;
        assert_int_equal(api_routes[i].scope, 0);
        assert_string_equal(api_routes[i].method, "GET");
        n++;
    }
    assert_int_equal(n, sizeof file_cases / sizeof file_cases[0]);
}

/* The page's HTML names its files by the paths the table serves, and holds no inline script. */
static void test_page_loads_only_its_files(void **state)
{
    const char *p = api_ui_index_html;
    (void)state;
    while ((p = strstr(p, "<script"))) {
        const char *end = strchr(p, '>');
        assert_non_null(end);
        /* Every script element has a src and an empty body. */
        const char *src = strstr(p, "src=\"/ui/");
        assert_true(src && src < end);
        assert_memory_equal(end, "></script>", 10);
        p = end;
    }
    assert_null(strstr(api_ui_index_html, "style=\""));
    assert_null(strstr(api_ui_index_html, "<style"));
    assert_null(strstr(api_ui_index_html, "http://"));
    assert_null(strstr(api_ui_index_html, "https://"));
    assert_non_null(strstr(api_ui_index_html, "href=\"/ui/style.css\""));
    /* The script never parses HTML out of strings. */
    assert_null(strstr(api_ui_app_js, "innerHTML"));
    assert_null(strstr(api_ui_app_js, "outerHTML"));
    assert_null(strstr(api_ui_app_js, "insertAdjacentHTML"));
    assert_null(strstr(api_ui_app_js, "document.write"));
    assert_null(strstr(api_ui_app_js, "eval("));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_files_are_served_with_policy, fx_setup, fx_teardown),
        cmocka_unit_test(test_routes_are_open),
        cmocka_unit_test(test_page_loads_only_its_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
