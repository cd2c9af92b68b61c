/*
 * cli.c - the client commands: one table of {name, summary, usage, function}; each command
 * parses its flags with getopt_long, asks the server over HTTP and prints what came back.
 */
#include "cli/cli.h"

#include <ctype.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/conf.h"
#include "cli/http.h"
#include "cli/yaml.h"

/* Largest job file read. */
#define JOB_FILE_MAX ((size_t)4 << 20)
/* Reconnections of a followed stream that was cut off before its end. */
#define FOLLOW_RETRIES 10

typedef struct cmd {
    const char *name;
    const char *summary;
    const char *usage; /* after "Usage: trainyard NAME " */
    int (*fn)(int argc, char **argv);
} cmd;

static const cmd *find_cmd(const char *name);

#define COMMON_HELP                                                                                \
    "Connection (flags beat TRAINYARD_SERVER / TRAINYARD_TOKEN, which beat the config file\n"      \
    "$XDG_CONFIG_HOME/trainyard/config, by default ~/.config/trainyard/config, mode 0600):\n"      \
    "  --server URL          the server, e.g. http://127.0.0.1:8080\n"                             \
    "  --token-file PATH     a file whose first line is the token (- for standard input)\n"        \
    "  -h, --help            this help\n"                                                          \
    "\n"                                                                                           \
    "Exit status: 0 ok, 1 failed (a server error; with --wait a job that did not succeed),\n"      \
    "2 usage, 3 not found, 4 not authorized (401/403), 5 the server cannot be reached.\n"

enum {
    OPT_SERVER = 256,
    OPT_TOKEN_FILE,
    OPT_SET,
    OPT_WAIT,
    OPT_STATE,
    OPT_QUEUE,
    OPT_LABEL,
    OPT_LIMIT,
    OPT_COUNT,
    OPT_PAGE_TOKEN,
    OPT_ALL
};

/* What every command's flags may set. */
typedef struct opts {
    const char *server, *token_file, *file, *output, *state, *queue, *rank, *page_token;
    const char *labels[64];
    size_t nlabels;
    const char *sets[64];
    size_t nsets;
    long limit, count;
    int wait, follow, help, all;
} opts;

static const struct option long_opts[] = {
    {"server", required_argument, NULL, OPT_SERVER},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"help", no_argument, NULL, 'h'},
    {"file", required_argument, NULL, 'f'},
    {"output", required_argument, NULL, 'o'},
    {"set", required_argument, NULL, OPT_SET},
    {"wait", no_argument, NULL, OPT_WAIT},
    {"state", required_argument, NULL, OPT_STATE},
    {"queue", required_argument, NULL, OPT_QUEUE},
    {"label", required_argument, NULL, OPT_LABEL},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"count", required_argument, NULL, OPT_COUNT},
    {"page-token", required_argument, NULL, OPT_PAGE_TOKEN},
    {"all", no_argument, NULL, OPT_ALL},
    {"rank", required_argument, NULL, 'r'},
    {"follow", no_argument, NULL, 'F'},
    {NULL, 0, NULL, 0},
};

static int usage_error(const char *name, const char *msg)
{
    fprintf(stderr, "trainyard %s: %s (see trainyard %s --help)\n", name, msg, name);
    return CLI_EXIT_USAGE;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Whether the space-separated list `allowed` holds the word `flag`. */
static int allows(const char *allowed, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = allowed; n && (p = strstr(p, flag)); p += n)
        if ((p == allowed || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/*
 * Parses argv (argv[0] the command) into *o, allowing only the flags in `allowed` (short
 * letters, and for long-only flags their names separated by spaces). Returns -1 after printing
 * a usage error, 1 for --help (printed), else 0 with optind at the first operand.
 */
static int parse_opts(const cmd *c, int argc, char **argv, const char *allowed, opts *o)
{
    /* -f is the job file of submit and --follow of logs, as in tail -f. */
    int f_follows = strcmp(c->name, "logs") == 0;
    int ch;
    memset(o, 0, sizeof *o);
    optind = 0; /* glibc: a full reset, for a second parse in one process */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, f_follows ? "hr:f" : "hf:o:r:", long_opts, NULL)) != -1) {
        char flag[32] = "";
        for (const struct option *lo = long_opts; lo->name; lo++)
            if (lo->val == ch)
                snprintf(flag, sizeof flag, "%s", lo->name);
        if (ch == '?' ||
            (ch != 'h' && ch != OPT_SERVER && ch != OPT_TOKEN_FILE && !allows(allowed, flag))) {
            char msg[128];
            snprintf(msg, sizeof msg, "unknown option or missing value: %s",
                     argv[optind - 1 > 0 ? optind - 1 : 0]);
            usage_error(c->name, msg);
            return -1;
        }
        switch (ch) {
        case 'h':
            o->help = 1;
            break;
        case OPT_SERVER:
            o->server = optarg;
            break;
        case OPT_TOKEN_FILE:
            o->token_file = optarg;
            break;
        case 'f':
            if (f_follows)
                o->follow = 1;
            else
                o->file = optarg;
            break;
        case 'o':
            o->output = optarg;
            break;
        case 'r':
            o->rank = optarg;
            break;
        case 'F':
            o->follow = 1;
            break;
        case OPT_WAIT:
            o->wait = 1;
            break;
        case OPT_STATE:
            o->state = optarg;
            break;
        case OPT_QUEUE:
            o->queue = optarg;
            break;
        case OPT_PAGE_TOKEN:
            o->page_token = optarg;
            break;
        case OPT_ALL:
            o->all = 1;
            break;
        case OPT_SET:
        case OPT_LABEL: {
            const char **arr = ch == OPT_SET ? o->sets : o->labels;
            size_t *n = ch == OPT_SET ? &o->nsets : &o->nlabels;
            if (*n == 64) {
                usage_error(c->name, "at most 64 --set or --label flags");
                return -1;
            }
            arr[(*n)++] = optarg;
            break;
        }
        case OPT_LIMIT:
        case OPT_COUNT:
            if (parse_long(optarg, 1, 1000000, ch == OPT_LIMIT ? &o->limit : &o->count)) {
                usage_error(c->name, "--limit and --count take a positive number");
                return -1;
            }
            break;
        default:
            break;
        }
    }
    if (o->help) {
        printf("Usage: trainyard %s %s\n%s\n\n" COMMON_HELP, c->name, c->usage, c->summary);
        return 1;
    }
    return 0;
}

/* A client for the server and token the flags, environment and config file give. */
static int connect_cli(const char *name, const opts *o, cli_http **out)
{
    cli_conf conf;
    char err[512];
    ty_err e = cli_conf_resolve(o->server, o->token_file, &conf, err, sizeof err);
    int rc = CLI_EXIT_USAGE;
    if (e) {
        fprintf(stderr, "trainyard %s: %s\n", name, err);
        goto out;
    }
    if (!conf.server[0]) {
        usage_error(name, "no server: give --server URL, set TRAINYARD_SERVER, or run "
                          "trainyard login");
        goto out;
    }
    e = cli_http_new(conf.server, conf.token, out);
    if (e == TY_EINVAL) {
        fprintf(stderr,
                "trainyard %s: the server must be an http:// or https:// URL, and the "
                "token visible ASCII\n",
                name);
        goto out;
    }
    rc = e ? CLI_EXIT_FAIL : CLI_EXIT_OK;
out:
    cli_conf_clear(&conf);
    return rc;
}

static int is_2xx(const cli_resp *r)
{
    return r->status >= 200 && r->status < 300;
}

static const char *str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "-";
}

/* Prints v as -o asks: json (default) or yaml. */
static int print_doc(const char *name, const char *output, const json_t *v)
{
    if (!output || strcmp(output, "json") == 0) {
        if (json_dumpf(v, stdout, JSON_INDENT(2)) != 0)
            return CLI_EXIT_FAIL;
        putchar('\n');
        return CLI_EXIT_OK;
    }
    if (strcmp(output, "yaml") == 0)
        return cli_json_to_yaml(v, stdout) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
    return usage_error(name, "-o takes json or yaml");
}

