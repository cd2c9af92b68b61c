/*
 * http.c - libcurl under the command line: one easy handle per client (its connection is
 * reused), bounded in-memory answers, streamed 2xx bodies, problem details to exit statuses.
 */
#include "cli/http.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_TIMEOUT_S 30L
#define CONNECT_TIMEOUT_S 10L

struct cli_http {
    CURL *curl;
    char *base; /* without a trailing slash */
    char *auth; /* "Authorization: Bearer ..." or NULL; cleansed when freed */
};

/* What a transfer's write callback works on. */
typedef struct xfer {
    CURL *curl;
    cli_resp *r;
    size_t cap;
    cli_sink sink; /* NULL: read the whole body into r */
    void *ud;
    int too_large;
    int stopped;
} xfer;

ty_err cli_http_new(const char *server, const char *token, cli_http **out)
{
    cli_http *c = NULL;
    *out = NULL;
    if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0)
        return TY_EINVAL;
    if (!(c = calloc(1, sizeof *c)) || !(c->base = strdup(server)))
        goto nomem;
    size_t n = strlen(c->base);
    while (n > 8 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    for (const char *p = token; p && *p; p++)
        if ((unsigned char)*p < 0x21 || *p == 0x7f) /* no header injection, no spaces */
            goto bad;
    if (token && *token) {
        size_t len = strlen(token) + sizeof "Authorization: Bearer ";
        if (!(c->auth = malloc(len)))
            goto nomem;
        snprintf(c->auth, len, "Authorization: Bearer %s", token);
    }
    if (!(c->curl = curl_easy_init()))
        goto nomem;
    *out = c;
    return TY_OK;
nomem:
    cli_http_free(c);
    return TY_ENOMEM;
bad:
    cli_http_free(c);
    return TY_EINVAL;
}

void cli_http_free(cli_http *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    if (c->auth) {
        OPENSSL_cleanse(c->auth, strlen(c->auth));
        free(c->auth);
    }
    free(c->base);
    free(c);
}

ty_err cli_query_add(char *buf, size_t len, const char *name, const char *value)
{
    char *esc = curl_easy_escape(NULL, value, 0);
    if (!esc)
        return TY_ENOMEM;
    size_t used = strlen(buf);
    int n = snprintf(buf + used, len - used, "%c%s=%s", strchr(buf, '?') ? '&' : '?', name, esc);
    curl_free(esc);
    return n < 0 || (size_t)n >= len - used ? TY_ETOOLARGE : TY_OK;
}

/* Writes "<prefix><escaped id><suffix>" into buf. */
static ty_err resource_path(char *buf, size_t len, const char *prefix, const char *id,
                            const char *suffix)
{
    char *esc = curl_easy_escape(NULL, id, 0);
    if (!esc)
        return TY_ENOMEM;
    int n = snprintf(buf, len, "%s%s%s", prefix, esc, suffix);
    curl_free(esc);
    return n < 0 || (size_t)n >= len ? TY_ETOOLARGE : TY_OK;
}

ty_err cli_job_path(char *buf, size_t len, const char *id, const char *suffix)
{
    return resource_path(buf, len, "/v1/jobs/", id, suffix);
}

ty_err cli_sweep_path(char *buf, size_t len, const char *id, const char *suffix)
{
    return resource_path(buf, len, "/v1/sweeps/", id, suffix);
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
    if (x->sink && status >= 200 && status < 300) {
        if (x->sink(x->ud, p, n) != 0) {
            x->stopped = 1;
            return 0; /* ends the transfer: the caller has what it wanted */
        }
        return n;
    }
    cli_resp *r = x->r;
    if (r->len + n > CLI_HTTP_MAX_BODY) {
        x->too_large = 1;
        return 0;
    }
    if (r->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *nb = realloc(r->body, cap);
        if (!nb)
            return 0;
        r->body = nb;
        x->cap = cap;
    }
    memcpy(r->body + r->len, p, n);
    r->len += n;
    r->body[r->len] = '\0';
    return n;
}