/* Whether -o, when given, names a document format (json or yaml). */
static int output_ok(const opts *o)
{
    return !o->output || !strcmp(o->output, "json") || !strcmp(o->output, "yaml");
}

/* GETs path and prints its document as -o says, else as `print` shows it to a person. */
static int get_and_print(const char *name, const opts *o, const char *path,
                         void (*print)(const json_t *))
{
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = connect_cli(name, o, &c);
    if (rc == CLI_EXIT_OK) {
        cli_http_do(c, "GET", path, NULL, &r);
        if (!is_2xx(&r) || !r.json)
            rc = cli_report(name, &r, stderr);
        else if (o->output)
            rc = print_doc(name, o->output, r.json);
        else
            print(r.json);
    }
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

/* ---- an aligned table ------------------------------------------------------ */

/* rows: an array of arrays of strings, the first the header. Columns are as wide as their
 * widest cell plus two spaces; the last is not padded. */
static void print_table(const json_t *rows)
{
    size_t widths[16] = {0}, i, j;
    json_t *row, *cell;
    json_array_foreach(rows, i, row)
    {
        json_array_foreach(row, j, cell)
        {
            if (j < 16 && json_string_length(cell) > widths[j])
                widths[j] = json_string_length(cell);
        }
    }
    json_array_foreach(rows, i, row)
    {
        size_t n = json_array_size(row);
        json_array_foreach(row, j, cell)
        {
            if (j + 1 < n)
                printf("%-*s  ", (int)widths[j < 16 ? j : 15], json_string_value(cell));
            else
                printf("%s\n", json_string_value(cell));
        }
    }
}

/* ---- submit ------------------------------------------------------------------ */

static char *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "re");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %m", path);
        return NULL;
    }
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb)
                goto fail;
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > JOB_FILE_MAX) {
            snprintf(err, errlen, "%s is larger than %zu bytes", path, JOB_FILE_MAX);
            goto fail;
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read %s", path);
        goto fail;
    }
    buf[n] = '\0';
    *len = n;
    if (f != stdin)
        fclose(f);
    return buf;
fail:
    free(buf);
    if (f != stdin)
        fclose(f);
    return NULL;
}

/*
 * The request body of -f FILE (YAML or JSON) with each --set applied, as compact JSON in
 * *body (new). Returns an exit status, after printing what was wrong.
 */
static int load_body(const char *name, const opts *o, char **body)
{
    char err[512] = "", *text;
    json_t *doc = NULL;
    size_t len = 0;
    int rc = CLI_EXIT_USAGE;
    if (!(text = read_all(o->file, &len, err, sizeof err))) {
        fprintf(stderr, "trainyard %s: %s\n", name, err);
        return rc;
    }
    if (cli_yaml_to_json(text, len, &doc, err, sizeof err) != TY_OK) {
        fprintf(stderr, "trainyard %s: %s:%s\n", name, o->file, err); /* file:line:col: */
        goto out;
    }
    for (size_t i = 0; i < o->nsets; i++) {
        if (cli_json_set(doc, o->sets[i], err, sizeof err) != TY_OK) {
            fprintf(stderr, "trainyard %s: %s\n", name, err);
            goto out;
        }
    }
    rc = (*body = json_dumps(doc, JSON_COMPACT)) ? CLI_EXIT_OK : CLI_EXIT_FAIL;
out:
    json_decref(doc);
    free(text);
    return rc;
}

static int is_terminal(const char *state)
{
    return strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
           strcmp(state, "CANCELLED") == 0;
}

/* One job event of a stream, printed; what --wait and watch share. */
typedef struct follower {
    char state[32]; /* the last state an event moved to */
    long seen, count;
    int with_job; /* print the job's id and name (watch) */
} follower;

static int on_job_event(void *ud, const char *event, const char *id, const char *data)
{
    follower *f = ud;
    (void)id;
    if (strcmp(event, "job") != 0)
        return 0;
    json_t *ev = json_loads(data, 0, NULL);
    if (!ev)
        return 0;
    const char *from = json_string_value(json_object_get(ev, "from"));
    const char *to = str(ev, "to");
    if (f->with_job)
        printf("%s  %s  %s  ", str(ev, "time"), str(ev, "job_id"), str(ev, "name"));
    else
        printf("%s  ", str(ev, "time"));
    printf("%s -> %s  %s  %s\n", from ? from : "(new)", to, str(ev, "reason"), str(ev, "message"));
    fflush(stdout);
    snprintf(f->state, sizeof f->state, "%s", to);
    json_decref(ev);
    f->seen++;
    if (f->count && f->seen >= f->count)
        return 1;
    return !f->with_job && is_terminal(f->state);
}

/*
 * Follows path (an event stream) until the callback stops it or the stream ends; with
 * resume_until_terminal an end before the job's terminal state is a cut, as is a transfer that
 * failed midway: the stream is resumed from its last id, at most FOLLOW_RETRIES times. A 429
 * (too many streams open) waits for a place. A server that never answered is
 * CLI_EXIT_UNREACHABLE at once. Returns an exit status.
 */
static int follow_stream(const char *name, cli_http *c, const char *path, follower *f,
                         int resume_until_terminal)
{
    char last_id[64] = "";
    int answered = 0, waited_place = 0;
    for (int attempt = 0;; attempt++) {
        cli_sse sse;
        cli_resp r;
        int rc;
        cli_sse_init(&sse, on_job_event, f);
        int ended =
            cli_http_stream(c, path, last_id[0] ? last_id : NULL, cli_sse_feed, &sse, &r) == 0;
        if (sse.id[0])
            snprintf(last_id, sizeof last_id, "%s", sse.id);
        cli_sse_free(&sse);
        if (r.status == 429) {
            /* Too many streams open (this token's or the server's cap): not an error of the
             * job; wait for a place as the server's Retry-After (5 s) says, without limit. */
            if (!waited_place)
                fprintf(stderr, "trainyard %s: too many streams open; waiting for a place\n", name);
            waited_place = 1;
            cli_resp_free(&r);
            attempt--;
            sleep(5);
            continue;
        }
        if ((r.status == 0 && !answered) || (r.status && !is_2xx(&r))) {
            rc = cli_report(name, &r, stderr);
            cli_resp_free(&r);
            return rc;
        }
        answered = 1;
        int done = (ended && (!resume_until_terminal || is_terminal(f->state))) ||
                   (f->count && f->seen >= f->count);
        if (!done && attempt == FOLLOW_RETRIES) {
            fprintf(stderr, "trainyard %s: the stream was cut off %d times; last: %s\n", name,
                    attempt + 1, r.err[0] ? r.err : "ended early");
            cli_resp_free(&r);
            return CLI_EXIT_FAIL;
        }
        cli_resp_free(&r);
        if (done)
            return CLI_EXIT_OK;
        sleep(1); /* a restarting server gets a moment before the next try */
    }
}

/*
 * What submit and sweep create share: parses `-f FILE [--set]... [--wait] [-o id|json|yaml]`
 * into *o, POSTs the file's body to path and prints the new resource's id (or the resource).
 * Returns an exit status, or -1 when --help was printed (exit 0, nothing else to do); on
 * CLI_EXIT_OK, *c is the client and r->json the created resource (free both either way).
 */
static int create_from_file(const char *name, int argc, char **argv, const char *path, opts *o,
                            cli_http **c, cli_resp *r)
{
    char *body = NULL;
    memset(r, 0, sizeof *r);
    int rc = parse_opts(find_cmd(name), argc, argv, "file output set wait", o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : -1;
    if (!o->file)
        return usage_error(name, "-f FILE is required (- for standard input)");
    if (optind < argc)
        return usage_error(name, "unexpected argument");
    if (o->output && strcmp(o->output, "json") && strcmp(o->output, "yaml") &&
        strcmp(o->output, "id"))
        return usage_error(name, "-o takes id, json or yaml");
    if ((rc = load_body(name, o, &body)) != CLI_EXIT_OK ||
        (rc = connect_cli(name, o, c)) != CLI_EXIT_OK)
        goto out;
    cli_http_do(*c, "POST", path, body, r);
    if (!is_2xx(r) || !json_string_value(json_object_get(r->json, "id"))) {
        rc = cli_report(name, r, stderr);
        goto out;
    }
    if (!o->output || strcmp(o->output, "id") == 0)
        printf("%s\n", str(r->json, "id"));
    else
        rc = print_doc(name, o->output, r->json);
    fflush(stdout);
out:
    free(body);
    return rc;
}

static int cmd_submit(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r;
    int rc = create_from_file("submit", argc, argv, "/v1/jobs", &o, &c, &r);
    if (rc == CLI_EXIT_OK && o.wait) {
        char path[256];
        follower f = {0};
        if (cli_job_path(path, sizeof path, str(r.json, "id"), "/events?follow=true")) {
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        rc = follow_stream("submit", c, path, &f, 1);
        if (rc == CLI_EXIT_OK && strcmp(f.state, "SUCCEEDED") != 0) {
            fprintf(stderr, "trainyard submit: job %s ended %s\n", str(r.json, "id"), f.state);
            rc = CLI_EXIT_FAIL;
        }
    }
out:
    cli_resp_free(&r);
    cli_http_free(c);
    return rc < 0 ? CLI_EXIT_OK : rc;
}

/* ---- list, get, events, cancel ---------------------------------------------- */

/* Adds --state, --queue, --label to the path's query. */
static ty_err add_filters(char *path, size_t len, const opts *o)
{
    ty_err e = TY_OK;
    if (o->state)
        e = cli_query_add(path, len, "state", o->state);
    if (!e && o->queue)
        e = cli_query_add(path, len, "queue", o->queue);
    for (size_t i = 0; !e && i < o->nlabels; i++)
        e = cli_query_add(path, len, "label", o->labels[i]);
    return e;
}

static json_t *labels_text(const json_t *labels)
{
    char buf[1024] = "";
    size_t used = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)labels, k, v)
    {
        int n = snprintf(buf + used, sizeof buf - used, "%s%s=%s", used ? "," : "", k,
                         json_string_value(v) ? json_string_value(v) : "");
        if (n < 0 || (size_t)n >= sizeof buf - used)
            break;
        used += (size_t)n;
    }
    return json_string(used ? buf : "-");
}

/* What a listing command read: its items, what -o prints, and the next page's token. */
typedef struct pages {
    json_t *items; /* every item of every page read (new) */
    json_t *doc;   /* the one page as the server sent it; with --all {key: items} (new) */
    char *next;    /* the token of the page after the last one read; NULL at the end (new) */
} pages;

static void pages_free(pages *p)
{
    json_decref(p->items);
    json_decref(p->doc);
    free(p->next);
}

/*
 * GETs path (its filters and limit in the query) from the page o->page_token names, or the
 * first; with o->all every page after it too, each next_page_token handed back unchanged. The
 * items are the array member `key` of each page. Returns an exit status; *out is filled either
 * way (free with pages_free).
 */