static int perform(cli_http *c, const char *method, const char *path, const char *body,
                   const char *last_event_id, cli_sink sink, void *ud, cli_resp *r)
{
    struct curl_slist *h = NULL;
    char url[4096], lei[128];
    xfer x = {.curl = c->curl, .r = r, .sink = sink, .ud = ud};
    int rc = -1;

    memset(r, 0, sizeof *r);
    if ((size_t)snprintf(url, sizeof url, "%s%s", c->base, path) >= sizeof url) {
        snprintf(r->err, sizeof r->err, "request URL too long");
        return -1;
    }
    curl_easy_reset(c->curl);
    if (c->auth)
        h = curl_slist_append(h, c->auth);
    h = curl_slist_append(h, "Accept: application/json, text/event-stream, text/plain, "
                             "application/problem+json");
    if (body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (last_event_id) {
        snprintf(lei, sizeof lei, "Last-Event-ID: %s", last_event_id);
        h = curl_slist_append(h, lei);
    }
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, sink ? 0L : HTTP_TIMEOUT_S);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, "");
    }
    CURLcode cc = curl_easy_perform(c->curl);
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
    if (cc != CURLE_OK && !(x.stopped && cc == CURLE_WRITE_ERROR)) {
        if (x.too_large)
            snprintf(r->err, sizeof r->err, "the answer is larger than %zu bytes",
                     CLI_HTTP_MAX_BODY);
        else
            snprintf(r->err, sizeof r->err, "%s: %s", c->base, curl_easy_strerror(cc));
        /* A stream cut off after its 2xx head still answered: the caller decides. */
        if (!(sink && r->status >= 200 && r->status < 300))
            r->status = 0;
        goto out;
    }
    if (r->body)
        r->json = json_loadb(r->body, r->len, 0, NULL);
    rc = 0;
out:
    curl_slist_free_all(h);
    return rc;
}

int cli_http_do(cli_http *c, const char *method, const char *path, const char *body, cli_resp *r)
{
    return perform(c, method, path, body, NULL, NULL, NULL, r);
}

int cli_http_stream(cli_http *c, const char *path, const char *last_event_id, cli_sink sink,
                    void *ud, cli_resp *r)
{
    return perform(c, "GET", path, NULL, last_event_id, sink, ud, r);
}

void cli_resp_free(cli_resp *r)
{
    free(r->body);
    json_decref(r->json);
    r->body = NULL;
    r->json = NULL;
    r->len = 0;
}

int cli_report(const char *cmd, const cli_resp *r, FILE *errf)
{
    if (r->status == 0) {
        fprintf(errf, "trainyard %s: cannot reach the server: %s\n", cmd, r->err);
        return CLI_EXIT_UNREACHABLE;
    }
    const char *title = json_string_value(json_object_get(r->json, "title"));
    const char *detail = json_string_value(json_object_get(r->json, "detail"));
    fprintf(errf, "trainyard %s: %s (HTTP %ld)%s%s\n", cmd, title ? title : "request failed",
            r->status, detail ? ": " : "", detail ? detail : "");
    size_t i;
    json_t *fe;
    json_array_foreach(json_object_get(r->json, "errors"), i, fe)
    {
        const char *path = json_string_value(json_object_get(fe, "path"));
        const char *msg = json_string_value(json_object_get(fe, "message"));
        fprintf(errf, "  %s: %s\n", path ? path : "?", msg ? msg : "?");
    }
    if (r->status == 401 || r->status == 403)
        return CLI_EXIT_AUTH;
    if (r->status == 404)
        return CLI_EXIT_NOTFOUND;
    return CLI_EXIT_FAIL;
}

/* ---- Server-Sent Events ------------------------------------------------------ */

void cli_sse_init(cli_sse *s, cli_sse_fn fn, void *ud)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->ud = ud;
}

void cli_sse_free(cli_sse *s)
{
    free(s->data);
    s->data = NULL;
}

static int sse_line(cli_sse *s)
{
    char *line = s->line;
    if (s->linelen && line[s->linelen - 1] == '\r')
        line[--s->linelen] = '\0';
    if (s->linelen == 0) { /* the blank line ends an event */
        int rc = 0;
        if (s->data)
            rc = s->fn(s->ud, s->event[0] ? s->event : "message", s->id, s->data);
        free(s->data);
        s->data = NULL;
        s->datalen = 0;
        s->event[0] = '\0';
        return rc;
    }
    if (line[0] == ':')
        return 0; /* a comment (keep-alive) */
    char *colon = strchr(line, ':');
    const char *value = "";
    if (colon) {
        *colon = '\0';
        value = colon[1] == ' ' ? colon + 2 : colon + 1;
    }
    if (strcmp(line, "event") == 0) {
        snprintf(s->event, sizeof s->event, "%s", value);
    } else if (strcmp(line, "id") == 0) {
        snprintf(s->id, sizeof s->id, "%s", value);
    } else if (strcmp(line, "data") == 0) {
        size_t n = strlen(value);
        char *d = realloc(s->data, s->datalen + n + 2);
        if (!d)
            return -1;
        s->data = d;
        if (s->datalen)
            s->data[s->datalen++] = '\n';
        memcpy(s->data + s->datalen, value, n + 1);
        s->datalen += n;
    }
    return 0;
}

int cli_sse_feed(void *ud, const char *p, size_t n)
{
    cli_sse *s = ud;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            if (s->linelen + 1 < sizeof s->line)
                s->line[s->linelen++] = p[i];
            else
                s->overflow = 1;
            continue;
        }
        s->line[s->linelen] = '\0';
        int rc = s->overflow ? 0 : sse_line(s);
        s->linelen = 0;
        s->overflow = 0;
        if (rc)
            return rc;
    }
    return 0;
}