static int read_pages(const char *name, const opts *o, const char *path, const char *key,
                      pages *out)
{
    char page[8192];
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc;
    memset(out, 0, sizeof *out);
    if ((o->page_token && !(out->next = strdup(o->page_token))) || !(out->items = json_array()))
        return CLI_EXIT_FAIL;
    if ((rc = connect_cli(name, o, &c)) != CLI_EXIT_OK)
        return rc;
    for (;;) {
        snprintf(page, sizeof page, "%s", path);
        if (out->next && cli_query_add(page, sizeof page, "page_token", out->next)) {
            rc = usage_error(name, "page token too long");
            break;
        }
        cli_resp_free(&r);
        memset(&r, 0, sizeof r);
        cli_http_do(c, "GET", page, NULL, &r);
        if (!is_2xx(&r) || !r.json) {
            rc = cli_report(name, &r, stderr);
            break;
        }
        json_array_extend(out->items, json_object_get(r.json, key));
        const char *next = json_string_value(json_object_get(r.json, "next_page_token"));
        free(out->next);
        out->next = next ? strdup(next) : NULL;
        if (!o->all || !out->next) {
            out->doc = o->all ? json_pack("{s:O}", key, out->items) : json_incref(r.json);
            break;
        }
    }
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_list(int argc, char **argv)
{
    opts o;
    char path[8192] = "/v1/jobs", num[32];
    pages p;
    int rc = parse_opts(find_cmd("list"), argc, argv,
                        "output state queue label limit page-token all", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind < argc)
        return usage_error("list", "unexpected argument");
    int wide = o.output && strcmp(o.output, "wide") == 0;
    if (o.output && !wide && strcmp(o.output, "json") && strcmp(o.output, "yaml"))
        return usage_error("list", "-o takes json, yaml or wide");
    snprintf(num, sizeof num, "%ld", o.limit);
    if (add_filters(path, sizeof path, &o) ||
        (o.limit && cli_query_add(path, sizeof path, "limit", num)))
        return usage_error("list", "filters too long");
    if ((rc = read_pages("list", &o, path, "jobs", &p)) != CLI_EXIT_OK)
        goto out;
    if (o.output && !wide) {
        rc = print_doc("list", o.output, p.doc);
        goto out;
    }
    json_t *rows = json_array(), *job;
    size_t i;
    if (wide)
        json_array_append_new(rows, json_pack("[s,s,s,s,s,s,s,s]", "ID", "NAME", "STATE", "QUEUE",
                                              "PRIORITY", "WORKERS", "CREATED", "LABELS"));
    else
        json_array_append_new(rows,
                              json_pack("[s,s,s,s,s]", "ID", "NAME", "STATE", "QUEUE", "CREATED"));
    json_array_foreach(p.items, i, job)
    {
        if (wide) {
            char prio[32], workers[32];
            json_t *spec = json_object_get(job, "spec");
            snprintf(prio, sizeof prio, "%lld",
                     (long long)json_integer_value(json_object_get(job, "priority")));
            snprintf(workers, sizeof workers, "%lld",
                     (long long)json_integer_value(
                         json_object_get(json_object_get(spec, "workers"), "count")));
            json_array_append_new(rows,
                                  json_pack("[s,s,s,s,s,s,s,o]", str(job, "id"), str(job, "name"),
                                            str(job, "state"), str(job, "queue"), prio, workers,
                                            str(job, "created_at"),
                                            labels_text(json_object_get(spec, "labels"))));
        } else {
            json_array_append_new(rows, json_pack("[s,s,s,s,s]", str(job, "id"), str(job, "name"),
                                                  str(job, "state"), str(job, "queue"),
                                                  str(job, "created_at")));
        }
    }
    print_table(rows);
    json_decref(rows);
    if (p.next)
        fprintf(stderr, "(more jobs: add --page-token %s, or --all)\n", p.next);
out:
    pages_free(&p);
    return rc;
}

/* GET or POST one job resource; the answer in *r. Returns an exit status. */
static int job_request(const char *name, const opts *o, const char *method, const char *id,
                       const char *suffix, cli_http **c, cli_resp *r)
{
    char path[512];
    int rc;
    memset(r, 0, sizeof *r);
    if (cli_job_path(path, sizeof path, id, suffix) != TY_OK)
        return usage_error(name, "job id too long");
    if (!*c && (rc = connect_cli(name, o, c)) != CLI_EXIT_OK)
        return rc;
    cli_http_do(*c, method, path, NULL, r);
    return is_2xx(r) && r->json ? CLI_EXIT_OK : cli_report(name, r, stderr);
}

static int cmd_get(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = parse_opts(find_cmd("get"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error("get", "expected one job id");
    if ((rc = job_request("get", &o, "GET", argv[optind], "", &c, &r)) == CLI_EXIT_OK)
        rc = print_doc("get", o.output, r.json);
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_events(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = parse_opts(find_cmd("events"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error("events", "expected one job id");
    if ((rc = job_request("events", &o, "GET", argv[optind], "/events", &c, &r)) != CLI_EXIT_OK)
        goto out;
    if (o.output) {
        rc = print_doc("events", o.output, r.json);
        goto out;
    }
    json_t *rows = json_pack("[[s,s,s,s,s]]", "TIME", "FROM", "TO", "REASON", "MESSAGE"), *ev;
    size_t i;
    json_array_foreach(json_object_get(r.json, "events"), i, ev)
    {
        const char *from = json_string_value(json_object_get(ev, "from"));
        json_array_append_new(rows,
                              json_pack("[s,s,s,s,s]", str(ev, "time"), from ? from : "-",
                                        str(ev, "to"), str(ev, "reason"), str(ev, "message")));
    }
    print_table(rows);
    json_decref(rows);
out:
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_cancel(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    int rc = parse_opts(find_cmd("cancel"), argc, argv, "", &o), worst = CLI_EXIT_OK;
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind >= argc)
        return usage_error("cancel", "expected at least one job id");
    for (int i = optind; i < argc; i++) {
        cli_resp r;
        rc = job_request("cancel", &o, "POST", argv[i], ":cancel", &c, &r);
        if (rc == CLI_EXIT_OK)
            printf("%s  %s\n", str(r.json, "id"), str(r.json, "state"));
        cli_resp_free(&r);
        if (rc > worst)
            worst = rc;
        if (rc == CLI_EXIT_UNREACHABLE || rc == CLI_EXIT_USAGE)
            break;
    }
    cli_http_free(c);
    return worst;
}

/* ---- logs, watch -------------------------------------------------------------- */

static int write_out(void *ud, const char *p, size_t n)
{
    (void)ud;
    if (fwrite(p, 1, n, stdout) != n)
        return 1;
    fflush(stdout);
    return 0;
}

static int cmd_logs(int argc, char **argv)
{
    opts o;
    char path[512];
    long rank = 0;
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = parse_opts(find_cmd("logs"), argc, argv, "rank follow file", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error("logs", "expected one job id");
    if (o.rank && parse_long(o.rank, 0, 4095, &rank))
        return usage_error("logs", "-r takes a rank from 0 to 4095");
    char q[32];
    snprintf(q, sizeof q, "/logs?rank=%ld%s", rank, o.follow ? "&follow=true" : "");
    if (cli_job_path(path, sizeof path, argv[optind], q) != TY_OK)
        return usage_error("logs", "job id too long");
    if ((rc = connect_cli("logs", &o, &c)) != CLI_EXIT_OK)
        return rc;
    int ok = cli_http_stream(c, path, NULL, write_out, NULL, &r) == 0;
    if (!is_2xx(&r)) {
        rc = cli_report("logs", &r, stderr);
    } else if (!ok) {
        fprintf(stderr, "trainyard logs: the log was cut off: %s\n", r.err);
        rc = CLI_EXIT_FAIL;
    }
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_watch(int argc, char **argv)
{
    opts o;
    char path[8192] = "/v1/events?follow=true";
    cli_http *c = NULL;
    int rc = parse_opts(find_cmd("watch"), argc, argv, "state queue label count", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind < argc)
        return usage_error("watch", "unexpected argument");
    if (add_filters(path, sizeof path, &o))
        return usage_error("watch", "filters too long");
    if ((rc = connect_cli("watch", &o, &c)) != CLI_EXIT_OK)
        return rc;
    follower f = {.with_job = 1, .count = o.count};
    rc = follow_stream("watch", c, path, &f, 0);
    cli_http_free(c);
    return rc;
}

/* ---- login ------------------------------------------------------------------- */

static int cmd_login(int argc, char **argv)
{
    opts o;
    char token[CLI_CONF_MAX], err[512];
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = parse_opts(find_cmd("login"), argc, argv, "", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (!o.server || optind < argc)
        return usage_error("login", "--server URL is required");
    if (!o.token_file && isatty(STDIN_FILENO))
        fprintf(stderr, "Token: ");
    if (cli_read_token_file(o.token_file ? o.token_file : "-", token, sizeof token, err,
                            sizeof err) != TY_OK) {
        fprintf(stderr, "trainyard login: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    if (cli_http_new(o.server, token, &c) != TY_OK) {
        rc = usage_error("login", "the server must be an http:// or https:// URL, and the "
                                  "token visible ASCII");
        goto out;
    }
    /* One read proves the server answers and takes the token before anything is saved. */
    cli_http_do(c, "GET", "/v1/jobs?limit=1", NULL, &r);
    if (!is_2xx(&r)) {
        rc = cli_report("login", &r, stderr);
        goto out;
    }
    if (cli_conf_save(o.server, token, err, sizeof err) != TY_OK) {
        fprintf(stderr, "trainyard login: %s\n", err);
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    cli_conf_path(err, sizeof err);
    printf("Logged in to %s; saved in %s\n", o.server, err);
    rc = CLI_EXIT_OK;
out:
    explicit_bzero(token, sizeof token);
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

/* ---- sweep ------------------------------------------------------------------- */

/* A line of a list of commands: the summary's first clause, in lower case like the server's. */
static void summary_line(FILE *f, const char *name, const char *sum)
{
    size_t n = strcspn(sum, ";(");
    while (n && (sum[n - 1] == '.' || sum[n - 1] == ' '))
        n--;
    fprintf(f, "  %-14s  %c%.*s\n", name, tolower((unsigned char)sum[0]), (int)n - 1, sum + 1);
}

/* A parameter's value as a table cell: a string as it is, anything else as compact JSON. */
static json_t *value_text(const json_t *v)
{
    if (json_is_string(v))
        return json_string(json_string_value(v));
    char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_t *out = json_string(t ? t : "-");
    free(t);
    return out;
}

static json_t *objective_text(const json_t *trial)
{
    const json_t *v = json_object_get(trial, "objective_value");
    char buf[64] = "-";
    if (json_is_number(v))
        snprintf(buf, sizeof buf, "%.6g", json_number_value(v));
    return json_string(buf);
}

/* "done/total" of a sweep: its trials in a terminal state, out of all. */
static json_t *progress_text(const json_t *sw)
{
    long done = 0;
    const char *state;
    json_t *n;
    json_object_foreach(json_object_get(sw, "counts"), state, n)
    {
        if (is_terminal(state))
            done += (long)json_integer_value(n);
    }
    char buf[64];
    snprintf(buf, sizeof buf, "%ld/%lld", done,
             (long long)json_integer_value(json_object_get(sw, "trials_total")));
    return json_string(buf);
}

/* GET or POST /v1/sweeps/{id}{suffix}; the answer in *r. Returns an exit status. */
static int sweep_request(const char *name, const opts *o, const char *method, const char *id,
                         const char *suffix, cli_http **c, cli_resp *r)
{
    char path[512];
    int rc;
    memset(r, 0, sizeof *r);
    if (cli_sweep_path(path, sizeof path, id, suffix) != TY_OK)
        return usage_error(name, "sweep id too long");
    if (!*c && (rc = connect_cli(name, o, c)) != CLI_EXIT_OK)
        return rc;
    cli_http_do(*c, method, path, NULL, r);
    return is_2xx(r) && r->json ? CLI_EXIT_OK : cli_report(name, r, stderr);
}

/* The sweep as a summary and a table of its trials, the best marked with '*'. */
static void print_sweep(const json_t *sw)
{
    const json_t *obj = json_object_get(sw, "objective"), *best = json_object_get(sw, "best");
    json_t *trials = json_object_get(sw, "trials"), *t, *names = json_array(), *rows;
    json_t *progress = progress_text(sw);
    size_t i, j;
    printf("Sweep %s (%s, %s): %s, %s trials done, %lld at once\n", str(sw, "id"), str(sw, "name"),
           str(sw, "algorithm"), str(sw, "state"), json_string_value(progress),
           (long long)json_integer_value(json_object_get(sw, "parallelism")));
    json_decref(progress);
    printf("Objective: %s %s\n", str(obj, "goal"), str(obj, "metric"));
    if (json_is_object(best)) {
        json_t *v = objective_text(best);
        printf("Best: trial %lld (job %s), %s = %s\n",
               (long long)json_integer_value(json_object_get(best, "index")), str(best, "job_id"),
               str(obj, "metric"), json_string_value(v));
        json_decref(v);
    } else {
        printf("Best: none yet (no trial has reported %s)\n", str(obj, "metric"));
    }
    putchar('\n');
    /* The parameters' names, in the order the first trial that has each gives them. */
    json_array_foreach(trials, i, t)
    {
        const char *k;
        json_t *v, *seen;
        json_object_foreach(json_object_get(t, "parameters"), k, v)
        {
            int known = 0;
            json_array_foreach(names, j, seen)
            {
                if (strcmp(json_string_value(seen), k) == 0)
                    known = 1;
            }
            if (!known && json_array_size(names) < 10)
                json_array_append_new(names, json_string(k));
        }
    }
    rows = json_pack("[[s,s,s]]", "TRIAL", "JOB", "STATE");
    json_t *head = json_array_get(rows, 0), *name;
    json_array_foreach(names, j, name) json_array_append(head, name);
    json_array_append_new(head, json_string(str(obj, "metric")));
    json_int_t best_index =
        json_is_object(best) ? json_integer_value(json_object_get(best, "index")) : -1;
    json_array_foreach(trials, i, t)
    {
        char idx[32];
        json_int_t index = json_integer_value(json_object_get(t, "index"));
        snprintf(idx, sizeof idx, "%lld%s", (long long)index, index == best_index ? " *" : "");
        json_t *row = json_pack("[s,s,s]", idx, str(t, "job_id"), str(t, "state"));
        json_array_foreach(names, j, name) json_array_append_new(
            row,
            value_text(json_object_get(json_object_get(t, "parameters"), json_string_value(name))));
        json_array_append_new(row, objective_text(t));
        json_array_append_new(rows, row);
    }
    print_table(rows);
    json_decref(rows);
    json_decref(names);
}

/*
 * Polls the sweep until it is no longer running, printing its progress when it moves. Exit
 * status: 0 when it finished with a best trial, else 1 (cancelled, or no trial reported).
 */
static int wait_sweep(const opts *o, cli_http **c, const char *id)
{
    char last[64] = "";
    for (int misses = 0;;) {
        cli_resp r;
        int rc = sweep_request("sweep create", o, "GET", id, "", c, &r);
        if (rc == CLI_EXIT_UNREACHABLE && ++misses <= FOLLOW_RETRIES) {
            cli_resp_free(&r);
            sleep(1); /* a restarting server gets a moment */
            continue;
        }
        if (rc != CLI_EXIT_OK) {
            cli_resp_free(&r);
            return rc;
        }
        misses = 0;
        json_t *p = progress_text(r.json);
        if (strcmp(last, json_string_value(p)) != 0) {
            snprintf(last, sizeof last, "%s", json_string_value(p));
            fprintf(stderr, "%s trials done\n", last);
        }
        json_decref(p);
        if (strcmp(str(r.json, "state"), "running") != 0) {
            print_sweep(r.json);
            int ok = strcmp(str(r.json, "state"), "finished") == 0 &&
                     json_is_object(json_object_get(r.json, "best"));
            cli_resp_free(&r);
            return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
        }
        cli_resp_free(&r);
        sleep(1);
    }
}

static int cmd_sweep_create(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r;
    int rc = create_from_file("sweep create", argc, argv, "/v1/sweeps", &o, &c, &r);
    if (rc == CLI_EXIT_OK && o.wait)
        rc = wait_sweep(&o, &c, str(r.json, "id"));
    cli_resp_free(&r);
    cli_http_free(c);
    return rc < 0 ? CLI_EXIT_OK : rc;
}

static int cmd_sweep_list(int argc, char **argv)
{
    opts o;
    char path[256] = "/v1/sweeps", num[32];
    pages p;
    json_t *sw;
    int rc = parse_opts(find_cmd("sweep list"), argc, argv, "output limit page-token all", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind < argc)
        return usage_error("sweep list", "unexpected argument");
    if (!output_ok(&o))
        return usage_error("sweep list", "-o takes json or yaml");
    snprintf(num, sizeof num, "%ld", o.limit);
    if (o.limit && cli_query_add(path, sizeof path, "limit", num))
        return usage_error("sweep list", "--limit too long");
    if ((rc = read_pages("sweep list", &o, path, "sweeps", &p)) != CLI_EXIT_OK)
        goto out;
    if (o.output) {
        rc = print_doc("sweep list", o.output, p.doc);
        goto out;
    }
    json_t *rows =
        json_pack("[[s,s,s,s,s,s]]", "ID", "NAME", "ALGORITHM", "STATE", "DONE", "CREATED");
    size_t i;
    json_array_foreach(p.items, i, sw)
    {
        json_array_append_new(rows, json_pack("[s,s,s,s,o,s]", str(sw, "id"), str(sw, "name"),
                                              str(sw, "algorithm"), str(sw, "state"),
                                              progress_text(sw), str(sw, "created_at")));
    }
    print_table(rows);
    json_decref(rows);
    if (p.next)
        fprintf(stderr, "(more sweeps: add --page-token %s, or --all)\n", p.next);
out:
    pages_free(&p);
    return rc;
}

static int cmd_sweep_get(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r = {0};
    int rc = parse_opts(find_cmd("sweep get"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error("sweep get", "expected one sweep id");
    if (!output_ok(&o))
        return usage_error("sweep get", "-o takes json or yaml");
    if ((rc = sweep_request("sweep get", &o, "GET", argv[optind], "", &c, &r)) == CLI_EXIT_OK) {
        if (o.output)
            rc = print_doc("sweep get", o.output, r.json);
        else
            print_sweep(r.json);
    }
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_sweep_cancel(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    int rc = parse_opts(find_cmd("sweep cancel"), argc, argv, "", &o), worst = CLI_EXIT_OK;
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind >= argc)
        return usage_error("sweep cancel", "expected at least one sweep id");
    for (int i = optind; i < argc; i++) {
        cli_resp r;
        rc = sweep_request("sweep cancel", &o, "POST", argv[i], ":cancel", &c, &r);
        if (rc == CLI_EXIT_OK) {
            json_t *p = progress_text(r.json);
            printf("%s  %s  %s done\n", str(r.json, "id"), str(r.json, "state"),
                   json_string_value(p));
            json_decref(p);
        }
        cli_resp_free(&r);
        if (rc > worst)
            worst = rc;
        if (rc == CLI_EXIT_UNREACHABLE || rc == CLI_EXIT_USAGE)
            break;
    }
    cli_http_free(c);
    return worst;
}

static const cmd sweep_commands[] = {
    {"sweep create",
     "Creates a sweep from a YAML or JSON file (every trial is a job); with --wait, follows it "
     "to its end and prints its trials.",
     "-f FILE [--set KEY=VALUE]... [--wait] [-o id|json|yaml]\n"
     "  -f, --file FILE       the sweep: name, algorithm (grid or random), parameters, trials,\n"
     "                        seed, parallelism, objective, early_stopping, template\n"
     "  --set KEY=VALUE       sets a member by its dotted path (parallelism=2)\n"
     "  --wait                poll until every trial has ended; exit 0 only if the sweep\n"
     "                        finished with a best trial\n"
     "  -o FORMAT             id (default), json or yaml",
     cmd_sweep_create},
    {"sweep list", "Lists sweeps, newest first.",
     "[--limit N] [--page-token T | --all] [-o json|yaml]", cmd_sweep_list},
    {"sweep get",
     "Shows a sweep: its state, best trial, and every trial's parameters and objective.",
     "ID [-o json|yaml]", cmd_sweep_get},
    {"sweep cancel", "Cancels sweeps: every trial that has not ended.", "ID...", cmd_sweep_cancel},
};

/*
 * A command group ("sweep", "team"): runs the subcommand argv[1] of group from its table
 * subs[0..n), or prints the group's usage (about says what the group is) with a line per
 * subcommand: on standard output and exit 0 for --help, else on standard error and exit 2.
 */
static int cmd_group(const char *group, const char *about, const cmd *subs, size_t n, int argc,
                     char **argv)
{
    char name[64];
    const cmd *sub = NULL;
    if (argc >= 2 && strlen(argv[1]) < 32) {
        snprintf(name, sizeof name, "%s %s", group, argv[1]);
        sub = find_cmd(name);
    }
    if (sub)
        return sub->fn(argc - 1, argv + 1);
    FILE *f = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? stdout
                                                                                          : stderr;
    fprintf(f, "Usage: trainyard %s COMMAND [OPTIONS]\n%s\n\n", group, about);
    for (size_t i = 0; i < n; i++)
        summary_line(f, subs[i].name + strlen(group) + 1, subs[i].summary);
    fprintf(f, "\nSee trainyard %s COMMAND --help.\n", group);
    return f == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

static int cmd_sweep(int argc, char **argv)
{
    return cmd_group("sweep", "Sweeps: a job template over a search space; each trial is a job.",
                     sweep_commands, sizeof sweep_commands / sizeof sweep_commands[0], argc, argv);
}

/* ---- teams ----------------------------------------------------------------------- */

/* Whether s can name a team: a DNS label (the server says more when it is not one). */
static int team_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* A resource map of the API ({"gpu": {"a100": 16}, "cpu": "512", "memory": "4Ti"}) as one
 * line: "a100=16 cpu=512 memory=4Ti"; "-" when empty, "unlimited" for null. New string. */
static json_t *resources_text(const json_t *map)
{
    char buf[512] = "";
    size_t used = 0;
    const char *k;
    json_t *v;
    if (!map || json_is_null(map))
        return json_string("unlimited");
    json_object_foreach(json_object_get(map, "gpu"), k, v)
    {
        int n = snprintf(buf + used, sizeof buf - used, "%s%s=%lld", used ? " " : "", k,
                         (long long)json_integer_value(v));
        if (n < 0 || (size_t)n >= sizeof buf - used)
            break;
        used += (size_t)n;
    }
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "memory" : "cpu";
        const char *q = json_string_value(json_object_get(map, key));
        if (!q)
            continue;
        int n = snprintf(buf + used, sizeof buf - used, "%s%s=%s", used ? " " : "", key, q);
        if (n < 0 || (size_t)n >= sizeof buf - used)
            break;
        used += (size_t)n;
    }
    return json_string(used ? buf : "-");
}

/* The team body of -f FILE (or {} without one) with every --set applied. New string. */
static int team_body(const char *name, const opts *o, const char *team, char **body)
{
    char err[512] = "";
    json_t *doc = NULL;
    int rc;
    if (o->file) {
        char *text = NULL;
        if ((rc = load_body(name, o, &text)) != CLI_EXIT_OK)
            return rc;
        doc = json_loads(text, 0, NULL);
        free(text);
    } else {
        doc = json_object();
        for (size_t i = 0; doc && i < o->nsets; i++) {
            if (cli_json_set(doc, o->sets[i], err, sizeof err) != TY_OK) {
                fprintf(stderr, "trainyard %s: %s\n", name, err);
                json_decref(doc);
                return CLI_EXIT_USAGE;
            }
        }
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        fprintf(stderr, "trainyard %s: the team must be a mapping\n", name);
        return CLI_EXIT_USAGE;
    }
    if (team && json_object_set_new(doc, "name", json_string(team))) {
        json_decref(doc);
        return CLI_EXIT_FAIL;
    }
    *body = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return *body ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static void print_team(const json_t *t)
{
    json_t *q = resources_text(json_object_get(t, "quota"));
    json_t *b = resources_text(json_object_get(t, "borrowing_limit"));
    json_t *u = resources_text(json_object_get(t, "usage"));
    json_t *o = resources_text(json_object_get(t, "borrowed"));
    printf("name:             %s\n"
           "weight:           %lld\n"
           "quota:            %s\n"
           "borrowing limit:  %s\n"
           "usage:            %s\n"
           "borrowed:         %s\n"
           "pending:          %lld\n"
           "admitted:         %lld\n",
           str(t, "name"), (long long)json_integer_value(json_object_get(t, "weight")),
           json_string_value(q), json_string_value(b), json_string_value(u), json_string_value(o),
           (long long)json_integer_value(json_object_get(t, "pending")),
           (long long)json_integer_value(json_object_get(t, "admitted")));
    json_decref(q);
    json_decref(b);
    json_decref(u);
    json_decref(o);
}

/* POST /v1/teams (create) or PUT /v1/teams/NAME (set), then prints the team. */
static int team_write(const char *name, int argc, char **argv, int create)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r = {0};
    char *body = NULL, path[128];
    int rc = parse_opts(find_cmd(name), argc, argv, "file output set", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error(name, "expected one team name");
    if (!team_name_ok(argv[optind]))
        return usage_error(name, "a team name is 1-63 characters of a-z, 0-9 and '-'");
    if (o.output && strcmp(o.output, "json") && strcmp(o.output, "yaml") &&
        strcmp(o.output, "name"))
        return usage_error(name, "-o takes name, json or yaml");
    snprintf(path, sizeof path, create ? "/v1/teams" : "/v1/teams/%s", argv[optind]);
    if ((rc = team_body(name, &o, argv[optind], &body)) != CLI_EXIT_OK ||
        (rc = connect_cli(name, &o, &c)) != CLI_EXIT_OK)
        goto out;
    cli_http_do(c, create ? "POST" : "PUT", path, body, &r);
    if (!is_2xx(&r) || !r.json) {
        rc = cli_report(name, &r, stderr);
        goto out;
    }
    if (!o.output || strcmp(o.output, "name") == 0)
        printf("%s\n", str(r.json, "name"));
    else
        rc = print_doc(name, o.output, r.json);
out:
    free(body);
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static int cmd_team_create(int argc, char **argv)
{
    return team_write("team create", argc, argv, 1);
}

static int cmd_team_set(int argc, char **argv)
{
    return team_write("team set", argc, argv, 0);
}

static int cmd_team_get(int argc, char **argv)
{
    opts o;
    char path[128];
    int rc = parse_opts(find_cmd("team get"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind + 1 != argc)
        return usage_error("team get", "expected one team name");
    if (!team_name_ok(argv[optind]))
        return usage_error("team get", "a team name is 1-63 characters of a-z, 0-9 and '-'");
    if (!output_ok(&o))
        return usage_error("team get", "-o takes json or yaml");
    snprintf(path, sizeof path, "/v1/teams/%s", argv[optind]);
    return get_and_print("team get", &o, path, print_team);
}

/* The teams of GET /v1/teams, a row each. */
static void print_teams(const json_t *doc)
{
    json_t *t;
    size_t i;
    json_t *rows =
        json_pack("[[s,s,s,s,s,s]]", "NAME", "WEIGHT", "QUOTA", "USAGE", "PENDING", "ADMITTED");
    json_array_foreach(json_object_get(doc, "teams"), i, t)
    {
        char w[24], p[24], a[24];
        snprintf(w, sizeof w, "%lld", (long long)json_integer_value(json_object_get(t, "weight")));
        snprintf(p, sizeof p, "%lld", (long long)json_integer_value(json_object_get(t, "pending")));
        snprintf(a, sizeof a, "%lld",
                 (long long)json_integer_value(json_object_get(t, "admitted")));
        json_array_append_new(rows, json_pack("[s,s,o,o,s,s]", str(t, "name"), w,
                                              resources_text(json_object_get(t, "quota")),
                                              resources_text(json_object_get(t, "usage")), p, a));
    }
    print_table(rows);
    json_decref(rows);
}

static int cmd_team_list(int argc, char **argv)
{
    opts o;
    int rc = parse_opts(find_cmd("team list"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind < argc)
        return usage_error("team list", "unexpected argument");
    if (!output_ok(&o))
        return usage_error("team list", "-o takes json or yaml");
    return get_and_print("team list", &o, "/v1/teams", print_teams);
}

/* The entries of GET /v1/queue, a row each, in admission order. */
static void print_queue(const json_t *doc)
{
    json_t *t;
    size_t i;
    json_t *rows = json_pack("[[s,s,s,s,s,s,s,s,s]]", "POSITION", "TEAM_POS", "LINE_POS", "ID",
                             "NAME", "TEAM", "QUEUE", "REASON", "MESSAGE");
    json_array_foreach(json_object_get(doc, "jobs"), i, t)
    {
        const json_t *pr = json_object_get(t, "pending_reason");
        char pos[24] = "-", tpos[24] = "-", lpos[24];
        if (json_is_object(pr)) {
            snprintf(pos, sizeof pos, "%lld",
                     (long long)json_integer_value(json_object_get(pr, "position")));
            snprintf(tpos, sizeof tpos, "%lld",
                     (long long)json_integer_value(json_object_get(pr, "team_position")));
        }
        snprintf(lpos, sizeof lpos, "%lld",
                 (long long)json_integer_value(json_object_get(t, "line_position")));
        json_array_append_new(
            rows, json_pack("[s,s,s,s,s,s,s,s,s]", pos, tpos, lpos, str(t, "id"), str(t, "name"),
                            str(t, "team"), str(t, "queue"),
                            json_is_object(pr) ? str(pr, "reason") : "(not considered yet)",
                            json_is_object(pr) ? str(pr, "message") : ""));
    }
    print_table(rows);
    json_decref(rows);
}

/* trainyard queue [TEAM]: the PENDING jobs in admission order, with where they stand. */
static int cmd_queue(int argc, char **argv)
{
    opts o;
    char path[160];
    int rc = parse_opts(find_cmd("queue"), argc, argv, "output limit", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (argc - optind > 1)
        return usage_error("queue", "unexpected argument");
    if (!output_ok(&o))
        return usage_error("queue", "-o takes json or yaml");
    const char *team = optind < argc ? argv[optind] : NULL;
    if (team && !team_name_ok(team))
        return usage_error("queue", "TEAM is a team's name");
    snprintf(path, sizeof path, "/v1/queue?limit=%ld%s%s", o.limit > 0 ? o.limit : 100L,
             team ? "&team=" : "", team ? team : "");
    return get_and_print("queue", &o, path, print_queue);
}

#define TEAM_BODY_HELP                                                                             \
    "  -f, --file FILE       the team (YAML or JSON): quota, borrowing_limit, weight, e.g.\n"      \
    "                        quota: {gpu: {a100: 16}, cpu: \"512\", memory: 4Ti}\n"                \
    "  --set KEY=VALUE       sets a member by its dotted path, with or without -f:\n"              \
    "                        --set quota.gpu.a100=16 --set quota.memory=4Ti --set weight=2\n"      \
    "  -o FORMAT             name (default), json or yaml"

static const cmd team_commands[] = {
    {"team create", "Creates a team (admin); a team without a quota is unlimited.",
     "NAME [-f FILE] [--set KEY=VALUE]... [-o name|json|yaml]\n" TEAM_BODY_HELP, cmd_team_create},
    {"team set",
     "Replaces a team's quota, borrowing limit and weight (admin); the next admission uses "
     "them.",
     "NAME [-f FILE] [--set KEY=VALUE]... [-o name|json|yaml]\n" TEAM_BODY_HELP, cmd_team_set},
    {"team get", "Shows a team: its quota, usage, what it borrows, pending and admitted jobs.",
     "NAME [-o json|yaml]", cmd_team_get},
    {"team list", "Lists the teams the token may see (every team for an admin).", "[-o json|yaml]",
     cmd_team_list},
};
static const size_t nteam_commands = sizeof team_commands / sizeof team_commands[0];

static int cmd_team(int argc, char **argv)
{
    return cmd_group("team", "Teams own tokens, jobs and sweeps, and have a quota.", team_commands,
                     nteam_commands, argc, argv);
}

/* ---- the cluster ------------------------------------------------------------------ */

static void int_cell(json_t *row, const json_t *obj, const char *key)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(json_object_get(obj, key)));
    json_array_append_new(row, json_string(buf));
}

/* trainyard cluster: the cluster as placement sees it, in tables. */
static void print_cluster(const json_t *c)
{
    size_t i, k;
    json_t *t, *f;
    json_t *rows =
        json_pack("[[s,s,s,s,s,s,s,s,s,s,s,s]]", "ZONE", "GPU_TYPE", "NODES", "READY", "CORDONED",
                  "QUARANTINED", "SPOT", "ON_DEMAND", "GPUS", "TRAINYARD", "OTHERS", "FREE");
    json_array_foreach(json_object_get(c, "zones"), i, t)
    {
        const json_t *n = json_object_get(t, "nodes"), *g = json_object_get(t, "gpus");
        json_t *row = json_pack("[s,s]", str(t, "zone"), str(t, "gpu_type"));
        int_cell(row, n, "total");
        int_cell(row, n, "ready");
        int_cell(row, n, "cordoned");
        int_cell(row, n, "quarantined");
        int_cell(row, n, "spot");
        int_cell(row, n, "on_demand");
        int_cell(row, g, "allocatable");
        int_cell(row, g, "trainyard");
        int_cell(row, g, "others");
        int_cell(row, g, "free");
        json_array_append_new(rows, row);
    }
    print_table(rows);
    json_decref(rows);
    if (json_array_size(json_object_get(c, "node_groups"))) {
        rows = json_pack("[[s,s,s,s,s,s,s]]", "NODE_GROUP", "ZONE", "GPU_TYPE", "CAPACITY",
                         "GPUS_PER_NODE", "SIZE", "MAX_SIZE");
        json_array_foreach(json_object_get(c, "node_groups"), i, t)
        {
            json_t *row = json_pack("[s,s,s,s]", str(t, "name"), str(t, "zone"), str(t, "gpu_type"),
                                    str(t, "capacity"));
            int_cell(row, t, "gpus_per_node");
            int_cell(row, t, "size");
            int_cell(row, t, "max_size");
            json_array_append_new(rows, row);
        }
        printf("\n");
        print_table(rows);
        json_decref(rows);
        json_array_foreach(json_object_get(c, "node_groups"), i, t)
        {
            const json_t *m = json_object_get(t, "mismatch");
            if (json_is_object(m))
                printf("Node group %s: %s\n", str(t, "name"), str(m, "message"));
        }
    }
    if (json_array_size(json_object_get(c, "unknown_nodes"))) {
        printf("\nNodes the cluster profile does not know:\n");
        rows = json_pack("[[s,s,s,s,s]]", "NODE", "ZONE", "NODE_GROUP", "GPU_PRODUCT", "WHY");
        json_array_foreach(json_object_get(c, "unknown_nodes"), i, t) json_array_append_new(
            rows, json_pack("[s,s,s,s,s]", str(t, "name"), str(t, "zone"), str(t, "node_group"),
                            str(t, "gpu_product"), str(t, "message")));
        print_table(rows);
        json_decref(rows);
    }
    const json_t *q = json_object_get(c, "quarantine");
    printf("\nQuarantine: %lld failures of at least %lld jobs within %lld s; released after "
           "%lld s\n",
           (long long)json_integer_value(json_object_get(q, "failures")),
           (long long)json_integer_value(json_object_get(q, "min_jobs")),
           (long long)json_integer_value(json_object_get(q, "window_seconds")),
           (long long)json_integer_value(json_object_get(q, "release_seconds")));
    json_array_foreach(json_object_get(c, "quarantined_nodes"), i, t)
    {
        printf("\nQuarantined: %s since %s until %s: %s\n", str(t, "name"), str(t, "since"),
               str(t, "release_at"), str(t, "reason"));
        rows = json_pack("[[s,s,s,s,s]]", "  TIME", "JOB", "ATTEMPT", "RANK", "CAUSE");
        json_array_foreach(json_object_get(t, "evidence"), k, f)
        {
            char when[64];
            snprintf(when, sizeof when, "  %s", str(f, "time"));
            json_t *row = json_pack("[s,s]", when, str(f, "job_id"));
            int_cell(row, f, "attempt");
            int_cell(row, f, "rank");
            json_array_append_new(row, json_string(str(f, "cause")));
            json_array_append_new(rows, row);
        }
        print_table(rows);
        json_decref(rows);
    }
}

static int cmd_cluster_release(int argc, char **argv)
{
    opts o;
    cli_http *c = NULL;
    cli_resp r = {0};
    char path[512];
    int rc = parse_opts(find_cmd("cluster release"), argc, argv, "", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (argc - optind != 1)
        return usage_error("cluster release", "expected one node name");
    const char *node = argv[optind];
    if (!*node || strlen(node) > 253 || strpbrk(node, "/:?#% "))
        return usage_error("cluster release", "NODE is a node's name");
    snprintf(path, sizeof path, "/v1/cluster/nodes/%s:release", node);
    if ((rc = connect_cli("cluster release", &o, &c)) != CLI_EXIT_OK)
        goto out;
    cli_http_do(c, "POST", path, NULL, &r);
    if (!is_2xx(&r) || !r.json) {
        rc = cli_report("cluster release", &r, stderr);
        goto out;
    }
    printf("%s  released\n", str(r.json, "name"));
out:
    cli_resp_free(&r);
    cli_http_free(c);
    return rc;
}

static const cmd cluster_commands[] = {
    {"cluster release",
     "Ends a node's quarantine now (admin): placement uses it again. Nothing is written to the "
     "node.",
     "NODE", cmd_cluster_release},
};

/* trainyard cluster [release NODE] */
static int cmd_cluster(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "release") == 0)
        return cmd_cluster_release(argc - 1, argv + 1);
    opts o;
    int rc = parse_opts(find_cmd("cluster"), argc, argv, "output", &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    if (optind < argc)
        return usage_error("cluster", "unexpected argument");
    if (!output_ok(&o))
        return usage_error("cluster", "-o takes json or yaml");
    return get_and_print("cluster", &o, "/v1/cluster", print_cluster);
}

/* ---- the table ----------------------------------------------------------------- */

static const cmd commands[] = {
    {"submit",
     "Submits a job from a YAML or JSON file; with --wait, follows it to its end and "
     "exits 0 only if it SUCCEEDED.",
     "-f FILE [--set KEY=VALUE]... [--wait] [-o id|json|yaml]\n"
     "  -f, --file FILE       the job (YAML, anchors and merge keys allowed, or JSON; - reads\n"
     "                        standard input)\n"
     "  --set KEY=VALUE       sets a member by its dotted path (workers.count=4); VALUE is\n"
     "                        JSON when it parses as JSON, else a string\n"
     "  --wait                print the job's state changes until it ends\n"
     "  -o FORMAT             id (default), json or yaml",
     cmd_submit},
    {"list", "Lists jobs, newest first, as an aligned table.",
     "[--state S[,S]] [--queue Q] [--label K=V]... [--limit N] [--page-token T | --all]\n"
     "     [-o json|yaml|wide]\n"
     "  --limit N             jobs per page (the server's default: 100)\n"
     "  --page-token T        the page after the one that printed T\n"
     "  --all                 every page, not just the first",
     cmd_list},
    {"get", "Shows one job.", "ID [-o json|yaml]", cmd_get},
    {"events", "Shows a job's state changes, oldest first.", "ID [-o json|yaml]", cmd_events},
    {"logs", "Prints what one rank of a job wrote; with -f, follows it until the rank ends.",
     "ID [-r RANK] [-f]\n"
     "  -r, --rank RANK       the rank (default 0)\n"
     "  -f, --follow          keep printing until the rank ends",
     cmd_logs},
    {"watch", "Prints one line per state change of any job, live.",
     "[--state S] [--queue Q] [--label K=V]... [--count N]\n"
     "  --count N             exit after N changes",
     cmd_watch},
    {"cancel", "Cancels jobs; prints each one's state after the request.", "ID...", cmd_cancel},
    {"login", "Checks a token against the server and saves both in the config file (0600).",
     "--server URL [--token-file PATH]\n"
     "  the token is read from PATH, else from standard input",
     cmd_login},
    {"sweep", "Creates, lists, shows and cancels sweeps (sweep create|list|get|cancel).",
     "COMMAND [OPTIONS]", cmd_sweep},
    {"team", "Creates, shows, lists and changes teams (team create|get|list|set).",
     "COMMAND [OPTIONS]", cmd_team},
    {"queue",
     "Lists the PENDING jobs in the order admission would take them: the lines' heads by "
     "position with why each waits, then the jobs behind them.",
     "[TEAM] [--limit N] [-o json|yaml]\n"
     "  TEAM                  one team's queue (admin; a team's token sees its own)\n"
     "  --limit N             at most N jobs (default 100, at most 1000)",
     cmd_queue},
    {"cluster",
     "Shows the cluster as placement sees it: nodes and GPUs per zone and GPU type, node "
     "groups, nodes the cluster profile does not know, quarantined nodes "
     "(cluster release NODE ends a quarantine).",
     "[-o json|yaml] | release NODE", cmd_cluster},
};

static const cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    for (size_t i = 0; i < sizeof sweep_commands / sizeof sweep_commands[0]; i++)
        if (strcmp(sweep_commands[i].name, name) == 0)
            return &sweep_commands[i];
    for (size_t i = 0; i < nteam_commands; i++)
        if (strcmp(team_commands[i].name, name) == 0)
            return &team_commands[i];
    for (size_t i = 0; i < sizeof cluster_commands / sizeof cluster_commands[0]; i++)
        if (strcmp(cluster_commands[i].name, name) == 0)
            return &cluster_commands[i];
    return NULL;
}

int cli_has_command(const char *name)
{
    return find_cmd(name) != NULL;
}

int cli_main(int argc, char **argv)
{
    const cmd *c = argc > 0 ? find_cmd(argv[0]) : NULL;
    if (!c) {
        cli_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return c->fn(argc, argv);
}

void cli_usage(FILE *f)
{
    fputs("Usage: trainyard COMMAND [OPTIONS]\n"
          "\n"
          "Trainyard: a job-submission service for distributed training.\n"
          "\n"
          "Server:\n"
          "  serve           run the API server\n"
          "  token           create, list or revoke API tokens\n"
          "\n"
          "Client (over HTTP; server and token from --server/--token-file, TRAINYARD_SERVER/\n"
          "TRAINYARD_TOKEN, or the file trainyard login writes):\n",
          f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        summary_line(f, commands[i].name, commands[i].summary);
    fputs("\n"
          "Options:\n"
          "  --help          show this help (also: trainyard COMMAND --help)\n"
          "  --version       print the version\n"
          "\n"
          "Exit status: 0 ok, 1 failed, 2 usage, 3 not found, 4 not authorized, 5 the server\n"
          "cannot be reached.\n",
          f);
}
